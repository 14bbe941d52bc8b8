"""The one index cache: entries tied to their object's generation, never trusted when read just
after a change on a filesystem with coarse timestamps, evicted least recently used by bytes
(never the entry in use), counted; and within its bound under both readers."""

from __future__ import annotations

import numpy as np

import ngshard
from ngshard.storage import ObjectInfo
from ngshard.storage.index_cache import IndexCache, changed_lately
from ngshard.zarr import create_array, open_array


def test_an_entry_serves_only_its_generation():
    cache = IndexCache(1000)
    cache.put("a", "index of a", ("ino", 1), 10)
    assert cache.get("a", ("ino", 1)) == "index of a"
    assert cache.get("a", ("ino", 2)) is None  # replaced: read it again
    assert cache.get("b", ("ino", 1)) is None
    assert cache.get("a", ("ino", 1), recent=True) is None  # it may have changed unseen
    assert cache.stats() == {"cache_bytes": 10, "cache_max_bytes": 1000, "cache_entries": 1,
                             "cache_hits": 1, "cache_misses": 3, "cache_evictions": 0}


def test_an_entry_read_just_after_a_change_is_never_trusted():
    """On coarse timestamps a change right after the read may keep the generation: such an
    entry is read again even once the object is no longer recent."""
    cache = IndexCache(1000)
    cache.put("a", "index", 7, 10, recent=True)
    assert cache.get("a", 7) is None
    assert cache.unchecked("a") is None
    cache.put("a", "index again", 7, 10)
    assert cache.get("a", 7) == "index again" and cache.unchecked("a") == "index again"


def test_changed_lately_follows_coarse_timestamps():
    assert not changed_lately(ObjectInfo(1, 1), None, now=100.0)  # fine timestamps
    assert changed_lately(ObjectInfo(1, 1, 99.5), now=100.0)
    assert not changed_lately(ObjectInfo(1, 1, 90.0), now=100.0)


def test_least_recently_used_go_first_but_never_the_entry_in_use():
    cache = IndexCache(100)
    for name in "abc":
        cache.put(name, name, 0, 40)  # a is evicted by c
    assert len(cache) == 2 and cache.peek("a") is None and cache.nbytes == 80
    assert cache.get("b", 0) == "b"  # b is now the most recent: c goes next
    cache.put("d", "d", 0, 40)
    assert cache.peek("c") is None and cache.peek("b") == "b"
    cache.put("e", "e", 0, 500)  # larger than the budget: kept alone while in use
    assert len(cache) == 1 and cache.nbytes == 500 and cache.evictions == 4
    cache.grow("e", "e", 10)
    assert cache.nbytes == 510
    cache.put("f", "f", 0, 10)
    assert cache.peek("e") is None and cache.nbytes == 10


def test_bytes_decoded_into_an_evicted_entry_are_not_counted():
    cache = IndexCache(100)
    a = ["a"]
    cache.put("a", a, 0, 60)
    cache.put("b", "b", 0, 60)  # evicts a, still in use by a batch
    cache.grow("a", a, 30)
    assert cache.nbytes == 60 and len(cache) == 1
    cache.forget()
    assert cache.nbytes == 0 and len(cache) == 0


SPEC = ngshard.ShardingSpec(minishard_bits=3, shard_bits=4, minishard_index_encoding="gzip")


def test_the_precomputed_reader_stays_within_its_bound(tmp_path):
    ngshard.write_kv(tmp_path, SPEC, {k: b"v%d" % k for k in range(4000)})
    # a shard's indices: its shard index and 250 keys of 24 bytes; three fit
    budget = 3 * (SPEC.shard_index_size + 24 * 250) + 1000
    kv = ngshard.open_kv(tmp_path, cache_bytes=budget)
    for _ in range(2):
        assert len(kv.get_many(range(4000))) == 4000
        assert kv.reader.stats()["cache_bytes"] <= budget
        assert kv.reader.stats()["cache_entries"] <= 3
    for k in range(0, 4000, 7):
        assert kv[k] == b"v%d" % k
        assert kv.reader.stats()["cache_bytes"] <= budget
    figures = kv.reader.stats()
    assert figures["cache_max_bytes"] == budget
    assert figures["cache_evictions"] > 0 and figures["cache_hits"] > 0


def test_the_zarr_reader_stays_within_its_bound(tmp_path):
    arr = create_array(tmp_path / "a", (64, 64), "uint8", (2, 2), shards=(8, 8))
    data = np.arange(64 * 64, dtype=np.uint8).reshape(64, 64)
    arr[...] = data
    remote = open_array(tmp_path / "a")
    reader = remote.encoded().reader
    one = reader.indices(["c/0/0"])[0][1].nbytes
    reader.cache.max_bytes = 3 * one
    for _ in range(2):
        for row in range(0, 64, 8):
            np.testing.assert_array_equal(remote[row:row + 8, :], data[row:row + 8, :])
            assert reader.stats()["cache_bytes"] <= 3 * one
    figures = reader.stats()
    assert figures["cache_entries"] == 3 and figures["cache_evictions"] > 0
    assert figures["cache_misses"] >= 2 * 64
