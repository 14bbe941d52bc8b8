"""Executing TransferPlans: seed 003's ``read_many_slices``, over numpy arrays and over the
chunk source (the base slab).

Between arrays, a row of many points is one numpy slice assignment (a Python step of a few
microseconds, then C speed; rows of a large transfer go on threads); rows of few points, where
that step would cost more than the copy, go together: rows of equal count make one fancy-index
assignment each. From the base slab, the chunks the rows read are fetched and decoded by the
source in batches, on threads, and each chunk's rows are copied on the thread that decoded it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..threads import pmap
from .transfer import TransferPlan

# Rows of up to SMALL_ROW points are copied together by fancy indexing when there are at least
# MANY_ROWS of them: a slice assignment costs a few microseconds, a fancy-index one tens of
# microseconds plus about 10 ns a point.
SMALL_ROW = 64
MANY_ROWS = 16
THREADED_BYTES = 4 << 20  # a transfer this large is split over threads


def copy_slices(src: np.ndarray, dst: np.ndarray, plan: TransferPlan, *,
                threads: bool = True) -> None:
    """Carry out ``plan`` from the array ``src`` to the array ``dst``."""
    if not len(plan):
        return
    sizes = np.prod(plan.count, axis=1)
    small = sizes <= SMALL_ROW
    if small.sum() < MANY_ROWS:
        small[:] = False
    if small.all():
        _fancy(src, dst, plan, np.arange(len(plan)))
        return
    if small.any():
        _fancy(src, dst, plan, np.flatnonzero(small))
    rows = np.flatnonzero(~small)
    src_slices = _slices(plan.src_start[rows], plan.count[rows], plan.src_step[rows])
    dst_slices = _slices(plan.dst_start[rows], plan.count[rows], plan.dst_step[rows])

    def one(i: int) -> None:
        dst[dst_slices[i]] = src[src_slices[i]]

    nbytes = int(sizes[rows].sum()) * dst.itemsize
    if threads and len(rows) > 1 and nbytes >= THREADED_BYTES:
        pmap(one, range(len(rows)), min_items=2)
    else:
        for i in range(len(rows)):
            one(i)


def _slices(start: np.ndarray, count: np.ndarray, step: np.ndarray) -> list[tuple]:
    """Each row as an index, built column by column at C speed. An axis where every row has
    one point is indexed by an integer: numpy copies a view with unit axes in it up to 20
    times slower (it may iterate such an axis innermost)."""
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


def copy_from_chunks(read: Callable[[np.ndarray, Callable], None], positions_of: Callable,
                     chunk: int, axis: int, fill: np.ndarray, dst: np.ndarray,
                     plan: TransferPlan) -> None:
    """Carry out ``plan`` from the base slab: ``read(positions, consume)`` fetches and decodes
    the chunks (``consume(i, array or None)``, on threads); the rows of chunk ``i`` are copied
    there, from ``fill`` where the chunk is absent.

    Parameters
    ----------
    positions_of
        Chunk ids -> (k, ndim) grid positions.
    chunk, axis
        The chunks' size along the stacking axis, and that axis: a row's source start along
        it is ``id * chunk`` plus the start inside the chunk.
    """
    if not len(plan):
        return
    ids = plan.src_start[:, axis] // chunk
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    heads = np.flatnonzero(np.diff(ids, prepend=-1))
    bounds = np.append(heads, len(ids))
    src_start = plan.src_start[order]
    src_start[:, axis] -= ids * chunk
    local = TransferPlan(plan.src, plan.dst, src_start, plan.dst_start[order],
                         plan.count[order], plan.src_step[order], plan.dst_step[order])
    # rows as indices, made once here rather than on the decoding threads (which share the GIL)
    src_index = _slices(local.src_start, local.count, local.src_step)
    dst_index = _slices(local.dst_start, local.count, local.dst_step)
    bounds = bounds.tolist()

    def consume(i: int, array: np.ndarray | None) -> None:
        a, b = bounds[i], bounds[i + 1]
        src = fill if array is None else array
        if b - a >= MANY_ROWS:  # many small rows (an array index): batched
            part = TransferPlan(plan.src, plan.dst, local.src_start[a:b],
                                local.dst_start[a:b], local.count[a:b], local.src_step[a:b],
                                local.dst_step[a:b])
            copy_slices(src, dst, part, threads=False)
            return
        for row in range(a, b):
            dst[dst_index[row]] = src[src_index[row]]

    read(positions_of(ids[heads]), consume)
