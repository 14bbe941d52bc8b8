"""Executing TransferPlans: seed 003's ``read_many_slices``, over numpy arrays and over the
chunk source (the base slab).

Between arrays, batches where numpy can do them: rows that tile a box of chunks regularly (a
slice across a layer of chunks) are one strided assignment; rows of few points go together,
one fancy-index assignment per count; other rows are one slice assignment each (a Python step
of a few microseconds, then C speed), large transfers on threads, and large rows between
different memory layouts in cache-sized blocks. From the base slab, the chunks the rows read
are fetched and decoded by the source in batches, on threads, and each chunk's rows are
copied on the thread that decoded it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .._arrays import streams
from .._kernels import stream_copy
from ..limits import CACHE_LINE
from ..threads import pmap
from .geometry import box_indices
from .transfer import TransferPlan

# Rows of up to SMALL_ROW points are copied together by fancy indexing when there are at least
# MANY_ROWS of them: a slice assignment costs a few microseconds, a fancy-index one tens of
# microseconds plus about 10 ns a point.
SMALL_ROW = 64
MANY_ROWS = 16
THREADED_BYTES = 4 << 20  # a transfer this large is split over threads
TRANSPOSED = 1 << 14  # points: rows this large between different layouts go in blocks
TILED = 1 << 14  # points: rows up to this large (on average) may go as one regular tiling
BLOCK = 16
FEW_ROWS = 8  # rows up to this many are turned into indices in plain Python
MANY_RUNS = 512  # contiguous runs from which a strided copy moves each as one wide item


def copy_slices(src: np.ndarray, dst: np.ndarray, plan: TransferPlan, *,
                threads: bool = True) -> None:
    """Carry out ``plan`` from the array ``src`` to the array ``dst``."""
    if not len(plan):
        return
    if plan.box is not None and len(plan) >= MANY_ROWS and \
            plan.points <= TILED * len(plan) and _copy_tiling(src, dst, plan):
        return  # many small rows in one operation (large ones go by rows: blocked, threaded)
    if len(plan) >= MANY_ROWS:  # enough rows for a batch to pay
        small = np.prod(plan.count, axis=1) <= SMALL_ROW
        if small.sum() >= MANY_ROWS:
            _fancy(src, dst, plan, np.flatnonzero(small))
            if small.all():
                return
            big = np.flatnonzero(~small)
            plan = TransferPlan(plan.src, plan.dst, plan.src_start[big],
                                plan.dst_start[big], plan.count[big], plan.src_step[big],
                                plan.dst_step[big])
    src_slices = _slices(plan.src_start, plan.count, plan.src_step)
    dst_slices = _slices(plan.dst_start, plan.count, plan.dst_step)

    def one(i: int) -> None:
        view = dst[dst_slices[i]]
        if isinstance(view, np.ndarray):
            _copy(view, src[src_slices[i]])
        else:  # a single point
            dst[dst_slices[i]] = src[src_slices[i]]

    rows = len(plan)
    if threads and rows > 1 and plan.points * dst.itemsize >= THREADED_BYTES:
        pmap(one, range(rows), min_items=2)
    else:
        for i in range(rows):
            one(i)


def _copy_tiling(src: np.ndarray, dst: np.ndarray, plan: TransferPlan) -> bool:
    """One strided copy for rows that tile a box regularly: equal counts and steps, and
    starts on both sides an affine function of the chunk's index in the box (chunks side by
    side in the selection, and on their slab in C order, as an assignment's new slab holds
    them). False, copying nothing, for rows that do not."""
    count, box = plan.count, plan.box
    if box is None or (count != count[0]).any() or (plan.src_step != plan.src_step[0]).any() or \
            (plan.dst_step != plan.dst_step[0]).any():
        return False
    index = box_indices(box)  # the rows' chunk index in the box
    # row of the unit step along each box axis (the first row where a longer axis has none)
    unit_rows = [math.prod(box[a + 1:]) if n > 1 else 0 for a, n in enumerate(box)]
    views = []
    for arr, start, step in ((src, plan.src_start, plan.src_step[0]),
                             (dst, plan.dst_start, plan.dst_step[0])):
        units = start[unit_rows] - start[0]  # how a start moves along each box axis
        if (start != start[0] + index @ units).any():
            return False
        views.append(_tiling_view(arr, start[0], units, count[0], step, box))
    copy_runs(views[1], views[0])
    return True


def copy_runs(dst: np.ndarray, src: np.ndarray, stream: bool = False) -> None:
    """``dst[...] = src``; where both hold many short contiguous runs along one axis (a
    tiling of chunks: rows of a chunk, 64 bytes say), each run copied as one item of a wider
    dtype: numpy's cost per run of a strided copy is then a fraction of what it was.

    Parameters
    ----------
    dst, src
        Arrays of one shape and dtype (``src`` may be a broadcast view).
    stream
        ``dst`` is part of a large result (``_arrays.streams``): rows along a contiguous
        last (or first) axis that are whole cache lines go past the cache.
    """
    item = dst.itemsize
    if stream and dst.ndim and src.shape == dst.shape and src.dtype == dst.dtype and \
            not dst.dtype.hasobject:
        for a in (-1, 0):  # rows along the last axis (C order), or the first (Fortran)
            if dst.strides[a] == src.strides[a] == item and dst.shape[a] * item % CACHE_LINE == 0:
                if a == 0:
                    dst, src = dst.T, src.T
                stream_copy(dst, src)
                return
    if src.dtype != dst.dtype or dst.dtype.hasobject or dst.ndim != src.ndim or \
            dst.size < 2 * MANY_RUNS:  # a cast, a broadcast, or too few runs: numpy's way
        dst[...] = src
        return
    for a, (n, d, s) in enumerate(zip(dst.shape, dst.strides, src.strides)):
        if d == s == item and n > 1 and dst.size >= MANY_RUNS * n:
            width = f"V{n * item}"
            if a == dst.ndim - 1:  # no moveaxis: it costs more than a small box's copy
                dst.view(width)[...] = src.view(width)
            else:
                np.moveaxis(dst, a, -1).view(width)[...] = np.moveaxis(src, a, -1).view(width)
            return
    dst[...] = src


def _tiling_view(arr: np.ndarray, first: np.ndarray, units: np.ndarray, count: np.ndarray,
                 step: np.ndarray, box: tuple[int, ...]) -> np.ndarray:
    """The view (box_0, count_0, box_1, count_1, ...) of ``arr``: chunk ``j`` of the box, point
    ``k`` of it, at ``first + j @ units + k * step``; every point one a row addresses."""
    base = arr[tuple(first.tolist())] if arr.ndim == 0 else \
        arr[tuple(slice(f, None) for f in first.tolist())]
    box_strides = (units @ np.array(arr.strides)).tolist()
    shape = [n for pair in zip(box, count.tolist()) for n in pair]
    strides = [s for pair in zip(box_strides, (step * arr.strides).tolist()) for s in pair]
    return np.lib.stride_tricks.as_strided(base, shape, strides, writeable=arr.flags.writeable)


def _copy(dst: np.ndarray, src: np.ndarray, stream: bool = False) -> None:
    """``dst[...] = src``. Between large arrays whose fastest axes differ (a C-ordered value
    onto a Fortran-ordered slab) the copy goes in blocks of BLOCK x BLOCK over those two axes,
    each block a transposition inside the cache: 2 to 5 times faster than numpy striding
    through both whole arrays at once. ``stream``: see :func:`copy_runs`."""
    if src.size >= TRANSPOSED and 0 not in src.strides:
        a, b = _fastest(dst), _fastest(src)
        if a != b:
            index = [slice(None)] * dst.ndim
            for i in range(0, dst.shape[a], BLOCK):
                index[a] = slice(i, i + BLOCK)
                for j in range(0, dst.shape[b], BLOCK):
                    index[b] = slice(j, j + BLOCK)
                    dst[tuple(index)] = src[tuple(index)]
            return
    copy_runs(dst, src, stream)


def _fastest(a: np.ndarray) -> int:
    """The axis of the smallest stride among those longer than 1."""
    return min((abs(s), axis) for axis, (s, n) in enumerate(zip(a.strides, a.shape))
               if n > 1)[1]


def _slices(start: np.ndarray, count: np.ndarray, step: np.ndarray) -> list[tuple]:
    """Each row as an index, built column by column at C speed (a few rows in plain Python,
    cheaper there than numpy's cost per call). An axis where every row has one point is
    indexed by an integer: numpy copies a view with unit axes in it up to 20 times slower (it
    may iterate such an axis innermost)."""
    if len(start) <= FEW_ROWS:
        starts, counts, steps = start.tolist(), count.tolist(), step.tolist()
        single = [max(col) == 1 for col in zip(*counts)]  # counts are >= 1
        return [tuple(a if one else slice(a, a + (n - 1) * s + 1, s)
                      for a, n, s, one in zip(a_row, n_row, s_row, single))
                for a_row, n_row, s_row in zip(starts, counts, steps)]
    stop = (start + (count - 1) * step + 1).T.tolist()
    single = (count == 1).all(axis=0).tolist()
    columns = [a if one else list(map(slice, a, b, s)) for a, b, s, one in
               zip(start.T.tolist(), stop, step.T.tolist(), single)]
    return list(zip(*columns))


def _fancy(src: np.ndarray, dst: np.ndarray, plan: TransferPlan, rows: np.ndarray) -> None:
    """Rows of equal count in one fancy-index assignment per count."""
    counts, group = np.unique(plan.count[rows], axis=0, return_inverse=True)
    group = group.reshape(-1)
    ndim = counts.shape[1]
    for g, count in enumerate(counts.tolist()):
        mine = rows[group == g]
        src_index, dst_index = [], []
        for a, n in enumerate(count):
            shape = [len(mine)] + [1] * ndim
            shape[a + 1] = n
            ramp = np.arange(n, dtype=np.int64)
            src_index.append((plan.src_start[mine, a, None] + plan.src_step[mine, a, None] *
                              ramp).reshape(shape))
            dst_index.append((plan.dst_start[mine, a, None] + plan.dst_step[mine, a, None] *
                              ramp).reshape(shape))
        dst[tuple(dst_index)] = src[tuple(src_index)]


def copy_from_chunks(read: Callable[..., None], positions_of: Callable,
                     chunk: int, axis: int, fill: np.ndarray | None,
                     targets: Sequence[tuple[np.ndarray, TransferPlan]]) -> None:
    """Carry out each ``(dst, plan)`` of ``targets`` from the base slab, every chunk that
    any of them reads fetched and decoded once: ``read(positions, consume)`` fetches and
    decodes the chunks (``consume(i, array or None)``, on threads); the rows of chunk ``i``
    are copied there, into each destination, from ``fill`` where the chunk is absent
    (``fill`` None: the destinations hold it already). ``read(positions, consume, into,
    planes)`` may decode a chunk that one row reads whole straight into that row of its
    destination (``into(i)``, see :meth:`ChunkSource.read`) rather than call ``consume``,
    and only the leading planes of a chunk that its rows reach (``planes[i]``).

    Parameters
    ----------
    positions_of
        Chunk ids -> (k, ndim) grid positions.
    chunk, axis
        The chunks' size along the stacking axis, and that axis: a row's source start along
        it is ``id * chunk`` plus the start inside the chunk.
    """
    targets = [(dst, plan) for dst, plan in targets if len(plan)]
    if not targets:
        return
    dsts = [dst for dst, _ in targets]
    plans = [plan for _, plan in targets]
    if len(plans) == 1:
        rows = plans[0]
        which = np.zeros(len(rows), np.intp)
    else:
        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in plans])

        rows = TransferPlan(plans[0].src, plans[0].dst, cat("src_start"), cat("dst_start"),
                            cat("count"), cat("src_step"), cat("dst_step"))
        which = np.repeat(np.arange(len(plans)), [len(p) for p in plans])
    copy_rows_from_chunks(read, positions_of, chunk, axis, fill, dsts, rows, which)


def copy_rows_from_chunks(read: Callable[..., None],
                          positions_of: Callable, chunk: int, axis: int,
                          fill: np.ndarray | None, dsts: Sequence[np.ndarray],
                          rows: TransferPlan, which: np.ndarray) -> None:
    """:func:`copy_from_chunks` of ``rows`` (from the base slab), row ``i`` into
    ``dsts[which[i]]``."""
    if not len(rows):
        return
    ids = rows.src_start[:, axis] // chunk
    # by chunk, then by destination: a chunk's rows for one destination in a run
    order = np.lexsort((which, ids))
    ids, which = ids[order], which[order]
    local = TransferPlan(rows.src, rows.dst, rows.src_start[order], rows.dst_start[order],
                         rows.count[order], rows.src_step[order], rows.dst_step[order])
    local.src_start[:, axis] -= ids * chunk
    heads = np.flatnonzero(np.diff(ids, prepend=-1))
    runs = np.flatnonzero(np.diff(ids, prepend=-1) | np.diff(which, prepend=-1))
    # per chunk, the (first row, last row + 1, destination) of its runs, made once here
    # rather than on the decoding threads (which share the GIL); and rows as indices
    first = np.searchsorted(runs, np.append(heads, len(ids))).tolist()
    ends = np.append(runs[1:], len(ids)).tolist()
    starts, into_dst = runs.tolist(), which[runs].tolist()  # lists: slices of them are cheap
    runs_of = [list(zip(starts[a:b], ends[a:b], into_dst[a:b]))
               for a, b in zip(first[:-1], first[1:])]
    src_index = _slices(local.src_start, local.count, local.src_step)
    dst_index = _slices(local.dst_start, local.count, local.dst_step)
    dst_stop = (local.dst_start + (local.count - 1) * local.dst_step + 1).tolist()
    dst_start, dst_step = local.dst_start.tolist(), local.dst_step.tolist()
    stream = [streams(dst) for dst in dsts]

    def into(i: int) -> np.ndarray | None:
        """Where chunk ``i`` goes whole, if it is read by one row (of one destination):
        the source may decode it straight there (if the row is all of the chunk)."""
        if len(runs_of[i]) != 1 or runs_of[i][0][1] - runs_of[i][0][0] != 1:
            return None
        a, _, d = runs_of[i][0]
        return dsts[d][tuple(map(slice, dst_start[a], dst_stop[a], dst_step[a]))]

    def consume(i: int, array: np.ndarray | None) -> None:
        src = fill if array is None else array
        if src is None:
            return
        for a, b, d in runs_of[i]:
            dst = dsts[d]
            if b - a >= MANY_ROWS:  # many small rows (an array index): batched
                part = TransferPlan(local.src, local.dst, local.src_start[a:b],
                                    local.dst_start[a:b], local.count[a:b],
                                    local.src_step[a:b], local.dst_step[a:b])
                copy_slices(src, dst, part, threads=False)
                continue
            for row in range(a, b):
                view = dst[dst_index[row]]
                if isinstance(view, np.ndarray):
                    _copy(view, src[src_index[row]], stream[d])
                else:  # a single point
                    dst[dst_index[row]] = src[src_index[row]]

    # per chunk, the planes its rows reach along the stacking axis (the slowest in memory):
    # a source may decode only those
    reach = local.src_start[:, axis] + (local.count[:, axis] - 1) * local.src_step[:, axis] + 1
    read(positions_of(ids[heads]), consume, into, np.maximum.reduceat(reach, heads))
