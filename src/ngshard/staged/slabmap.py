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

from .._arrays import unique
from .geometry import BASE, FIRST_STAGED, FULL, Geometry


class SlabMap:
    """The slab index, offset and dirty flag of every chunk of a grid.

    Entries are the rows (id, slab, offset, dirty) of one int64 table sorted by id, so that
    adding entries is one insertion; ``ids``, ``slabs``, ``offsets`` and ``dirty`` are its
    columns.
    """

    def __init__(self, geometry: Geometry, base_box: tuple[int, ...] | None = None) -> None:
        self.geometry = geometry
        self.base_box = np.array(geometry.grid if base_box is None else base_box, np.int64)
        self._table = np.zeros((0, 4), np.int64)
        self.version = 0  # counts changes, so a plan can tell the map it was made from

    @property
    def ids(self) -> np.ndarray:
        return self._table[:, 0]

    @property
    def slabs(self) -> np.ndarray:
        return self._table[:, 1]

    @property
    def offsets(self) -> np.ndarray:
        return self._table[:, 2]

    @property
    def dirty(self) -> np.ndarray:
        return self._table[:, 3].astype(bool)

    def __len__(self) -> int:
        return len(self._table)

    def copy(self) -> SlabMap:
        other = SlabMap(self.geometry, tuple(self.base_box.tolist()))
        other._table = self._table.copy()
        return other

    def _defaults(self, ids: np.ndarray, positions: np.ndarray | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
        """(slab, offset) of chunks that hold no entry."""
        if not self.base_box.all():  # nothing stored (a new array): all on the full slab
            return np.full(len(ids), FULL, np.int32), np.zeros(len(ids), np.int64)
        if positions is None:
            positions = self.geometry.positions(ids)
        inside = (positions < self.base_box).all(axis=1) if len(ids) else np.zeros(0, bool)
        slabs = np.where(inside, BASE, FULL).astype(np.int32)
        return slabs, np.where(inside, self.geometry.base_offsets(ids), 0)

    def lookup(self, ids: np.ndarray, positions: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(slab index, offset, dirty) of each chunk id (``positions``: theirs, if known)."""
        table = self._table
        if not (len(table) and len(ids)):
            slabs, offsets = self._defaults(ids, positions)
            return slabs, offsets, np.zeros(len(ids), bool)
        rows = table[np.minimum(np.searchsorted(table[:, 0], ids), len(table) - 1)]
        hit = rows[:, 0] == ids
        if hit.all():  # every chunk has an entry (staged ones, written again): no defaults
            return rows[:, 1], rows[:, 2], rows[:, 3].astype(bool)
        slabs, offsets = self._defaults(ids, positions)
        dirty = np.zeros(len(ids), bool)
        rows = rows[hit]
        slabs[hit], offsets[hit], dirty[hit] = rows[:, 1], rows[:, 2], rows[:, 3]
        return slabs, offsets, dirty

    def assign(self, ids: np.ndarray, slabs: np.ndarray, offsets: np.ndarray,
               dirty: np.ndarray) -> None:
        """Record where the chunks ``ids`` (unique) lie now; chunks back where they lie by
        default lose their entry."""
        if not len(ids):
            return
        rows = np.empty((len(ids), 4), np.int64)
        rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3] = ids, slabs, offsets, dirty
        if len(rows) > 1 and (rows[1:, 0] < rows[:-1, 0]).any():
            rows = rows[np.argsort(rows[:, 0])]
        self.version += 1
        if (rows[:, 1] >= FIRST_STAGED).all():  # staged chunks never lie where by default
            default = np.zeros(len(rows), bool)
        else:
            default_slabs, default_offsets = self._defaults(rows[:, 0])
            default = (rows[:, 1] == default_slabs) & (rows[:, 2] == default_offsets) & \
                (rows[:, 3] == 0)
        table = self._table
        at = np.searchsorted(table[:, 0], rows[:, 0])
        hit = at < len(table)
        hit[hit] = table[at[hit], 0] == rows[hit, 0]
        table[at[hit]] = rows[hit]
        new = ~hit & ~default
        if new.any():
            self._table = np.insert(table, at[new], rows[new], axis=0)
        if (hit & default).any():
            self._drop_defaults()

    def _drop_defaults(self) -> None:
        slabs, offsets = self._defaults(self.ids)
        keep = (self.slabs != slabs) | (self.offsets != offsets) | (self._table[:, 3] != 0)
        if not keep.all():
            self._table = self._table[keep]

    def on_slabs(self, slabs) -> np.ndarray:
        """Positions in the entry arrays of the chunks lying on any of ``slabs``."""
        return np.flatnonzero(np.isin(self.slabs, np.asarray(list(slabs), np.int64)))

    def staged(self) -> np.ndarray:
        """Positions in the entry arrays of the chunks on staged slabs."""
        return np.flatnonzero(self.slabs >= FIRST_STAGED)

    def live_slabs(self) -> set[int]:
        """The staged slabs that hold at least one chunk."""
        return set(unique(self.slabs[self.slabs >= FIRST_STAGED]).tolist())

    def resize(self, geometry: Geometry) -> None:
        """Re-key the entries for a new grid; entries outside it are gone, and the base box
        shrinks to fit inside it."""
        self.version += 1
        positions = self.geometry.positions(self.ids)
        inside = (positions < np.array(geometry.grid)).all(axis=1)
        self.base_box = np.minimum(self.base_box, geometry.grid)
        self.geometry = geometry
        table = self._table[inside]
        table[:, 0] = geometry.ids(positions[inside])
        table = table[np.argsort(table[:, 0])]
        on_base = table[:, 1] == BASE  # stored chunks' offsets follow their new ids
        table[on_base, 2] = geometry.base_offsets(table[on_base, 0])
        self._table = table
        self._drop_defaults()

    def dense(self) -> tuple[np.ndarray, np.ndarray]:
        """``(slab_indices, slab_offsets)`` over the whole grid, as seed 003 prints them."""
        grid = self.geometry.grid
        ids = np.arange(int(np.prod(grid)), dtype=np.int64)
        slabs, offsets, _ = self.lookup(ids)
        return slabs.reshape(grid), offsets.reshape(grid)
