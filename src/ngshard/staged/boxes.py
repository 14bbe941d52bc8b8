"""The rows of many box reads from the base slab in one numpy pass: what ``read_many`` does
when every selection is a box (slices of step 1, integers) and every chunk lies on the base
slab, instead of one :class:`~ngshard.staged.plans.GetItemPlan` per box (whose Python work
per box costs more than decoding a small box's chunks).

The result is one :class:`TransferPlan` of every box's rows, each row one chunk's part of one
box, and the box it goes to; ``copy.copy_rows_from_chunks`` carries it out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from .geometry import BASE, Geometry
from .indexing import Selection
from .transfer import OUT, TransferPlan

# One box of at most this many chunks is planned in plain Python (:func:`_one_box`, for few
# chunks cheaper than numpy's cost per call), more in numpy: a whole 512x512x256 read of 256
# chunks took 0.80 ms in Python against 0.13 ms in numpy.
ONE_BOX_CHUNKS = 16


def plain_boxes(selections: Sequence[Selection]) -> bool:
    """Whether every selection is a box: slices of step 1 and integers on every axis."""
    return all(a.array is None and a.step == 1 and not a.flip
               for s in selections for a in s.axes)


def box_rows(geometry: Geometry, selections: Sequence[Selection]
             ) -> tuple[TransferPlan, np.ndarray]:
    """(rows, box of each row) of reading each box (see :func:`plain_boxes`) from the base
    slab into a result of the selection's shape: one row per chunk a box touches, the chunks
    of a box in C order. Empty boxes have no rows."""
    if len(selections) == 1 and all(a.count for a in selections[0].axes) and \
            math.prod((a.start + a.count - 1) // c - a.start // c + 1
                      for a, c in zip(selections[0].axes, geometry.chunks)) <= ONE_BOX_CHUNKS:
        return _one_box(geometry, selections[0])
    ndim = geometry.ndim
    start = np.array([[a.start for a in s.axes] for s in selections], np.int64
                     ).reshape(-1, ndim)
    count = np.array([[a.count for a in s.axes] for s in selections], np.int64
                     ).reshape(-1, ndim)
    chunks, grid = np.array(geometry.chunks, np.int64), np.array(geometry.grid, np.int64)
    live = np.asarray((count > 0).all(axis=1))
    first = start // chunks
    span = np.where(live[:, None], (start + count - 1) // chunks - first + 1, 0)
    per_box = np.prod(span, axis=1)
    box = np.repeat(np.arange(len(selections)), per_box)
    # each row's rank among its box's chunks, unravelled in C order over the box's span
    rank = np.arange(len(box)) - np.repeat(np.cumsum(per_box) - per_box, per_box)
    position = np.empty((len(box), ndim), np.int64)
    for a in range(ndim - 1, -1, -1):
        n = span[box, a]
        position[:, a] = first[box, a] + rank % n
        rank //= n
    lo = np.maximum(start[box], position * chunks)
    hi = np.minimum(start[box] + count[box], (position + 1) * chunks)
    src_start = lo - position * chunks
    axis = geometry.axis
    src_start[:, axis] += geometry.base_offsets(
        np.ravel_multi_index(tuple(position.T), tuple(grid.tolist())))
    ones = np.ones_like(src_start)
    rows = TransferPlan(BASE, OUT, src_start, lo - start[box], hi - lo, ones, ones.copy())
    return rows, box


def _one_box(geometry: Geometry, selection: Selection) -> tuple[TransferPlan, np.ndarray]:
    """:func:`box_rows` of one box, in plain Python: for the few chunks of one box, cheaper
    than numpy's cost per call."""
    chunks, grid, axis = geometry.chunks, geometry.grid, geometry.axis
    spans = []
    for a, c in zip(selection.axes, chunks):
        stop = a.start + a.count
        spans.append([(p, max(a.start, p * c), min(stop, (p + 1) * c), a.start)
                      for p in range(a.start // c, (stop - 1) // c + 1)])
    src, dst, count = [], [], []
    for parts in itertools.product(*spans):
        chunk_id = 0
        for (p, *_), n in zip(parts, grid):
            chunk_id = chunk_id * n + p
        lo = [lo - p * c for (p, lo, _, _), c in zip(parts, chunks)]
        lo[axis] += chunk_id * chunks[axis]
        src.append(lo)
        dst.append([lo - first for _, lo, _, first in parts])
        count.append([hi - lo for _, lo, hi, _ in parts])
    src_start = np.array(src, np.int64)
    ones = np.ones_like(src_start)
    return (TransferPlan(BASE, OUT, src_start, np.array(dst, np.int64),
                         np.array(count, np.int64), ones, ones.copy()),
            np.zeros(len(src), np.intp))
