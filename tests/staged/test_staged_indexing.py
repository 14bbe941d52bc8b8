"""Indices a staged array takes and refuses, and the ways transfers are copied (slices, batched
fancy indexing, threads), checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from staged_oracle import oget, oset

from ngshard.staged import MemoryChunks, StagedChangesArray


def stored(shape, chunks, order="C", budget=1 << 30) -> tuple[StagedChangesArray, np.ndarray]:
    data = np.random.default_rng(0).integers(0, 1000, shape).astype(np.int32)
    arr = StagedChangesArray(MemoryChunks(shape, chunks, "int32", order=order), budget)
    arr[...] = data
    arr.commit()
    return arr, data


@pytest.mark.parametrize("index, message", [
    (True, "boolean"),
    ((None, 0), "newaxis"),
    ((Ellipsis, 0, Ellipsis), "single ellipsis"),
    ((0, 0, 0), "too many indices"),
    (12, "out of bounds"),
    ((slice(None), -9), "out of bounds"),
    (([0, 12],), "out of bounds"),
    ((np.ones(3, bool),), "mask of length 3"),
    ((np.zeros((2, 2), int),), "1-D integer arrays"),
    (([0.5],), "1-D integer arrays"),
    (("a",), "1-D integer arrays"),
])
def test_bad_indices_are_index_errors(index, message):
    arr, _ = stored((12, 8), (5, 3))
    with pytest.raises(IndexError, match=message):
        arr[index]
    with pytest.raises(IndexError, match=message):
        arr[index] = 1


def test_values_that_do_not_fit_the_selection():
    arr, _ = stored((12, 8), (5, 3))
    with pytest.raises(ValueError, match=r"value of shape \(3,\) does not fit the selection "
                                         r"of shape \(2, 8\)"):
        arr[0:2] = [1, 2, 3]
    arr[0:2] = np.ones((1, 1, 8))  # leading unit axes are dropped, as numpy does


@pytest.mark.parametrize("order", ["C", "F"])
def test_many_small_rows_go_in_batches(order):
    """Every other point along both axes: one-point rows, many per chunk."""
    arr, data = stored((40, 30), (10, 10), order)
    rows, cols = np.arange(0, 40, 2), np.arange(1, 30, 2)
    np.testing.assert_array_equal(arr[rows, cols], data[np.ix_(rows, cols)])
    arr[rows, cols] = -np.arange(20 * 15).reshape(20, 15)  # partial chunks: read, then rows
    oset(data, (rows, cols), -np.arange(20 * 15).reshape(20, 15))
    np.testing.assert_array_equal(arr[rows, cols], data[np.ix_(rows, cols)])  # from memory
    np.testing.assert_array_equal(arr[...], data)
    arr[3:37, [2, 5, 6, 7, 20]] = 5  # mixed: runs of one and of several points
    oset(data, (slice(3, 37), [2, 5, 6, 7, 20]), 5)
    np.testing.assert_array_equal(arr[...], data)


def test_large_transfers_run_on_threads_and_agree():
    arr, data = stored((300, 260, 40), (64, 64, 40), "F")
    np.testing.assert_array_equal(arr[5:290, ::-1, 3:], data[5:290, ::-1, 3:])
    value = np.arange(300 * 260 * 40, dtype=np.int32).reshape(300, 260, 40)
    arr[...] = value
    np.testing.assert_array_equal(arr[...], value)


def test_reads_of_every_kind_agree_with_numpy():
    arr, data = stored((9, 7, 5), (2, 3, 4))
    arr[1:5, [6, 0], ::-2] = 77
    oset(data, (slice(1, 5), [6, 0], slice(None, None, -2)), 77)
    for index in [(Ellipsis, 1), (slice(8, None, -3), np.array([True, False] * 3 + [True])),
                  ([4, 4, 0], 2), (slice(None), slice(2, 2)), ([], slice(None)), (-1, -1, -1)]:
        np.testing.assert_array_equal(arr[index], oget(data, index))


def test_whole_chunks_are_gathered_from_where_they_lie():
    arr, data = stored((9, 7), (4, 4))
    arr[0:4, 0:4] = 1  # a staged chunk
    chunks = arr.read_chunks([[0, 0], [2, 1], [0, 1]])
    np.testing.assert_array_equal(chunks[0], 1)
    np.testing.assert_array_equal(chunks[1], data[8:9, 4:7])  # clipped at the edge
    np.testing.assert_array_equal(chunks[2], data[0:4, 4:7])
    with pytest.raises(IndexError, match="outside the grid"):
        arr.read_chunks([[3, 0]])
    assert np.asarray(arr).shape == (9, 7) and "staged slabs=1" in repr(arr)
    with pytest.raises(ValueError, match="2 axes"):
        arr.resize((3,))


def test_rows_of_one_transfer_mixing_small_and_large():
    """Runs of one point and of ten along the same axis: the small rows go in batches, the
    large ones by slices, in one transfer (the chunks are staged, so it is one slab pair)."""
    arr, data = stored((40, 30), (10, 10))
    arr.load()
    cols = list(range(0, 20, 2)) + list(range(20, 30))
    np.testing.assert_array_equal(arr[:, cols], data[:, cols])
    arr[:, cols] = -np.arange(40 * 20).reshape(40, 20)
    data[:, cols] = -np.arange(40 * 20).reshape(40, 20)
    np.testing.assert_array_equal(arr[...], data)
