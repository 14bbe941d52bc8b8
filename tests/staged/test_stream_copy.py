"""stream_copy (a compiled kernel) and copy_runs(stream=True): the values numpy's assignment
gives, for any shape, item size, alignment and strides (outer axes broadcast, reversed or
stepped), nothing written outside the destination, along either end axis; refusals of
arrays it cannot copy; a large volume read through it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngshard.limits import STREAM_BYTES
from ngshard.staged import copy
from ngshard.staged.copy import copy_runs, stream_copy
from ngshard.volume import create_volume, open_volume


@st.composite
def pairs(draw):
    """(dst, src, the buffer dst lies in): dst a view at any byte offset of a larger buffer,
    its last axis contiguous; src of the same shape with outer axes that may be broadcast,
    reversed or stepped."""
    dtype = np.dtype(draw(st.sampled_from(["u1", "u2", "u8"])))
    ndim = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 5)) for _ in range(ndim - 1)]
    width = draw(st.sampled_from([1, 3, 16, 32, 64, 100, 128, 256]))  # bytes of a row
    shape.append(max(1, width // dtype.itemsize))
    # padding of the outer axes, and of rows (a line's worth keeps aligned rows aligned)
    pad = [draw(st.integers(0, 3)) for _ in range(ndim - 1)]
    pad.append(draw(st.sampled_from([0, 1, 64 // dtype.itemsize])))
    offset = draw(st.sampled_from([0, 64, 3, 8, 16, 70]))  # bytes from a page boundary
    padded = [n + p for n, p in zip(shape, pad)]
    nbytes = int(np.prod(padded)) * dtype.itemsize
    buffer = np.zeros(nbytes + 4096 + offset, np.uint8)
    start = (-buffer.ctypes.data) % 4096 + offset
    big = buffer[start:start + nbytes].view(dtype).reshape(padded)
    dst = big[tuple(slice(0, n) for n in shape)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    how = draw(st.sampled_from(["plain", "broadcast", "reversed", "stepped"]))
    if how == "broadcast" and ndim > 1:
        src = np.broadcast_to(rng.integers(0, 255, (1, *shape[1:])).astype(dtype), shape)
    elif how == "reversed" and ndim > 1:
        src = rng.integers(0, 255, shape).astype(dtype)[::-1]
    elif how == "stepped" and ndim > 1:
        src = rng.integers(0, 255, [shape[0] * 2, *shape[1:]]).astype(dtype)[::2]
    else:
        src = rng.integers(0, 255, shape).astype(dtype)
    return dst, src, buffer


@settings(max_examples=300, deadline=None)
@given(pairs())
def test_stream_copy_gives_numpys_values_and_writes_nothing_else(pair):
    dst, src, buffer = pair
    before = buffer.copy()
    expect = dst.copy()
    expect[...] = src
    stream_copy(dst, src)
    np.testing.assert_array_equal(dst, expect)
    dst[...] = 0  # everything else in the buffer is as it was
    np.testing.assert_array_equal(buffer, before)


@settings(max_examples=100, deadline=None)
@given(pairs())
def test_copy_runs_streaming_or_not_gives_the_same_values(pair):
    dst, src, _ = pair
    for a, b in ((dst, src), (dst.T, src.T)):  # rows along the last axis, or the first
        plain = a.copy()
        copy_runs(plain, b)
        copy_runs(a, b, stream=True)
        np.testing.assert_array_equal(a, plain)


def test_a_large_fortran_volume_read_streams_its_rows(tmp_path, monkeypatch):
    """A raw volume's whole read (Fortran order, 16 MiB) streams the chunks' rows along x,
    and reads what was written, the fill value where nothing was."""
    shape = (256, 256, 256)
    data = np.random.default_rng(2).integers(1, 255, shape, np.uint8)
    data[:, :, 192:] = 0  # never written: absent chunks
    with create_volume(tmp_path / "v", dtype="uint8", shape=shape, sharding="auto") as volume:
        volume[:, :, :192] = data[:, :, :192]
    rows = []
    monkeypatch.setattr(copy, "stream_copy",
                        lambda dst, src: (rows.append(dst.shape), stream_copy(dst, src)))
    got = open_volume(tmp_path / "v")[...]
    np.testing.assert_array_equal(got[..., 0], data)  # (x, y, z, channel)
    assert got.nbytes >= STREAM_BYTES and len(rows) == 4 * 4 * 3  # every stored chunk


def test_stream_copy_refuses_what_it_cannot_copy():
    a = np.zeros((4, 64), np.uint8)
    with pytest.raises(ValueError, match="one shape"):
        stream_copy(a, np.zeros((4, 32), np.uint8))
    with pytest.raises(ValueError, match="contiguous"):
        stream_copy(a, np.zeros((64, 4), np.uint8).T)
    with pytest.raises(ValueError, match="item size"):
        stream_copy(a, np.zeros((4, 64), np.uint16))
    with pytest.raises(ValueError, match="read-only"):
        stream_copy(np.broadcast_to(np.uint8(0), (4, 64)), a)
