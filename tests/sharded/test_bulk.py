"""Bulk writes at scale, in miniature: the array form of write_kv, spilled writes whose memory
does not grow with the key count, the same bytes on every path, streaming reads, bad input.
The large figures are measured by tools/bench_bulk.py; these runs stay small."""

from __future__ import annotations

import gc
import gzip
import os
import tracemalloc

import numpy as np
import pytest

import ngshard

RAW = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=4, shard_bits=3,
                           minishard_index_encoding="gzip", data_encoding="raw")
GZIP = ngshard.ShardingSpec(hash="identity", preshift_bits=2, minishard_bits=3, shard_bits=2,
                            minishard_index_encoding="raw", data_encoding="gzip")
SPECS = [pytest.param(RAW, id="murmur-raw"), pytest.param(GZIP, id="identity-gzip")]


def arrays(n: int, seed: int = 0, size: int = 40, dups: int = 0):
    """Keys (with ``dups`` repeated ones), their values as one buffer, and the offsets."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    keys[n - dups:] = keys[:dups]
    sizes = rng.integers(0, size, n)
    offsets = np.r_[0, np.cumsum(sizes)]
    return keys, rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8), offsets


def as_items(keys, values, offsets) -> dict[int, bytes]:
    blob = values.tobytes()
    return {k: blob[a:b] for k, a, b in zip(keys.tolist(), offsets[:-1].tolist(),
                                            offsets[1:].tolist())}  # the last value wins


def shard_files(path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.shard"))}


@pytest.mark.parametrize("spec", SPECS)
def test_every_path_writes_the_same_bytes(tmp_path, spec):
    """Arrays, a dict, reversed pairs spilled through a tiny buffer, and staged set_many all
    give byte-identical shards: a shard's bytes depend on its contents alone."""
    keys, values, offsets = arrays(3000, dups=200)
    items = as_items(keys, values, offsets)
    ngshard.write_kv(tmp_path / "dict", spec, items)
    ngshard.write_kv(tmp_path / "arrays", spec, keys=keys, values=values, offsets=offsets)
    ngshard.write_kv(tmp_path / "spilled", spec, reversed(list(items.items())),
                     buffer_bytes=4000)
    with ngshard.open_kv(tmp_path / "staged", spec, "w", staged_bytes=5000) as kv:
        kv.set_many(keys[:1000], values, offsets[:1001])
        kv.set_many(keys[1000:], values, offsets[1000:])
    expected = shard_files(tmp_path / "dict")
    assert len(expected) == spec.num_shards
    for other in ("arrays", "spilled", "staged"):
        assert shard_files(tmp_path / other) == expected, other
    kv = ngshard.open_kv(tmp_path / "arrays")
    assert kv.get_many(list(items)) == items
    assert all(s["garbage"] == 0 for s in kv.stats())
    # values lie in minishard index order: each index's offset row is zeros
    shard = (tmp_path / "arrays" / spec.shard_filename(1)).read_bytes()
    ranges = np.frombuffer(shard[:spec.shard_index_size], "<u8").reshape(-1, 2)
    ranges = ranges + np.uint64(spec.shard_index_size)
    for start, end in ranges[ranges[:, 1] > ranges[:, 0]].tolist():
        index = shard[start:end]
        if spec.minishard_index_encoding == "gzip":
            index = gzip.decompress(index)
        table = np.frombuffer(index, "<u8").reshape(3, -1)
        assert (table[1, 1:] == 0).all()


def test_arrays_over_millions_of_shards(tmp_path):
    """Past 2**20 shards the shard order is a sort, not a count: the same bytes."""
    spec = ngshard.ShardingSpec(hash="identity", minishard_bits=1, shard_bits=22)
    keys = np.arange(400, dtype=np.uint64)[::-1] * np.uint64(5)
    values = [b"%d" % k for k in keys.tolist()]
    ngshard.write_kv(tmp_path / "arrays", spec, keys=keys, values=values)
    ngshard.write_kv(tmp_path / "dict", spec, dict(zip(keys.tolist(), values)))
    assert shard_files(tmp_path / "arrays") == shard_files(tmp_path / "dict")
    assert len(shard_files(tmp_path / "dict")) == 400


