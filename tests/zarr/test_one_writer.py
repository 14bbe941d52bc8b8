"""A zarr array has one writer: the chunk store of its handle. Granules put through
``encoded()`` and values assigned to the array are staged in the same place and written by
the same commit, each shard once."""

from __future__ import annotations

import os

import numpy as np
import zarr

from ngshard.zarr import create_array, open_array

RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]


def test_encoded_puts_and_assignments_are_written_together(tmp_path):
    a = create_array(tmp_path / "a", (8, 8), "uint8", (4, 4), shards=(8, 8), codecs=RAW)
    store = a.encoded()
    assert store is a.encoded() is a.handle.store
    store.put(np.array([[1, 1]]), [np.full((4, 4), 7, np.uint8).tobytes()])
    (pending,) = store.plan().shards
    assert pending.sets == 1 and pending.name == "c/0/0"
    a[0:4, 0:4] = 3  # commits: the shard holds both
    expected = np.zeros((8, 8), np.uint8)
    expected[:4, :4], expected[4:, 4:] = 3, 7
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a", mode="r")[...], expected)
    np.testing.assert_array_equal(open_array(tmp_path / "a")[...], expected)
    assert store.plan().shards == ()  # nothing is left to write
    shard = tmp_path / "a" / "c" / "0" / "0"
    before = os.stat(shard)
    store.commit()  # nothing written twice
    after = os.stat(shard)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_staged_plan_counts_encoded_puts_and_assignments_in_one_shard(tmp_path):
    a = create_array(tmp_path / "a", (8, 8), "uint8", (4, 4), shards=(8, 8), codecs=RAW)
    a[0:4, 0:4] = 1
    with a.staged() as s:
        s[0:4, 0:4] = 3
        a.encoded().put(np.array([[1, 1]]), [np.full((4, 4), 7, np.uint8).tobytes()])
        np.testing.assert_array_equal(s[4:, 4:], 7)  # reads see the put
        plan = s.plan()
        assert plan.encode == 1 and [p.sets for p in plan.shards] == [2]
    assert (open_array(tmp_path / "a")[...] != 0).sum() == 32
