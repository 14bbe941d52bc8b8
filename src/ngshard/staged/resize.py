"""ResizePlan: a new shape (seed 003's resize), decided from shapes and the chunk map alone.

- Chunks outside the new grid leave the map; staged slabs left holding nothing are dropped;
  the stored ones, and staged ones the source may hold, are deleted (staged in the source,
  so a commit removes them, and a chunk brought back by a later enlargement reads as the
  fill value, not as what storage held).
- Chunks new to the grid lie on the full slab: nothing is done for them.
- Edge chunks, the last chunk along an axis in both shapes, change extent. Where stored edge
  chunks are clipped (precomputed) every changed one is rewritten; where they are whole (zarr)
  shrinking leaves them as they are (the part past the edge is ignored from then on) and only
  growing rewrites them. A rewritten chunk on the base slab first moves whole to a new staged
  slab; the part that grows is then filled from the full slab.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._arrays import unique
from ..types import MemoryOrder
from .geometry import BASE, FIRST_STAGED, FULL, Geometry
from .plans import Plan
from .slabmap import SlabMap
from .transfer import TransferPlan, chunk_rows


def _box(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """(k, ndim) positions p with lo <= p < hi."""
    sizes = np.maximum(hi - lo, 0)
    if not sizes.all():
        return np.zeros((0, len(lo)), np.int64)
    return np.indices(sizes).reshape(len(lo), -1).T + lo


def box_difference(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """(k, ndim) positions of the box [0, outer) outside the box [0, inner), as the disjoint
    pieces: along axis a past ``inner[a]``, before ``inner`` on the axes before it."""
    pieces = []
    for a in range(len(outer)):
        lo, hi = np.zeros(len(outer), np.int64), np.array(outer, np.int64)
        hi[:a] = np.minimum(inner[:a], outer[:a])
        lo[a] = min(inner[a], outer[a])
        pieces.append(_box(lo, hi))
    return np.concatenate(pieces) if pieces else np.zeros((0, len(outer)), np.int64)


class ResizePlan(Plan):
    """Resizing from ``geometry.shape`` to ``shape``."""

    name = "ResizePlan"

    def __init__(self, geometry: Geometry, slabmap: SlabMap, shape: tuple[int, ...],
                 orders: Sequence[MemoryOrder], clipped_edges: bool) -> None:
        super().__init__(geometry, slabmap, orders)
        self.new = new = geometry.resized(shape)
        old_grid, new_grid = np.array(geometry.grid), np.array(new.grid)
        common = np.minimum(old_grid, new_grid)
        # stored chunks outside the new grid, and every chunk with an entry there that the
        # source may hold: evicted ones, and staged ones it held before (written through or
        # back, then staged again); deleting a chunk the source lacks does nothing
        gone = box_difference(slabmap.base_box, new_grid)
        entries = geometry.positions(slabmap.ids[slabmap.slabs != FULL])
        gone = np.concatenate([gone, entries[(entries >= new_grid).any(axis=1)]])
        edges = self._edges(geometry, new, common, clipped_edges)
        ids = geometry.ids(edges)
        slabs, offsets, _ = slabmap.lookup(ids, edges)
        keep = slabs != FULL
        edges, ids, slabs, offsets = edges[keep], ids[keep], slabs[keep], offsets[keep]
        # clipped edge chunks are stored anew under their new extent (and name)
        self.deletes = np.concatenate([gone, edges]) if clipped_edges else gone
        old_ext, new_ext = geometry.extents(edges), new.extents(edges)
        kept_ext = np.minimum(old_ext, new_ext)
        moving = slabs == BASE
        if moving.any():
            slab, new_offsets = self._append(int(moving.sum()))
            self.transfers.append(chunk_rows(BASE, slab, kept_ext[moving], offsets[moving],
                                             new_offsets, self.axis(BASE), self.axis(slab)))
            slabs[moving], offsets[moving] = slab, new_offsets
        self._fill(kept_ext, new_ext, slabs, offsets)
        self.updates = (new.ids(edges), slabs, offsets, True)
        inside = (geometry.positions(slabmap.ids) < new_grid).all(axis=1)
        before = set(unique(slabmap.slabs[slabmap.slabs >= FIRST_STAGED]).tolist())
        after = set(unique(slabmap.slabs[inside & (slabmap.slabs >= FIRST_STAGED)]
                              ).tolist())
        self.drops = sorted(before - after)

    @staticmethod
    def _edges(old: Geometry, new: Geometry, common: np.ndarray, clipped: bool) -> np.ndarray:
        """Positions, in both grids, of the chunks whose extent changes (grows, unless
        ``clipped``)."""
        found = []
        for a in range(old.ndim):
            j = int(common[a]) - 1
            if j < 0:
                continue
            e0 = min(old.chunks[a], old.shape[a] - j * old.chunks[a])
            e1 = min(new.chunks[a], new.shape[a] - j * new.chunks[a])
            if e1 > e0 or (clipped and e1 != e0):
                lo, hi = np.zeros(old.ndim, np.int64), common.copy()
                lo[a] = j
                found.append(_box(lo, hi))
        if not found:
            return np.zeros((0, old.ndim), np.int64)
        return np.unique(np.concatenate(found), axis=0)

    def _fill(self, kept: np.ndarray, new: np.ndarray, slabs: np.ndarray,
              offsets: np.ndarray) -> None:
        """Fill-value transfers into the part of each chunk past ``kept``, up to ``new``: the
        disjoint pieces of the box difference, one row per chunk and growing axis."""
        for slab in unique(slabs).tolist():
            mine = slabs == slab
            k, n = kept[mine], new[mine]
            rows_lo, rows_count, owner = [], [], []
            for a in range(k.shape[1]):
                grows = np.flatnonzero(n[:, a] > k[:, a])
                if not len(grows):
                    continue
                lo = np.zeros((len(grows), k.shape[1]), np.int64)
                lo[:, a] = k[grows, a]
                hi = n[grows].copy()
                hi[:, :a] = k[grows, :a]
                rows_lo.append(lo)
                rows_count.append(hi - lo)
                owner.append(grows)
            if not rows_lo:
                continue
            lo, count = np.concatenate(rows_lo), np.concatenate(rows_count)
            dst = lo.copy()
            dst[:, self.axis(slab)] += offsets[mine][np.concatenate(owner)]
            ones = np.ones_like(lo)
            self.transfers.append(TransferPlan(FULL, slab, lo, dst, count, ones, ones.copy()))

    def apply(self, slabmap: SlabMap) -> None:
        slabmap.resize(self.new)
        super().apply(slabmap)

    @property
    def _bumps(self) -> int:
        return 1 + super()._bumps

    def _summary(self) -> list[str]:
        parts = super()._summary()
        return [f"old_shape={self.geometry.shape}", f"new_shape={self.new.shape}", *parts[:2],
                f"delete {len(self.deletes)} stored chunks", parts[2]]