def test_value_forms(tmp_path):
    """Values as rows of a 2-D array, as a list of bytes, as bytes with offsets."""
    keys = np.arange(500, dtype=np.uint64) * np.uint64(7919)
    rows = np.random.default_rng(1).integers(0, 256, (500, 12), dtype=np.uint8)
    expected = {int(k): r.tobytes() for k, r in zip(keys, rows)}
    forms = {"rows": dict(values=rows),
             "list": dict(values=list(expected.values())),
             "bytes": dict(values=rows.tobytes(), offsets=np.arange(0, 501 * 12, 12))}
    for name, form in forms.items():
        ngshard.write_kv(tmp_path / name, RAW, keys=keys, **form)
        assert ngshard.open_kv(tmp_path / name).get_many(keys) == expected, name
    ngshard.write_kv(tmp_path / "empty", RAW, keys=np.zeros(0, np.uint64), values=[])
    assert ngshard.open_kv(tmp_path / "empty").keys_array().size == 0


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(keys=[2**64], values=[b"x"]), ngshard.InvalidKeyError, "outside"),
    (dict(keys=[-1], values=[b"x"]), ngshard.InvalidKeyError, "outside"),
    (dict(keys=np.array([-3]), values=[b"x"]), ngshard.InvalidKeyError, "outside"),
    (dict(keys=[1.5], values=[b"x"]), ngshard.InvalidKeyError, "integer"),
    (dict(keys=[1, 2], values=[b"x", "text"]), TypeError, "key 2 must be bytes"),
    (dict(keys=[1, 2], values=[b"x"]), ValueError, "2 expected, but 1 values"),
    (dict(keys=[1, 2], values=b"abc"), TypeError, "needs offsets"),
    (dict(keys=[1, 2], values=b"abc", offsets=[0, 1]), ValueError, "3 expected"),
    (dict(keys=[1, 2], values=b"abc", offsets=[0, 2, 1]), ValueError, "never falling"),
    (dict(keys=[1, 2], values=b"abc", offsets=[0, 2, 4]), ValueError, "at most the 3 bytes"),
    (dict(keys=[1, 2], values=b"abc", offsets=[0.0, 1.0, 2.0]), ValueError, "integer"),
    (dict(keys=[1], values=3), TypeError, "values must be"),
    (dict(keys=[1]), TypeError, "needs values"),
])
def test_bad_arrays(tmp_path, kwargs, error, message):
    with pytest.raises(error, match=message):
        ngshard.write_kv(tmp_path, RAW, **kwargs)
    assert not list(tmp_path.glob("*.shard"))


def test_bad_items(tmp_path):
    with pytest.raises(TypeError, match="not both"):
        ngshard.write_kv(tmp_path, RAW, {1: b"x"}, keys=[1], values=[b"x"])
    with pytest.raises(ngshard.InvalidKeyError, match="outside"):
        ngshard.write_kv(tmp_path, RAW, [(1, b"x"), (2**64, b"y")])
    with pytest.raises(TypeError, match="value of key 2 must be bytes"):
        ngshard.write_kv(tmp_path, RAW, [(1, b"x"), (2, 2)])
    assert not list(tmp_path.glob("*.shard"))


def peak_bytes(fn) -> int:
    """Peak traced allocations (Python and numpy) while ``fn`` runs."""
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_spilled_write_memory_does_not_grow_with_the_key_count(tmp_path):
    """With the buffer fixed, 4 times the keys (64 shards, so one shard's index stays small)
    costs about the same peak memory: nothing per key stays in memory."""
    spec = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=4, shard_bits=6)

    def write(n: int) -> None:
        def pairs():
            for first in range(0, n, 4096):
                keys = np.arange(first, min(n, first + 4096), dtype=np.uint64)
                yield from zip(keys.tolist(), [b"%016d" % k for k in keys.tolist()])
        ngshard.write_kv(tmp_path / str(n), spec, pairs(), buffer_bytes=1 << 20)

    small, large = peak_bytes(lambda: write(80_000)), peak_bytes(lambda: write(320_000))
    assert large < small + (1 << 20), (small, large)  # 240,000 more keys, not 4 MB more
    kv = ngshard.open_kv(tmp_path / "320000")
    assert kv.get_many([0, 319_999]) == {0: b"%016d" % 0, 319_999: b"%016d" % 319_999}
    assert sorted(os.listdir(tmp_path / "320000")) == sorted([*shard_files(tmp_path / "320000"),
                                                               "info"])


