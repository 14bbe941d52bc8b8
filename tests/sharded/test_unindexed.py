"""Unindexed entries (bytes no index entry points at, right before a value): a whole shard
written with them reads back (ngshard and tensorstore see only the indexed values), and
rewrites and compactions keep each one before its value, in the layout a fresh write of the
entries left gives, while dropping garbage."""

from __future__ import annotations

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard
from ngshard.sharded.shard_writer import Laid, write_shard
from ngshard.storage import open_storage

SPEC = ngshard.ShardingSpec(hash="identity", minishard_bits=2, shard_bits=0,
                            minishard_index_encoding="gzip")


def value(k: int) -> bytes:
    return f"value {k}: unindexed {7 * k % 50}".encode()


def unindexed(k: int) -> bytes:
    return bytes([k % 251]) * (7 * k % 50)


def unindexed_sizes(keys, values):
    return np.array([int(bytes(v).rsplit(b" ", 1)[1]) for v in values], np.uint64)


def write(path, keys: list[int]) -> None:
    """One shard of ``keys`` in this order, each value after its unindexed bytes."""
    laid = Laid(np.array([len(value(k)) for k in keys], np.uint64),
                [b for k in keys for b in (unindexed(k), value(k))],
                np.array([len(unindexed(k)) for k in keys], np.uint64))
    write_shard(open_storage(path), SPEC, 0, np.array(keys, np.uint64), laid)


def ts_contents(path) -> dict[int, bytes]:
    ts = pytest.importorskip("tensorstore")
    t = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{path}/",
                         "metadata": SPEC.to_json()}).result(timeout=PEER_TIMEOUT)
    futures = {int.from_bytes(k, "big"): t.read(k) for k in t.list().result(timeout=PEER_TIMEOUT)}
    return {k: f.result(timeout=PEER_TIMEOUT).value for k, f in futures.items()}


@pytest.fixture
def store(tmp_path):
    keys = [9, 1, 40, 3, 77, 12]  # any order: the bytes' order
    write(tmp_path / "kv", keys)
    return tmp_path / "kv", keys


def test_reads_with_and_without_the_unindexed_bytes(store):
    path, keys = store
    kv = ngshard.open_kv(path, SPEC, unindexed=unindexed_sizes)
    assert kv.get_many(keys) == {k: value(k) for k in keys}
    got = kv.get_many_with_unindexed(keys + [5])
    assert {k: (bytes(p), bytes(v)) for k, (p, v) in got.items()} == {
        k: (unindexed(k), value(k)) for k in keys}
    last = kv.get_many_with_unindexed([77], lambda k, v: (-3, -1))[77][0]
    assert bytes(last) == unindexed(77)[-3:-1]
    with pytest.raises(ngshard.NgShardError, match="give a span"):
        ngshard.open_kv(path, SPEC).get_many_with_unindexed(keys)


def test_tensorstore_sees_the_values(store):
    path, keys = store
    assert ts_contents(path) == {k: value(k) for k in keys}


def test_rewrites_and_compaction_keep_them(tmp_path, store):
    """An append (delete one, add one) then a compaction: the shard is byte for byte a fresh
    write of the entries left in their order, the new one last; a rewrite likewise."""
    path, keys = store
    with ngshard.open_kv(path, SPEC, "r+", unindexed=unindexed_sizes, strategy="append",
                         compact_ratio=None) as kv:
        del kv[40]
        kv[2] = value(0)  # a new value with no unindexed bytes before it
    size = (path / "0.shard").stat().st_size
    plan = ngshard.open_kv(path, SPEC, "r+", unindexed=unindexed_sizes).compact()
    assert [p.action for p in plan.shards] == ["compact"]
    assert (path / "0.shard").stat().st_size < size
    left = [k for k in keys if k != 40]
    expected = {**{k: value(k) for k in left}, 2: value(0)}
    kv = ngshard.open_kv(path, SPEC, unindexed=unindexed_sizes)
    got = kv.get_many_with_unindexed(left)
    assert {k: (bytes(p), bytes(v)) for k, (p, v) in got.items()} == {
        k: (unindexed(k), value(k)) for k in left}
    assert ts_contents(path) == expected
    fresh = tmp_path / "fresh"
    laid_keys = np.array([*left, 2], np.uint64)
    write_shard(open_storage(fresh), SPEC, 0, laid_keys, Laid(
        np.array([len(expected[k]) for k in laid_keys.tolist()], np.uint64),
        [b for k in left for b in (unindexed(k), value(k))] + [value(0)],
        np.array([len(unindexed(k)) for k in left] + [0], np.uint64)))
    assert (path / "0.shard").read_bytes() == (fresh / "0.shard").read_bytes()

    kv = ngshard.open_kv(path, SPEC, "r+", unindexed=unindexed_sizes, strategy="rewrite",
                         compact_ratio=0.0)  # a rewrite that compacts at once
    del kv[1]
    assert [p.action for p in kv.commit().shards] == ["compact"]
    got = ngshard.open_kv(path, SPEC, unindexed=unindexed_sizes).get_many_with_unindexed(left)
    assert {k: bytes(p) for k, (p, _) in got.items()} == {k: unindexed(k) for k in left
                                                         if k != 1}
    del expected[1]
    assert ts_contents(path) == expected


def test_a_length_past_the_bytes_before_a_value_is_corrupt(store):
    path, keys = store
    with pytest.raises(ngshard.CorruptDataError, match="not in the data region"):
        ngshard.open_kv(path, SPEC).get_many_with_unindexed([1], lambda k, v: (-10**6, 0))
    greedy = lambda keys, values: np.full(len(keys), 10**6, np.uint64)  # noqa: E731
    kv = ngshard.open_kv(path, SPEC, "r+", unindexed=greedy)
    with pytest.raises(ngshard.CorruptDataError, match="claims 1000000 unindexed bytes"):
        kv.compact(["0.shard"])


def test_laid_entries_with_a_key_twice_are_refused(tmp_path):
    laid = Laid(np.array([1, 1], np.uint64), [b"a", b"b"])
    with pytest.raises(ValueError, match="key 5 given twice"):
        write_shard(open_storage(tmp_path), SPEC, 0, np.array([5, 5], np.uint64), laid)
    assert not list(tmp_path.glob("*.shard"))
