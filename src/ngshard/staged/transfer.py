"""TransferPlan: the n-dimensional slice copies between one pair of slabs, and how plans make
them from the chunk mappers (seed 003's steps 6 and 7).

A transfer is a source start, a destination start, a count and a step on each side, per axis;
a TransferPlan holds them as (rows, ndim) arrays, one row per slice pair, for one source (a
slab, or the assigned value) and one destination (a slab, or the result of a read). Plans
build them with numpy over all chunks at once; ``copy.py`` executes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .geometry import columns
from .mapper import IndexChunkMapper

VALUE = "value"  # the value of an assignment
OUT = "out"  # the result of a read


def _name(end: int | str) -> str:
    return end if isinstance(end, str) else f"slabs[{end}]"


def _index(start: Sequence[int], count: Sequence[int], step: Sequence[int]) -> str:
    return ", ".join(f"{a}:{a + (n - 1) * s + 1}" + (f":{s}" if s != 1 and n > 1 else "")
                     for a, n, s in zip(start, count, step))


@dataclass
class TransferPlan:
    """Slice copies from ``src`` to ``dst``: ``dst[dst_start + dst_step * k] =
    src[src_start + src_step * k]`` for k < count, per axis and row."""

    src: int | str
    dst: int | str
    src_start: np.ndarray
    dst_start: np.ndarray
    count: np.ndarray
    src_step: np.ndarray
    dst_step: np.ndarray
    #: The rows enumerate, in C order, the chunks of a box of this shape with one row each
    #: (None: no such structure); lets the executor copy a regular tiling in one operation.
    box: tuple[int, ...] | None = None

    def __len__(self) -> int:
        return len(self.count)

    @property
    def points(self) -> int:
        """Points copied, all rows together."""
        return int(np.prod(self.count, axis=1).sum())

    def lines(self, limit: int | None = None) -> list[str]:
        rows = range(len(self) if limit is None else min(limit, len(self)))
        out = [f"# {len(self)} transfers from {_name(self.src)} to {_name(self.dst)}"]
        s0, d0, n = self.src_start.tolist(), self.dst_start.tolist(), self.count.tolist()
        s1, d1 = self.src_step.tolist(), self.dst_step.tolist()
        out += [f"{_name(self.dst)}[{_index(d0[i], n[i], d1[i])}] = "
                f"{_name(self.src)}[{_index(s0[i], n[i], s1[i])}]" for i in rows]
        if len(rows) < len(self):
            out.append(f"# ... {len(self) - len(rows)} more")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def selection_rows(mappers: Sequence[IndexChunkMapper], idx: np.ndarray, offsets: np.ndarray,
                   axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The slice pairs between chunks and the selection: the pseudo-cartesian product, per
    chunk, of its slice pairs along each axis.

    Parameters
    ----------
    mappers
        One per axis.
    idx
        (k, ndim): each chunk's index into ``mappers[a].chunks`` along each axis.
    offsets
        (k,): each chunk's offset on its slab (along ``axis``).

    Returns
    -------
    slab_start, slab_step, selection_start, count
        (rows, ndim) each; rows of one chunk are adjacent, in chunk order.
    """
    k, ndim = idx.shape
    if all(m.one_pair for m in mappers):  # one pair per chunk and axis
        # (ndim, 4, k) -> (4, k, ndim): the four results as C-ordered (k, ndim) arrays (one
        # chunk of one-chunk mappers: their own tables)
        rows = np.array([m.pairs for m in mappers] if k == 1 and all(
            len(m) == 1 for m in mappers) else
            [m.pairs[:, idx[:, a]] for a, m in enumerate(mappers)], np.int64)
        slab_start, slab_step, sel_start, count = np.ascontiguousarray(rows.transpose(1, 2, 0))
        slab_start[:, axis] += offsets
        return slab_start, slab_step, sel_start, count
    first = columns([m.bounds[idx[:, a]] for a, m in enumerate(mappers)])
    pairs = columns([m.pairs_per_chunk[idx[:, a]] for a, m in enumerate(mappers)])
    per_chunk = np.prod(pairs, axis=1)
    owner = np.repeat(np.arange(k), per_chunk)
    rank = np.arange(len(owner)) - np.repeat(np.cumsum(per_chunk) - per_chunk, per_chunk)
    slab_start = np.empty((len(owner), ndim), np.int64)
    slab_step, sel_start, count = (np.empty_like(slab_start) for _ in range(3))
    for a in range(ndim - 1, -1, -1):  # the last axis varies fastest
        n = pairs[owner, a]
        pair = first[owner, a] + rank % n
        rank = rank // n
        m = mappers[a]
        slab_start[:, a], slab_step[:, a] = m.local[pair], m.step[pair]
        sel_start[:, a], count[:, a] = m.start[pair], m.count[pair]
    slab_start[:, axis] += offsets[owner]
    return slab_start, slab_step, sel_start, count


def chunk_rows(src: int | str, dst: int | str, extents: np.ndarray, src_offsets: np.ndarray,
               dst_offsets: np.ndarray, src_axis: int, dst_axis: int,
               lo: np.ndarray | None = None) -> TransferPlan:
    """Whole-chunk copies (the part ``lo <= p < extents`` of each chunk, all of it by default)
    between slabs: one row per chunk, at the given offsets along each slab's stacking axis."""
    k, ndim = extents.shape
    lo = np.zeros((k, ndim), np.int64) if lo is None else np.broadcast_to(lo, (k, ndim))
    src_start, dst_start = lo.copy(), lo.copy()
    src_start[:, src_axis] += src_offsets
    dst_start[:, dst_axis] += dst_offsets
    ones = np.ones((k, ndim), np.int64)
    return TransferPlan(src, dst, src_start, dst_start, extents - lo, ones, ones.copy())
