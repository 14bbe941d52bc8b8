"""SlabMap: where every chunk lies, seed 003's ``slab_indices`` and ``slab_offsets``.

One slab index and one offset per chunk, plus whether a staged chunk differs from storage
(``dirty``: a chunk loaded but never written is not written back). Seed 003 keeps them as
dense arrays over the chunk grid; the volumes here reach 10**9 chunks and more, so only the
chunks that are not where they are by default are held (sorted by chunk id), and dense arrays
are made for any part of the grid a plan asks about (:meth:`lookup`), or the whole grid
(:meth:`dense`, for printing small ones).

By default a chunk lies on the base slab (it is read from storage) if it is inside the
*base box*, and on the full slab (it is the fill value) outside it. The base box is the grid
as stored, cut down by every shrink since: a chunk that a resize dropped and a later one
brought back is the fill value, whatever storage still holds until the commit.
"""

from __future__ import annotations

import numpy as np

from .geometry import BASE, FIRST_STAGED, FULL, Geometry


class SlabMap:
    """The slab index, offset and dirty flag of every chunk of a grid."""

    def __init__(self, geometry: Geometry, base_box: tuple[int, ...] | None = None) -> None:
        self.geometry = geometry
        self.base_box = np.array(geometry.grid if base_box is None else base_box, np.int64)
        self.ids = np.zeros(0, np.int64)
        self.slabs = np.zeros(0, np.int32)
        self.offsets = np.zeros(0, np.int64)
        self.dirty = np.zeros(0, bool)
        self.version = 0  # counts changes, so a plan can tell the map it was made from

    def __len__(self) -> int:
        return len(self.ids)

    def copy(self) -> SlabMap:
        other = SlabMap(self.geometry, tuple(self.base_box.tolist()))
        other.ids, other.slabs = self.ids.copy(), self.slabs.copy()
        other.offsets, other.dirty = self.offsets.copy(), self.dirty.copy()
        return other

    def _defaults(self, ids: np.ndarray, positions: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """(slab, offset) of chunks that hold no entry."""
        if positions is None:
            positions = self.geometry.positions(ids)
        inside = (positions < self.base_box).all(axis=1) if len(ids) else np.zeros(0, bool)
        slabs = np.where(inside, BASE, FULL).astype(np.int32)
        return slabs, np.where(inside, self.geometry.base_offsets(ids), 0)

    def lookup(self, ids: np.ndarray, positions: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slab index, offset, dirty) of each chunk id (``positions``: theirs, if known)."""
        slabs, offsets = self._defaults(ids, positions)
        dirty = np.zeros(len(ids), bool)
        if len(self.ids) and len(ids):
            at = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
            hit = self.ids[at] == ids
            slabs[hit], offsets[hit] = self.slabs[at[hit]], self.offsets[at[hit]]
            dirty[hit] = self.dirty[at[hit]]
        return slabs, offsets, dirty

    def assign(self, ids: np.ndarray, slabs: np.ndarray, offsets: np.ndarray,
               dirty: np.ndarray) -> None:
        """Record where the chunks ``ids`` (unique) lie now; chunks back where they lie by
        default lose their entry."""
        if not len(ids):
            return
        ids = np.asarray(ids, np.int64)
        slabs = np.broadcast_to(np.asarray(slabs, np.int32), ids.shape)
        offsets = np.broadcast_to(np.asarray(offsets, np.int64), ids.shape)
        dirty = np.broadcast_to(np.asarray(dirty, bool), ids.shape)
        if len(ids) > 1 and (ids[1:] < ids[:-1]).any():
            order = np.argsort(ids)
            ids, slabs, offsets, dirty = ids[order], slabs[order], offsets[order], dirty[order]
        self.version += 1
        default_slabs, default_offsets = self._defaults(ids)
        default = (slabs == default_slabs) & (offsets == default_offsets) & ~dirty
        at = np.searchsorted(self.ids, ids)
        hit = at < len(self.ids)
        hit[hit] = self.ids[at[hit]] == ids[hit]
        self.slabs[at[hit]], self.offsets[at[hit]] = slabs[hit], offsets[hit]
        self.dirty[at[hit]] = dirty[hit]
        new = ~hit & ~default
        if new.any():
            self.ids = np.insert(self.ids, at[new], ids[new])
            self.slabs = np.insert(self.slabs, at[new], slabs[new])
            self.offsets = np.insert(self.offsets, at[new], offsets[new])
            self.dirty = np.insert(self.dirty, at[new], dirty[new])
        if (hit & default).any():
            self._drop_defaults()

    def _drop_defaults(self) -> None:
        slabs, offsets = self._defaults(self.ids)
        keep = (self.slabs != slabs) | (self.offsets != offsets) | self.dirty
        if not keep.all():
            self.ids, self.slabs = self.ids[keep], self.slabs[keep]
            self.offsets, self.dirty = self.offsets[keep], self.dirty[keep]

    def on_slabs(self, slabs) -> np.ndarray:
        """Positions in the entry arrays of the chunks lying on any of ``slabs``."""
        return np.flatnonzero(np.isin(self.slabs, np.asarray(list(slabs), np.int32)))

    def staged(self) -> np.ndarray:
        """Positions in the entry arrays of the chunks on staged slabs."""
        return np.flatnonzero(self.slabs >= FIRST_STAGED)

    def live_slabs(self) -> set[int]:
        """The staged slabs that hold at least one chunk."""
        return set(np.unique(self.slabs[self.slabs >= FIRST_STAGED]).tolist())

    def resize(self, geometry: Geometry) -> None:
        """Re-key the entries for a new grid; entries outside it are gone, and the base box
        shrinks to fit inside it."""
        self.version += 1
        positions = self.geometry.positions(self.ids)
        inside = (positions < np.array(geometry.grid)).all(axis=1)
        self.base_box = np.minimum(self.base_box, geometry.grid)
        self.geometry = geometry
        new_ids = geometry.ids(positions[inside])
        order = np.argsort(new_ids)
        self.ids = new_ids[order]
        self.slabs = self.slabs[inside][order]
        offsets = self.offsets[inside][order]
        # stored chunks' offsets follow their new ids
        on_base = self.slabs == BASE
        offsets[on_base] = geometry.base_offsets(self.ids[on_base])
        self.offsets, self.dirty = offsets, self.dirty[inside][order]
        self._drop_defaults()

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """``(slab_indices, slab_offsets)`` over the whole grid, as seed 003 prints them."""
        grid = self.geometry.grid
        ids = np.arange(int(np.prod(grid)), dtype=np.int64)
        slabs, offsets, _ = self.lookup(ids)
        return slabs.reshape(grid), offsets.reshape(grid)
