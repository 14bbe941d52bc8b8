"""The decoded-chunk cache of a sharded zarr array (``chunk_cache_bytes``): repeated small
reads decode nothing again; a shard rewritten by another writer (tensorstore, zarr-python)
is read again, never served stale; the memory stays within the budget; a large read streams
past it; 0 turns it off."""

from __future__ import annotations

import numpy as np
import pytest
import tensorstore as ts
import zarr
from peers import PEER_TIMEOUT

from ngshard.zarr import create_array, open_array

SHAPE, SHARD, INNER = (32, 32, 32), (16, 16, 16), (8, 8, 8)
CHUNK_BYTES = 8 * 8 * 8 * 2


@pytest.fixture
def path(tmp_path):
    arr = create_array(tmp_path / "a", SHAPE, "uint16", INNER, shards=SHARD)
    arr[...] = np.arange(np.prod(SHAPE), dtype=np.uint16).reshape(SHAPE)
    return tmp_path / "a"


def cached(arr) -> dict:
    return arr.array.source.cache.stats()


def test_repeated_small_reads_are_served_from_the_cache(path):
    arr = open_array(path)
    box = (slice(3, 12), slice(5, 9), slice(0, 20))  # 2 x 2 x 3 inner chunks
    first = arr[box]
    assert cached(arr)["cache_entries"] == 12
    again = arr[box]
    np.testing.assert_array_equal(again, first)
    assert cached(arr)["cache_hits"] == 12
    many = arr.read_many([box, (4, 6, slice(None))])
    np.testing.assert_array_equal(many[0], first)
    assert cached(arr)["cache_hits"] >= 24


@pytest.mark.parametrize("peer", ["tensorstore", "zarr-python"])
def test_a_shard_rewritten_by_another_writer_is_never_served_stale(path, peer):
    arr = open_array(path)
    box = (slice(0, 16), slice(0, 16), slice(0, 16))  # the first shard, whole
    arr[box]
    new = np.full((16, 16, 16), 999, np.uint16)
    new[3, 4, 5] = 1
    if peer == "tensorstore":
        other = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
                        ).result(timeout=PEER_TIMEOUT)
        other[box].write(new).result(timeout=PEER_TIMEOUT)
    else:
        zarr.open_array(str(path), mode="r+")[box] = new
    np.testing.assert_array_equal(arr[box], new)
    np.testing.assert_array_equal(arr.read_many([box])[0], new)
    np.testing.assert_array_equal(arr[2:5, 3:6, 4:7], new[2:5, 3:6, 4:7])


def test_own_writes_are_read_back(path):
    arr = open_array(path)
    arr[0:8, 0:8, 0:8]
    arr[1, 1, 1] = 7
    assert arr[1, 1, 1] == 7
    assert open_array(path)[1, 1, 1] == 7


def test_memory_stays_within_the_budget(path):
    budget = 10 * CHUNK_BYTES
    arr = open_array(path, chunk_cache_bytes=budget)
    rng = np.random.default_rng(1)
    expected = np.arange(np.prod(SHAPE), dtype=np.uint16).reshape(SHAPE)
    for _ in range(40):  # boxes of one inner chunk each, all over the array
        z, y, x = (int(v) for v in rng.integers(0, 4, 3) * 8)
        box = (slice(z, z + 8), slice(y, y + 8), slice(x, x + 8))
        np.testing.assert_array_equal(arr[box], expected[box])
        assert cached(arr)["cache_bytes"] <= budget
    assert cached(arr)["cache_evictions"] > 0


def test_a_large_read_streams_past_the_cache(path):
    arr = open_array(path, chunk_cache_bytes=64 * CHUNK_BYTES)  # an eighth: 8 chunks
    arr[...]  # 64 chunks
    assert cached(arr)["cache_entries"] == 0
    arr[0:16, 0:8, 0:8]  # 2 chunks
    assert cached(arr)["cache_entries"] == 2


def test_no_cache_with_a_budget_of_0(path):
    arr = open_array(path, chunk_cache_bytes=0)
    assert arr.array.source.cache is None
    np.testing.assert_array_equal(arr[3:5, 3:5, 3:5], open_array(path)[3:5, 3:5, 3:5])
