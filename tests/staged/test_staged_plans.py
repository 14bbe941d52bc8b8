"""Plans print as seed 003 shows them, and say what the array then does: the seed's own example
(shape (30, 50), chunks (10, 10), ``arr[5:20, 30:] = 42``), reads, resizes, loads, commits."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from ngshard.staged import MemoryChunks, StagedChangesArray, normalize
from ngshard.staged.mapper import IndexChunkMapper

BASE_DATA = np.arange(1500, dtype=np.int64).reshape(30, 50)


@pytest.fixture
def arr() -> StagedChangesArray:
    """The seed's array, every chunk stored."""
    source = MemoryChunks((30, 50), (10, 10), "int64")
    arr = StagedChangesArray(source)
    arr[...] = BASE_DATA
    arr.commit()
    source.reads = source.writes = 0
    return arr


def dedent(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def test_the_seeds_example_selects_two_chunks_partially_and_two_wholly():
    sel = normalize((slice(5, 20), slice(30, None)), (30, 50))
    rows, cols = (IndexChunkMapper(a, n, 10) for a, n in zip(sel.axes, (30, 50)))
    assert rows.chunks.tolist() == [0, 1] and rows.whole.tolist() == [False, True]
    assert cols.chunks.tolist() == [3, 4] and cols.whole.tolist() == [True, True]
    #   01234
    # 0 ...pp
    # 1 ...ww
    # 2 .....


SEED_PLAN = """
    SetItemPlan<value_shape=(15, 20), value_view=[:, :], append 2 empty slabs, 6 slice transfers among 3 slab pairs, drop 0 slabs>
      slabs.append(np.empty((20, 10)))  # slabs[2]
      slabs.append(np.empty((20, 10)))  # slabs[3]
      # 2 transfers from slabs[1] to slabs[2]
      slabs[2][0:10, 0:10] = slabs[1][30:40, 0:10]
      slabs[2][10:20, 0:10] = slabs[1][40:50, 0:10]
      # 2 transfers from value to slabs[2]
      slabs[2][5:10, 0:10] = value[0:5, 0:10]
      slabs[2][15:20, 0:10] = value[0:5, 10:20]
      # 2 transfers from value to slabs[3]
      slabs[3][0:10, 0:10] = value[5:15, 0:10]
      slabs[3][10:20, 0:10] = value[5:15, 10:20]
    slab_indices:
    [[1 1 1 2 2]
     [1 1 1 3 3]
     [1 1 1 1 1]]
    slab_offsets:
    [[  0  10  20   0  10]
     [ 50  60  70   0  10]
     [100 110 120 130 140]]
    """  # noqa: E501


def test_the_seeds_example_plan_prints_and_runs_as_printed(arr):
    plan = arr.setitem_plan((slice(5, 20), slice(30, None)))
    assert str(plan) == dedent(SEED_PLAN)
    arr[5:20, 30:] = 42
    # the partial chunks (0, 3) and (0, 4) were read once; the whole ones never
    assert arr.source.reads == 2
    assert str(plan) == dedent(SEED_PLAN)  # printed after running: the map it made
    expect = BASE_DATA.copy()
    expect[5:20, 30:] = 42
    np.testing.assert_array_equal(arr[...], expect)
    # writing the same chunks again updates their staged slabs in place: no read, no slab
    plan = arr.setitem_plan((slice(0, 20), slice(30, None)))
    assert "append 0 empty slabs" in str(plan)
    reads = arr.source.reads
    arr[0:20, 30:] = 7
    assert arr.source.reads == reads and len(arr.slabs) == 4
    expect[0:20, 30:] = 7
    np.testing.assert_array_equal(arr[...], expect)
    assert arr.source.writes == 0  # nothing encoded before the commit
    arr.commit()
    assert arr.source.writes == 4  # each changed chunk once
    np.testing.assert_array_equal(arr.source.array(), expect)


def test_reads_take_staged_chunks_from_memory_and_the_rest_from_storage(arr):
    arr[5:20, 30:] = 42
    plan = arr.getitem_plan((slice(0, 12), slice(28, 33)))
    assert str(plan) == dedent("""
        GetItemPlan<out_shape=(12, 5), 4 slice transfers among 3 slab pairs>
          # 2 transfers from slabs[1] to out
          out[0:10, 0:2] = slabs[1][20:30, 8:10]
          out[10:12, 0:2] = slabs[1][70:72, 8:10]
          # 1 transfers from slabs[2] to out
          out[0:10, 2:5] = slabs[2][0:10, 0:3]
          # 1 transfers from slabs[3] to out
          out[10:12, 2:5] = slabs[3][0:2, 0:3]
        """)
    reads = arr.source.reads
    arr[0:12, 28:33]
    assert arr.source.reads == reads + 2  # chunks (0, 2) and (1, 2), not the staged ones


def test_steps_and_arrays_print_the_value_view(arr):
    arr[5:20, 30:] = 42
    plan = arr.setitem_plan((slice(12, 2, -3), [45, 31, 31]))
    assert str(plan).splitlines()[:6] == dedent("""
        SetItemPlan<value_shape=(4, 3), value_view=[::-1, [...]], append 0 empty slabs, 4 slice transfers among 2 slab pairs, drop 0 slabs>
          # 2 transfers from value to slabs[2]
          slabs[2][3:10:3, 1:2] = value[0:3, 0:1]
          slabs[2][13:20:3, 5:6] = value[0:3, 1:2]
          # 2 transfers from value to slabs[3]
          slabs[3][2:3, 1:2] = value[3:4, 0:1]
        """).splitlines()  # noqa: E501
    value = np.arange(12).reshape(4, 3)
    arr[12:2:-3, [45, 31, 31]] = value
    expect = BASE_DATA.copy()
    expect[5:20, 30:] = 42
    expect[np.ix_(np.arange(12, 2, -3), [45, 31, 31])] = value
    np.testing.assert_array_equal(arr[...], expect)


def test_load_plan_moves_every_stored_chunk_to_one_slab(arr):
    arr[5:20, 30:] = 42
    plan = arr.load_plan()
    lines = str(plan).splitlines()
    assert lines[:3] == ["LoadPlan<append 1 empty slabs, 11 slice transfers among 1 slab pairs, "
                         "drop 0 slabs>", "  slabs.append(np.empty((110, 10)))  # slabs[4]",
                         "  # 11 transfers from slabs[1] to slabs[4]"]
    assert lines[-8:-4] == ["slab_indices:", "[[4 4 4 2 2]", " [4 4 4 3 3]", " [4 4 4 4 4]]"]
    arr.load()
    reads = arr.source.reads
    np.testing.assert_array_equal(arr[...][:5], BASE_DATA[:5])
    assert arr.source.reads == reads  # everything in memory now
    arr.commit()
    assert arr.source.writes == 4  # loaded chunks are not written back


def test_commit_plan_lists_the_chunks_to_encode_and_drops_the_slabs(arr):
    arr[5:20, 30:] = 42
    arr.load()
    plan = arr.plan()
    assert "encode 4 chunks" in str(plan)  # the summary; the slabs one attribute away
    assert str(plan.changes).splitlines()[:5] == [
        "ChangesPlan<encode 4 chunks, return 11 clean chunks to the base slab, drop 3 slabs>",
        "  # slabs[2]: encode 2 chunks at grid positions [[0, 3], [0, 4]]; 0 clean",
        "  slabs[2] = None",
        "  # slabs[3]: encode 2 chunks at grid positions [[1, 3], [1, 4]]; 0 clean",
        "  slabs[3] = None"]
    arr.commit()
    assert arr.slabs[2:] == [] and arr.nbytes_staged == 0


def test_resize_plans_edge_chunks_as_the_seed_says():
    source = MemoryChunks((30, 50), (10, 10), "int64", fill_value=-1)
    arr = StagedChangesArray(source)
    arr[...] = BASE_DATA
    arr.commit()
    arr[0:5, 0:5] = 3  # chunk (0, 0) staged
    arr.resize((25, 45))  # shrinking: whole edge chunks are left as they are
    assert source.reads == 1
    plan = arr.resize_plan((28, 50))  # growing: the edge chunks read, then filled
    assert str(plan).splitlines()[:5] == [
        "ResizePlan<old_shape=(25, 45), new_shape=(28, 50), append 1 empty slabs, 15 slice "
        "transfers among 2 slab pairs, delete 0 stored chunks, drop 0 slabs>",
        "  slabs.append(np.empty((70, 10)))  # slabs[3]",
        "  # 7 transfers from slabs[1] to slabs[3]",
        "  slabs[3][0:10, 0:5] = slabs[1][40:50, 0:5]",
        "  slabs[3][10:20, 0:5] = slabs[1][90:100, 0:5]"]
    arr.resize((28, 50))
    expect = np.full((28, 50), -1)
    expect[:25, :45] = BASE_DATA[:25, :45]
    expect[0:5, 0:5] = 3
    np.testing.assert_array_equal(arr[...], expect)
    arr.resize((12, 8))  # chunks outside the grid are dropped, stored ones deleted
    assert "delete 0 stored chunks" in str(arr.resize_plan((12, 8)))
    arr.commit()
    assert sorted(source.stored) == [(0, 0), (1, 0)]
    np.testing.assert_array_equal(source.array(), expect[:12, :8])
    arr.resize((30, 50))  # grown again: the fill value, whatever storage held
    np.testing.assert_array_equal(arr[12:, 8:], -1)


def test_bulk_assignments_write_whole_chunks_through():
    """Whole chunks of an assignment worth an eighth of the budget or more go from the value
    straight to the source: no slab, no copy; partial ones are staged as ever."""
    source = MemoryChunks((30, 50), (10, 10), "int64")
    arr = StagedChangesArray(source, staged_bytes=8 * 2 * 800)  # through from 2 chunks
    value = np.arange(15 * 20).reshape(15, 20)
    plan = arr.setitem_plan((slice(5, 20), slice(30, None)), value)
    assert str(plan).splitlines()[:9] == [
        "SetItemPlan<value_shape=(15, 20), value_view=[:, :], write 2 chunks through, append 1 "
        "empty slabs, 4 slice transfers among 2 slab pairs, drop 0 slabs>",
        "  slabs.append(np.empty((20, 10)))  # slabs[2]",
        "  # 2 transfers from slabs[0] to slabs[2]",  # a new array: the fill value, no read
        "  slabs[2][0:10, 0:10] = slabs[0][0:10, 0:10]",
        "  slabs[2][10:20, 0:10] = slabs[0][0:10, 0:10]",
        "  # 2 transfers from value to slabs[2]",
        "  slabs[2][5:10, 0:10] = value[0:5, 0:10]",
        "  slabs[2][15:20, 0:10] = value[0:5, 10:20]",
        "  # 2 chunks from value to the source"]
    arr[5:20, 30:] = value
    assert source.writes == 2 and arr.nbytes_staged == 2 * 800  # the partial two staged
    assert source.reads == 0  # nothing was stored: the partial chunks start as fill
    expect = np.zeros((30, 50), np.int64)
    expect[5:20, 30:] = value
    np.testing.assert_array_equal(arr[...], expect)
    arr[12, 35] = -1  # a partial write to a chunk written through: read back, staged
    expect[12, 35] = -1
    arr.commit()
    assert source.writes == 5
    np.testing.assert_array_equal(source.array(), expect)
