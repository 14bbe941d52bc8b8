"""ChangesPlan: staged slabs going back to the chunk source, at a commit (all of them) or when
staged chunks pass their memory budget (the oldest ones).

The changed (dirty) chunks of those slabs are encoded, in batches on threads, and staged in
the source (whose commit writes them: a sharded store spills them to its spill files until
then); chunks that were only loaded go back to the base slab unwritten; the slabs are dropped,
which gives their memory back (seed 003, "Reclaiming memory").
"""

from __future__ import annotations

import numpy as np

from ..types import MemoryOrder
from .geometry import BASE, Geometry
from .plans import Plan
from .slabmap import SlabMap


class ChangesPlan(Plan):
    """Writing back the chunks of staged ``slabs`` (at a commit: all of them; the commit's
    :class:`~ngshard.commitplan.CommitPlan` holds it as ``changes``)."""

    name = "ChangesPlan"

    def __init__(self, geometry: Geometry, slabmap: SlabMap, slabs: list[int],
                 orders: list[MemoryOrder]) -> None:
        super().__init__(geometry, slabmap, orders)
        rows = slabmap.on_slabs(slabs)
        order = rows[np.lexsort((slabmap.offsets[rows], slabmap.slabs[rows]))]
        self.ids = slabmap.ids[order]
        self.slab_of = slabmap.slabs[order]
        self.offsets = slabmap.offsets[order]
        self.dirty = slabmap.dirty[order]
        self.positions = geometry.positions(self.ids)
        self.drops = sorted(slabs)
        self.updates = (self.ids, BASE, geometry.base_offsets(self.ids), False)

    @property
    def encode_count(self) -> int:
        return int(self.dirty.sum())

    def groups(self):
        """(slab, stacking axis, positions, offsets) of the dirty chunks of each slab, in
        slab order."""
        for slab in self.drops:
            mine = (self.slab_of == slab) & self.dirty
            if mine.any():
                yield slab, self.axis(slab), self.positions[mine], self.offsets[mine]

    def _summary(self) -> list[str]:
        return [f"encode {self.encode_count} chunks",
                f"return {len(self.ids) - self.encode_count} clean chunks to the base slab",
                f"drop {len(self.drops)} slabs"]

    def lines(self, limit: int | None = 50) -> list[str]:
        out = []
        for slab in self.drops:
            mine = self.slab_of == slab
            dirty = self.positions[mine & self.dirty].tolist()
            shown = dirty if limit is None else dirty[:limit]
            more = f" and {len(dirty) - len(shown)} more" if len(shown) < len(dirty) else ""
            out.append(f"# slabs[{slab}]: encode {len(dirty)} chunks at grid positions "
                       f"{shown}{more}; {int(mine.sum()) - len(dirty)} clean")
            out.append(f"slabs[{slab}] = None")
        return out