def test_update_memory_does_not_grow_with_the_key_count(tmp_path):
    """Updates of many keys (spilled, planned and appended shard by shard) with the buffer
    and the index cache fixed: 4 times the keys (256 shards, so a shard's index stays small)
    cost about the same peak memory."""
    spec = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=4, shard_bits=8)

    def update(n: int):
        path = tmp_path / str(n)
        keys = np.arange(n, dtype=np.uint64)
        ngshard.write_kv(path, spec, keys=keys[::2], values=np.zeros((n // 2, 8), np.uint8))
        values = np.ones((20_000, 8), np.uint8)

        def run() -> None:  # what is measured: the update alone
            with ngshard.open_kv(path, mode="r+", staged_bytes=1 << 20, cache_bytes=1 << 20,
                                 strategy="append") as kv:
                for first in range(0, n, 20_000):
                    kv.set_many(keys[first:first + 20_000], values)
        return run

    small, large = peak_bytes(update(60_000)), peak_bytes(update(240_000))
    # 180,000 more keys, 2 MB at most: the changes of a group of shards planned together
    # (at most 65,536 keys), not 24 bytes per key
    assert large < small + (2 << 20), (small, large)
    kv = ngshard.open_kv(tmp_path / "240000")
    assert len(kv) == 240_000 and kv[239_999] == b"\x01" * 8


@pytest.mark.parametrize("strategy", ["append", "rewrite"])
def test_updates_of_many_keys_spill_and_stay_right(tmp_path, strategy):
    """An update of more keys than the buffer holds: spilled, planned and applied shard by
    shard; reads see the staged changes before the commit."""
    keys, values, offsets = arrays(4000, seed=3)
    ngshard.write_kv(tmp_path, RAW, keys=keys[:2000], values=values, offsets=offsets[:2001])
    expected = as_items(keys[:2000], values, offsets[:2001])
    with ngshard.open_kv(tmp_path, mode="r+", strategy=strategy, staged_bytes=10_000) as kv:
        kv.set_many(keys[1000:], values, offsets[1000:])
        gone = keys[:300:3].tolist()
        for k in gone:
            del kv[k]
        expected.update(as_items(keys[1000:], values, offsets[1000:]))
        for k in gone:
            del expected[k]
        assert kv.get_many(keys) == expected
        plan = kv.plan()
        assert {p.action for p in plan.shards} == {strategy}
        assert sum(p.sets for p in plan.shards) == 3000
        assert sum(p.deletes for p in plan.shards) == len(gone)
    kv = ngshard.open_kv(tmp_path)
    assert kv.get_many(keys) == expected and len(kv) == len(expected)


def test_streaming_reads(tmp_path):
    keys, values, offsets = arrays(2000, seed=5)
    ngshard.write_kv(tmp_path, RAW, keys=keys, values=values, offsets=offsets)
    expected = as_items(keys, values, offsets)
    kv = ngshard.open_kv(tmp_path)
    shards = list(kv.iter_keys(arrays=True))
    assert len(shards) == RAW.num_shards and all((np.diff(s) > 0).all() for s in shards)
    assert np.array_equal(np.concatenate(shards), kv.keys_array())
    assert list(kv.iter_keys()) == kv.keys_array().tolist()
    assert dict(kv.iter_items(batch=100)) == expected
    assert [k for k, _ in kv.iter_items()] == kv.keys_array().tolist()
    assert sum(s["keys"] for s in kv.stats()) == len(expected)
