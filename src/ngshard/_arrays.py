"""Small numpy helpers shared by the format code and the stores above it."""

from __future__ import annotations

import math
import mmap
from typing import Any, Literal

import numpy as np

from .limits import GATHER_BYTES, HUGE_PAGES, STREAM_BYTES

# Arrays of at least this many bytes (a huge page) are mapped fresh from the system (see
# :func:`fresh`); smaller ones come from numpy: a mapping of their own costs more than it saves.
MAPPED_BYTES = 2 << 20


def unique(values: Any) -> np.ndarray:
    """``np.unique(values)`` (flattened, sorted) for integers, by one sort: numpy 2.3 and
    later find the values with a hash table first, which on random 64-bit keys is far slower
    (numpy 2.4: 10,000 keys 1.5 ms against 0.06, a million 530 ms against 9)."""
    values = np.sort(np.asarray(values).reshape(-1))
    if len(values) < 2:
        return values
    keep = np.empty(len(values), bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def member(values: np.ndarray, sorted_ref: np.ndarray) -> np.ndarray:
    """``np.isin(values, sorted_ref)`` for a sorted reference, by binary search: far cheaper
    than a general ``isin`` on the small arrays of minishard work."""
    if not len(sorted_ref):
        return np.zeros(np.shape(values), bool)
    pos = np.minimum(np.searchsorted(sorted_ref, values), len(sorted_ref) - 1)
    return sorted_ref[pos] == values


def fresh(shape: tuple[int, ...], dtype: Any, order: Literal["C", "F"] = "C", *,
          zeros: bool = False, huge: bool = HUGE_PAGES) -> np.ndarray:
    """A new array, uninitialised or all ``zeros``. A large one is an anonymous private
    mapping of its own: its pages come zeroed from the system as they are first written (by
    whichever thread writes them: decoding threads fault their own pages in; and zeros cost
    no pass over the memory), and go back to it when the array is dropped. Huge pages are
    asked for only where ``huge`` says (default ``limits.HUGE_PAGES``; ``np.empty`` asks for
    them for every array of 4 MiB and more); the system's default stands otherwise."""
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    if nbytes < MAPPED_BYTES or not hasattr(mmap, "MAP_ANONYMOUS"):
        return np.zeros(shape, dtype, order=order) if zeros else \
            np.empty(shape, dtype, order=order)
    memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge and hasattr(mmap, "MADV_HUGEPAGE"):
        memory.madvise(mmap.MADV_HUGEPAGE)
    return np.ndarray(shape, dtype, buffer=memory, order=order)


def streams(a: np.ndarray) -> bool:
    """Whether writes into ``a`` (a result, or a view of one) go past the cache: its items
    spread over STREAM_BYTES or more of memory, far more than a cache holds, so the result
    is written once and read later, if at all (see ``_stream.c``)."""
    return a.size > 0 and \
        sum((n - 1) * abs(s) for n, s in zip(a.shape, a.strides)) + a.itemsize >= STREAM_BYTES


def uint_dtype(bound: int) -> np.dtype:
    """The narrowest unsigned dtype holding every integer below ``bound``: numpy sorts 8- and
    16-bit integers stably by radix, far faster than wider ones."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if bound <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


# Values at least this large are copied one slice each (the per-value cost is then small
# beside the bytes); smaller ones go through vectorized gathers of about GATHER_BYTES bytes.
_LARGE = 4096


def views(data: np.ndarray, sizes: np.ndarray) -> list[memoryview]:
    """Views of back-to-back values of ``sizes`` bytes in ``data``."""
    view = data.data
    ends = np.cumsum(sizes, dtype=np.int64).tolist()
    return [view[e - n:e] for e, n in zip(ends, np.asarray(sizes, np.int64).tolist())]


def gather(src: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``src[starts[i]:starts[i] + sizes[i]]`` for every i, back to back, as one uint8 array.

    ``src`` is a 1-D uint8 array. Equal-sized values are copied as the rows of a strided view
    (memcpy speed); mixed sizes through a running byte index, a few MiB at a time, so the
    index never costs more than a few times that much memory.
    """
    starts = np.asarray(starts, np.int64)
    sizes = np.asarray(sizes, np.int64)
    ends = np.cumsum(sizes)
    begins = ends - sizes
    if len(sizes) and sizes[0] and (sizes == sizes[0]).all():
        width = int(sizes[0])
        if not (starts % width).any():  # whole items of a void dtype: memcpy each
            items = src[:len(src) - len(src) % width].view(f"V{width}")
            return np.take(items, starts // width).view(np.uint8)
        return _rows(src, width)[starts].reshape(-1)
    out = np.empty(int(ends[-1]) if len(ends) else 0, np.uint8)
    # Windows of consecutive small values, cut at large ones and every GATHER_BYTES bytes.
    large = sizes >= _LARGE
    cut = large.copy()
    cut[1:] |= large[:-1] | (begins[1:] // GATHER_BYTES != begins[:-1] // GATHER_BYTES)
    firsts = np.flatnonzero(cut) if len(cut) else cut
    if len(firsts) == 0 or firsts[0] != 0:
        firsts = np.r_[0, firsts].astype(np.intp)
    bounds = np.r_[firsts, len(sizes)].tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a == b:
            continue
        if b - a == 1 and large[a]:
            out[begins[a]:ends[a]] = src[starts[a]:starts[a] + sizes[a]]
            continue
        _gather_small(src, starts[a:b], sizes[a:b], out[begins[a]:ends[b - 1]])
    return out


def _rows(src: np.ndarray, width: int) -> np.ndarray:
    """Every ``width``-byte window of ``src`` as a row (a view: row i starts at byte i)."""
    return np.lib.stride_tricks.as_strided(src, (len(src) - width + 1, width), (1, 1),
                                           writeable=False)


def _gather_small(src: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                  out: np.ndarray) -> None:
    width = int(sizes[0])
    if width and (sizes == width).all():
        out.reshape(-1, width)[:] = _rows(src, width)[starts]
        return
    keep = sizes > 0
    starts, sizes = starts[keep], sizes[keep]
    if not len(sizes):
        return
    # index of each output byte: +1 inside a value, a jump to the next value's start between
    step = np.ones(len(out), np.int64)
    begins = np.cumsum(sizes) - sizes
    step[0] = starts[0]
    step[begins[1:]] = starts[1:] - (starts[:-1] + sizes[:-1]) + 1
    np.take(src, np.cumsum(step, out=step), out=out)
