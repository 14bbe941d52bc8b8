"""Values with an unindexed prefix: a whole shard built with them reads back (ngshard and
tensorstore see only the indexed values), and rewrites and compactions keep each prefix
before its value while dropping garbage."""

from __future__ import annotations

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard
from ngshard.sharded.prefixed import prefixed_shard

SPEC = ngshard.ShardingSpec(hash="identity", minishard_bits=2, shard_bits=0,
                            minishard_index_encoding="gzip")


def value(k: int) -> bytes:
    return f"value {k}: prefix {7 * k % 50}".encode()


def prefix(k: int) -> bytes:
    return bytes([k % 251]) * (7 * k % 50)


def prefix_of(keys, values):
    return np.array([int(bytes(v).rsplit(b" ", 1)[1]) for v in values], np.uint64)


@pytest.fixture
def store(tmp_path):
    keys = np.array([9, 1, 40, 3, 77, 12], np.uint64)  # any order: the bytes' order
    data = [b for k in keys.tolist() for b in (prefix(k), value(k))]
    parts = prefixed_shard(SPEC, keys, [len(prefix(k)) for k in keys.tolist()],
                           [len(value(k)) for k in keys.tolist()], data)
    (tmp_path / "kv").mkdir()
    (tmp_path / "kv" / "0.shard").write_bytes(b"".join(parts))
    return tmp_path / "kv", keys.tolist()


def test_reads_with_and_without_prefixes(store):
    path, keys = store
    kv = ngshard.open_kv(path, SPEC, prefix_of=prefix_of)
    assert kv.get_many(keys) == {k: value(k) for k in keys}
    got = kv.get_many_prefixed(keys + [5])
    assert {k: (bytes(p), bytes(v)) for k, (p, v) in got.items()} == {
        k: (prefix(k), value(k)) for k in keys}
    last = kv.get_many_prefixed([77], lambda k, v: (-3, -1))[77][0]
    assert bytes(last) == prefix(77)[-3:-1]


def test_tensorstore_sees_the_values(store):
    ts = pytest.importorskip("tensorstore")
    path, keys = store
    t = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{path}/",
                         "metadata": SPEC.to_json()}).result(timeout=PEER_TIMEOUT)
    for k in keys:
        assert t.read(k.to_bytes(8, "big")).result(timeout=PEER_TIMEOUT).value == value(k)


def test_rewrites_and_compaction_keep_prefixes(store):
    path, keys = store
    with ngshard.open_kv(path, SPEC, "r+", prefix_of=prefix_of, compact_ratio=None) as kv:
        del kv[40]
        kv[2] = value(0)  # a new value (its prefix length 0)
    size = (path / "0.shard").stat().st_size
    kv = ngshard.open_kv(path, SPEC, "r+", prefix_of=prefix_of)
    kv.compact()
    assert (path / "0.shard").stat().st_size < size
    kv = ngshard.open_kv(path, SPEC, prefix_of=prefix_of)
    left = [k for k in keys if k != 40]
    got = kv.get_many_prefixed(left)
    assert {k: (bytes(p), bytes(v)) for k, (p, v) in got.items()} == {
        k: (prefix(k), value(k)) for k in left}
    with ngshard.open_kv(path, SPEC, "r+", prefix_of=prefix_of, strategy="rewrite") as kv:
        del kv[1]
    got = ngshard.open_kv(path, SPEC, prefix_of=prefix_of).get_many_prefixed(left)
    assert {k: bytes(p) for k, (p, _) in got.items()} == {k: prefix(k) for k in left if k != 1}


def test_a_prefix_longer_than_the_bytes_before_it_is_corrupt(store):
    path, keys = store
    with pytest.raises(ngshard.CorruptDataError, match="not in the data region"):
        ngshard.open_kv(path, SPEC).get_many_prefixed([1], lambda k, v: (-10**6, 0))
    greedy = lambda keys, values: np.full(len(keys), 10**6, np.uint64)  # noqa: E731
    kv = ngshard.open_kv(path, SPEC, "r+", prefix_of=greedy)
    with pytest.raises(ngshard.CorruptDataError, match="claims a prefix of 1000000 bytes"):
        kv.compact(["0.shard"])
