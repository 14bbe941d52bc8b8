"""The path of staged chunks to the shards, as the speed work shaped it: the sharded store's
staging copies each value once into numpy blocks and hands a shard's values to the writer as
a view where they lie in the order it writes them; volumes stage stable raw chunks in one
put; plans take mapper tables and skip defaults. Every case is checked by value: what is read
back (by ngshard and by tensorstore) is what was written."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard
from ngshard.sharded.inputs import value_arrays
from ngshard.sharded.staging import LARGE_VALUE, Staging
from ngshard.staged import MemoryChunks, StagedChangesArray, normalize
from ngshard.staged.copy import copy_runs
from ngshard.staged.geometry import Geometry, box_indices, columns
from ngshard.staged.mapper import IndexChunkMapper
from ngshard.staged.slabmap import SlabMap
from ngshard.volume import create_volume, open_volume
from ngshard.volume.chunks import ShardedChunks

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=2,
                            minishard_index_encoding="gzip", data_encoding="raw")


def values_of(staging: Staging) -> dict[int, bytes | None]:
    """Every staged key's value, through the commit's own path (shard by shard)."""
    out = {}
    for changes in staging.iter_changes():
        out.update(zip(changes.keys.tolist(), changes.values()))
    return out


def large(rng, n: int) -> list[bytes]:
    return [rng.integers(0, 256, LARGE_VALUE + 7 * i, np.uint8).tobytes() for i in range(n)]


def test_a_batch_of_large_values_goes_to_the_writer_as_a_view_in_shard_order():
    rng = np.random.default_rng(0)
    keys = rng.permutation(np.arange(40, dtype=np.uint64))
    values = large(rng, 40)
    staging = Staging(SPEC, 1 << 30)
    staging.set_many(keys, [memoryview(v) for v in values])
    seen = {}
    for changes in staging.iter_changes():
        assert not changes.data.flags.owndata  # a view of the block: no copy at commit
        seen.update(zip(changes.keys.tolist(), changes.values()))
    assert seen == dict(zip(keys.tolist(), values))


def test_values_across_blocks_small_and_large_repeats_and_lookups():
    rng = np.random.default_rng(1)
    staging = Staging(SPEC, 1 << 30)
    expect: dict[int, bytes] = {}
    big_keys = np.arange(0, 30, dtype=np.uint64)
    for _ in range(3):  # three blocks of large values, each rewriting some keys
        keys = rng.choice(big_keys, 12, replace=False)
        keys = np.append(keys, keys[0])  # a key repeated in one batch: the last one wins
        values = large(rng, 13)
        staging.set_many(keys, values)
        expect.update(zip(keys.tolist(), values))
    small_keys = np.arange(100, 140, dtype=np.uint64)
    small = [rng.integers(0, 256, 5, np.uint8).tobytes() for _ in small_keys]
    staging.set_many(small_keys, small)  # small values: gathered, not one slice each
    expect.update(zip(small_keys.tolist(), small))
    buffer = bytearray(b"abcdefgh" * 2)
    staging.set_arrays(*value_arrays([200, 201], np.frombuffer(buffer, np.uint8), [0, 8, 16]))
    buffer[:] = b"x" * 16  # the caller's buffer changes: the staged values do not
    expect.update({200: b"abcdefgh", 201: b"abcdefgh"})
    staging.set(300, b"single")
    expect[300] = b"single"
    assert values_of(staging) == expect
    assert staging.lookup(int(big_keys[3]))[1] == expect.get(3)
    wanted = np.array(sorted(expect), np.uint64)
    assert staging.lookup_many(wanted) == expect
    staging.spill()  # the spill files get the same values
    assert values_of(staging) == expect


@pytest.mark.parametrize("batches", [
    [[b""]],  # nothing but an empty value: no block at all
    [[b"abc"], [b""]],  # an empty value staged last: it starts where no block does
    [[b"x" * LARGE_VALUE], [b"", b"y" * LARGE_VALUE, b""]],  # empty ones between blocks
])
def test_empty_values_anywhere_among_the_blocks(batches):
    staging = Staging(SPEC, 1 << 30)
    expect: dict[int, bytes] = {}
    for values in batches:
        keys = np.arange(len(expect), len(expect) + len(values), dtype=np.uint64)
        staging.set_many(keys, values)
        expect.update(zip(keys.tolist(), values))
    assert values_of(staging) == expect


@pytest.mark.parametrize("scale_shards", [0, 2])
def test_volume_slices_committed_through_stable_views_read_back_exactly(tmp_path,
                                                                        scale_shards):
    """Raw chunks of dropped slabs (more chunks than one encoding batch, over several
    shards) are encoded straight into one block the store keeps: one put, written as views."""
    spec = dict(SPEC.to_json(), shard_bits=scale_shards, minishard_bits=3,
                preshift_bits=0, hash="identity")
    shape = (96, 80, 24, 1)
    data = np.random.default_rng(2).integers(0, 256, shape, np.uint8)
    vol = create_volume(tmp_path, dtype="uint8", shape=shape, chunk_size=(8, 8, 8),
                        sharding=spec)
    puts = collections.Counter()
    original = vol.encoded().put_block

    def counted(positions, sizes, block):
        puts["calls"] += 1
        puts["chunks"] += len(positions)
        return original(positions, sizes, block)

    vol.encoded().put_block = counted
    for z in range(shape[2]):
        vol[:, :, z] = data[:, :, z]
    vol.commit()
    assert isinstance(vol.encoded(), ShardedChunks)
    assert puts == {"calls": 1, "chunks": 12 * 10 * 3}  # > one batch of 256, one put
    np.testing.assert_array_equal(open_volume(tmp_path)[...], data)
    theirs = ts.open({"driver": "neuroglancer_precomputed",
                      "kvstore": {"driver": "file", "path": str(tmp_path)}}
                     ).result(timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(theirs.read().result(timeout=PEER_TIMEOUT), data)


def test_writes_after_a_commit_rewrite_shards_with_the_new_values(tmp_path):
    shape = (32, 32, 16, 1)
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, shape, np.uint8)
    with create_volume(tmp_path, dtype="uint8", shape=shape, chunk_size=(8, 8, 8),
                       sharding=dict(SPEC.to_json(), hash="identity")) as vol:
        vol[...] = data
    vol = open_volume(tmp_path, mode="r+")
    for corner in rng.integers(0, 24, (20, 3)):  # small boxes: staged chunks written again
        box = tuple(slice(int(a), int(a) + 5) for a in np.minimum(corner, (27, 27, 11)))
        value = rng.integers(0, 256, (5, 5, 5, 1), np.uint8)
        vol[box] = value
        data[box] = value
    vol.commit()
    np.testing.assert_array_equal(open_volume(tmp_path)[...], data)


def test_resize_away_and_back_deletes_a_chunk_the_source_holds_staged():
    """A chunk written through (the source holds it), then loaded onto a staged slab, then
    cut off by a resize: grown back, it reads as the fill value, in memory and once stored."""
    source = MemoryChunks((0,), (1,), "int32")
    arr = StagedChangesArray(source, 8)  # every whole chunk is written through
    arr.resize((1,))
    arr[0:1] = 850
    arr.load()
    arr.resize((0,))
    arr.resize((1,))
    assert arr[0] == 0
    arr.commit()
    np.testing.assert_array_equal(source.array(), [0])


def test_mapper_tables_hold_the_pairs_and_heads():
    sel = normalize((slice(3, 40, 3),), (50,))
    m = IndexChunkMapper(sel.axes[0], 50, 8)
    assert m.pairs.tolist() == [m.local.tolist(), m.step.tolist(), m.start.tolist(),
                                m.count.tolist()]
    assert m.heads.tolist() == [m.chunks.tolist(), m.whole.astype(int).tolist()]
    assert not m.pairs.flags.writeable  # shared by every plan of the selection


def test_slab_map_lookup_with_and_without_entries_for_every_chunk():
    g = Geometry((40, 40), (10, 10))
    full = SlabMap(g)  # every chunk stored (on the base slab by default)
    full.assign(np.array([1, 5]), np.array([2, 3]), np.array([0, 10]), np.array([1, 0]))
    slabs, offsets, dirty = full.lookup(np.array([5, 1]))  # both have entries
    assert (slabs.tolist(), offsets.tolist(), dirty.tolist()) == ([3, 2], [10, 0],
                                                                  [False, True])
    slabs, offsets, dirty = full.lookup(np.array([1, 7]))  # one default
    assert (slabs.tolist(), offsets.tolist(), dirty.tolist()) == ([2, 1], [0, 70],
                                                                  [True, False])
    empty = SlabMap(g, (0, 0))  # nothing stored: defaults on the full slab
    assert empty.lookup(np.array([3, 9]))[0].tolist() == [0, 0]


def test_columns_and_box_indices_match_numpy():
    arrays = [np.array([1, 2, 3]), np.array([4, 5, 6])]
    np.testing.assert_array_equal(columns(arrays), np.stack(arrays, axis=1))
    assert columns(arrays).flags.c_contiguous
    for sizes in [(1, 1, 1), (2, 1, 3), (0, 2, 2)]:
        np.testing.assert_array_equal(box_indices(sizes), np.indices(sizes).reshape(3, -1).T)
        assert not box_indices(sizes).flags.writeable  # shared: nobody may change it


@pytest.mark.parametrize("order", "CF")
def test_zeroed_slabs_small_and_mapped_are_writable_zeros_in_their_order(order):
    for shape in [(4, 5, 6), (64, 64, 64, 9)]:  # np.zeros; a fresh mapping (> 2 MiB)
        a = Geometry(shape, shape, order).new_slab(1, np.dtype("uint16"), zeros=True)
        assert a.shape == shape and a.dtype == np.uint16 and not a.any()
        assert a.flags.c_contiguous if order == "C" else a.flags.f_contiguous
        a[(1,) * a.ndim] = 7
        assert a.sum() == 7


def tiling(slab: np.ndarray, z: int) -> np.ndarray:
    """The z-plane of a Fortran slab of 16^3 chunks as a 4 x 8 tiling (x chunk, x, y chunk,
    y): chunk (i, j) is chunk 8 * i + j of the slab."""
    s = slab.strides
    return np.lib.stride_tricks.as_strided(slab[:, :, z, 0], (4, 16, 8, 16),
                                           (8 * s[3], s[0], s[3], s[1]))


@pytest.mark.parametrize("dtype", ["uint8", "uint32"])
def test_strided_copies_of_many_short_runs_match_numpy(dtype):
    """A z-slice, x fastest, onto Fortran slabs: every chunk's rows are short contiguous runs
    on both sides, copied as wide items; the result is numpy's."""
    image = np.random.default_rng(4).integers(0, 200, (128, 64), dtype=dtype)  # (y, x)
    value = image.T  # (x, y), x fastest
    it = value.itemsize
    src = np.lib.stride_tricks.as_strided(value, (4, 16, 8, 16), (16 * it, it, 128 * it,
                                                                   64 * it))
    slab = np.zeros((16, 16, 16, 32), dtype, order="F")
    expect = slab.copy(order="F")
    tiling(expect, 5)[...] = src
    copy_runs(tiling(slab, 5), src)
    np.testing.assert_array_equal(slab, expect)
    assert slab.any()
    dst = tiling(slab, 6)
    copy_runs(dst, np.broadcast_to(np.array(7, dtype), dst.shape))  # no runs: numpy's copy
    assert (dst == 7).all() and (slab[:, :, 6] == 7).all()
