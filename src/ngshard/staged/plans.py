"""The plans of reads, writes and loads (seed 003): what moves between which slabs, decided
from shapes, chunk maps and indices alone, never from data, and printable before running.

Every plan follows the seed's general algorithm: map the selection onto chunks per axis
(:class:`IndexChunkMapper`), look up where the touched chunks lie (:class:`SlabMap`), pick
chunks by where they lie, group them by slab, and turn each group into one
:class:`TransferPlan` of n-dimensional slice pairs. The array (``array.py``) executes a plan:
appends its empty slabs, runs its transfers in order, records where chunks lie now, drops the
slabs it empties.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._arrays import unique
from ..types import MemoryOrder
from .geometry import BASE, FIRST_STAGED, FULL, Geometry, box_indices
from .indexing import Selection
from .mapper import IndexChunkMapper, mapper
from .slabmap import SlabMap
from .transfer import OUT, VALUE, TransferPlan, chunk_rows, selection_rows

PRINT_MAP_CHUNKS = 256  # plans of grids up to this many chunks print slab_indices/offsets


class Plan:
    """What an operation will do; subclasses fill in the parts and the header."""

    name = "Plan"

    def __init__(self, geometry: Geometry, slabmap: SlabMap | None = None,
                 orders: Sequence[MemoryOrder] = ()) -> None:
        self.geometry = geometry
        self.orders = list(orders)  # the memory order of each slab, new ones included
        self.appends: list[tuple[int, int]] = []  # (slab index, number of chunks)
        self.transfers: list[TransferPlan] = []
        self.drops: list[int] = []
        self.updates: tuple | None = None  # (ids, slabs, offsets, dirty) for the slab map
        # printing shows the map after the plan: a copy of the map it was made from, with the
        # plan applied, or that map itself once the plan has run (see __str__)
        small = slabmap is not None and geometry.num_chunks <= PRINT_MAP_CHUNKS
        self._map = slabmap if small else None
        self._version = self._map.version if self._map is not None else 0

    def axis(self, slab: int | str) -> int:
        """The stacking axis of a slab (the full and base slabs: the array's)."""
        if isinstance(slab, str) or slab < FIRST_STAGED:
            return self.geometry.axis
        return self.geometry.stack_axis(self.orders[slab])

    def _append(self, n: int, order: MemoryOrder | None = None) -> tuple[int, np.ndarray]:
        """A new slab of ``n`` chunks: its index and the chunks' offsets on it."""
        slab = len(self.orders)
        self.orders.append(order or self.geometry.order)
        self.appends.append((slab, n))
        axis = self.axis(slab)
        return slab, np.arange(n, dtype=np.int64) * self.geometry.chunks[axis]

    @property
    def new_chunks(self) -> int:
        """Chunks on the slabs this plan appends."""
        return sum(n for _, n in self.appends)

    def apply(self, slabmap: SlabMap) -> None:
        """Record in ``slabmap`` where the chunks lie after this plan."""
        if self.updates is not None:
            slabmap.assign(*self.updates)

    def _summary(self) -> list[str]:
        pairs = len(self.transfers)
        return [f"append {len(self.appends)} empty slabs",
                f"{sum(len(t) for t in self.transfers)} slice transfers among {pairs} slab "
                f"pairs", f"drop {len(self.drops)} slabs"]

    def lines(self, limit: int | None = 50) -> list[str]:
        """The instructions, as the seed prints them."""
        out = []
        for slab, n in self.appends:
            order = self.orders[slab]
            shape = self.geometry.slab_shape(n, order)
            suffix = ", order='F'" if order == "F" else ""
            out.append(f"slabs.append(np.empty({shape}{suffix}))  # slabs[{slab}]")
        for t in self.transfers:
            out += t.lines(limit)
        out += [f"slabs[{s}] = None" for s in self.drops]
        return out

    def __str__(self) -> str:
        text = [f"{self.name}<{', '.join(self._summary())}>"]
        text += ["  " + line for line in self.lines()]
        after = None
        if self._map is not None and self._map.version == self._version:  # not run yet
            after = self._map.copy()
            self.apply(after)
        elif self._map is not None and self._map.version == self._version + self._bumps:
            after = self._map  # run just now, nothing else since
        if after is not None:
            indices, offsets = after.dense()
            if indices.ndim > 1 and indices.shape[-1] == 1:  # a volume's channels: one chunk
                indices, offsets = indices[..., 0], offsets[..., 0]
            text += ["slab_indices:", str(indices), "slab_offsets:", str(offsets)]
        return "\n".join(text)

    @property
    def _bumps(self) -> int:
        """How many versions of the slab map :meth:`apply` makes."""
        return int(self.updates is not None and len(self.updates[0]) > 0)

    __repr__ = __str__


@dataclass
class Touched:
    """The chunks a selection touches (C order over the selected chunks of each axis) and
    where they lie."""

    mappers: list[IndexChunkMapper]
    idx: np.ndarray  # (k, ndim) index into each mapper's chunks
    positions: np.ndarray
    ids: np.ndarray
    slabs: np.ndarray
    offsets: np.ndarray
    dirty: np.ndarray
    whole: np.ndarray  # wholly selected along every axis


def touch(geometry: Geometry, slabmap: SlabMap, selection: Selection) -> Touched | None:
    """Steps 1 to 4 of the seed: None for an empty selection."""
    mappers = [mapper(a, n, c) for a, n, c in
               zip(selection.axes, geometry.shape, geometry.chunks)]
    sizes = [len(m) for m in mappers]
    if 0 in sizes:
        return None
    idx = box_indices(tuple(sizes))
    # (ndim, 2, k): each chunk's index along each axis and whether it is whole there (one
    # chunk: the mappers' own tables)
    heads = np.array([m.heads for m in mappers] if len(idx) == 1 else
                     [m.heads[:, idx[:, a]] for a, m in enumerate(mappers)], np.int64)
    positions = np.ascontiguousarray(heads[:, 0].T)
    ids = geometry.ids(positions)
    slabs, offsets, dirty = slabmap.lookup(ids, positions)
    whole = np.asarray(heads[:, 1].all(axis=0))
    return Touched(mappers, idx, positions, ids, slabs, offsets, dirty, whole)


def _by_slab(plan: Plan, t: Touched, slabs: np.ndarray, offsets: np.ndarray):
    """(slab, slab_start, slab_step, selection_start, count, box) per slab the chunks lie
    on; ``box``: the chunk box the rows enumerate, if they do (see TransferPlan)."""
    if (slabs == slabs[0]).all():  # the common case: one slab
        slab = int(slabs[0])
        sizes = tuple(len(m) for m in t.mappers)
        whole_box = len(t.idx) == math.prod(sizes)
        single = all(m.one_pair for m in t.mappers)
        box = sizes if single and whole_box else None
        yield (slab, *selection_rows(t.mappers, t.idx, offsets, plan.axis(slab)), box)
        return
    for slab in unique(slabs).tolist():
        mine = slabs == slab
        yield (slab, *selection_rows(t.mappers, t.idx[mine], offsets[mine], plan.axis(slab)),
               None)


class GetItemPlan(Plan):
    """A read: every touched chunk's selected points, from whichever slab holds it, into
    the result (created empty). Reads never change the array."""

    name = "GetItemPlan"

    def __init__(self, geometry: Geometry, slabmap: SlabMap, selection: Selection,
                 orders: Sequence[MemoryOrder]) -> None:
        super().__init__(geometry, None, orders)
        self.out_shape = selection.shape
        t = touch(geometry, slabmap, selection)
        if t is None:
            return
        for slab, start, step, sel, count, box in _by_slab(self, t, t.slabs, t.offsets):
            self.transfers.append(TransferPlan(slab, OUT, start, sel, count, step,
                                               np.ones_like(step), box))

    def _summary(self) -> list[str]:
        return [f"out_shape={self.out_shape}", self._summary_transfers()]

    def _summary_transfers(self) -> str:
        return (f"{sum(len(t) for t in self.transfers)} slice transfers among "
                f"{len(self.transfers)} slab pairs")


class SetItemPlan(Plan):
    """An assignment. Chunks partially selected and lying on the full or the base slab are
    first copied whole to a new staged slab (in the array's memory order, as chunks decode);
    chunks wholly selected get a new slab without being read (in ``value_order``, the value's
    own, so filling it never transposes); then the value goes onto the staged slab of every
    touched chunk, in place.

    A bulk assignment, one that selects wholly at least ``through`` chunks not staged yet,
    writes those through instead: they go from the value straight to the source (encoded
    there, as slabs are written back when memory runs short) and lie on the base slab
    after. Staging them would cost a copy of the value and a commit would encode them just
    the same; only a later partial write to one of them reads it back.
    """

    name = "SetItemPlan"

    def __init__(self, geometry: Geometry, slabmap: SlabMap, selection: Selection,
                 orders: Sequence[MemoryOrder], value_order: MemoryOrder | None = None,
                 through: int | None = None) -> None:
        super().__init__(geometry, slabmap, orders)
        self.value_shape, self._selection = selection.result_shape, selection
        #: Chunks written through: (grid positions, start and count in the value), or None.
        self.through: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        t = touch(geometry, slabmap, selection)
        if t is None:
            return
        slabs, offsets = t.slabs, t.offsets
        read_only = slabs < FIRST_STAGED
        any_read_only = bool(read_only.any())  # none: every chunk is staged already
        bulk = read_only & t.whole if any_read_only and through is not None else None
        if bulk is not None and bulk.sum() < through:
            bulk = None
        if any_read_only:
            slabs, offsets = slabs.copy(), offsets.copy()
            free = read_only if bulk is None else read_only & ~bulk
            for partial in (True, False):
                picked = np.flatnonzero(free & (t.whole != partial))
                if not len(picked):
                    continue
                new, new_offsets = self._append(len(picked), None if partial else value_order)
                if partial:  # the old chunk first
                    extents = geometry.extents(t.positions[picked])
                    for old in (FULL, BASE):
                        mine = t.slabs[picked] == old
                        if mine.any():
                            self.transfers.append(chunk_rows(
                                old, new, extents[mine], t.offsets[picked[mine]],
                                new_offsets[mine], self.axis(old), self.axis(new)))
                slabs[picked], offsets[picked] = new, new_offsets
        staged_slabs, staged_offsets = slabs, offsets
        if bulk is not None:
            _, _, sel, count = selection_rows(t.mappers, t.idx[bulk], offsets[bulk], 0)
            self.through = (t.positions[bulk], sel, count)
            slabs[bulk], offsets[bulk] = BASE, geometry.base_offsets(t.ids[bulk])
            staged_slabs, staged_offsets = slabs[~bulk], offsets[~bulk]
            t = dataclasses.replace(t, idx=t.idx[~bulk])  # the staged ones, below
        if len(t.idx):
            for slab, start, step, sel, count, box in _by_slab(self, t, staged_slabs,
                                                               staged_offsets):
                self.transfers.append(TransferPlan(VALUE, slab, sel, start, count,
                                                   np.ones_like(step), step, box))
        # chunks staged and changed already stay as they are
        changed = read_only | ~t.dirty
        dirty = True if bulk is None else ~bulk
        if changed.all():
            self.updates = (t.ids, slabs, offsets, dirty)
        else:
            self.updates = (t.ids[changed], slabs[changed], offsets[changed],
                            True if isinstance(dirty, bool) else dirty[changed])

    @property
    def value_view(self) -> str:
        """How the value maps onto the selection (printed; made only when asked)."""
        return self._selection.view()

    def _summary(self) -> list[str]:
        parts = [f"value_shape={self.value_shape}", f"value_view={self.value_view}",
                 *super()._summary()]
        if self.through is not None:
            parts.insert(2, f"write {len(self.through[0])} chunks through")
        return parts

    def lines(self, limit: int | None = 50) -> list[str]:
        out = super().lines(limit)
        if self.through is not None:
            positions, start, count = (a.tolist() for a in self.through)
            shown = range(len(positions) if limit is None else min(limit, len(positions)))
            out.append(f"# {len(positions)} chunks from value to the source")
            out += ["source.write({}, value[{}])".format(
                tuple(positions[i]), ", ".join(f"{a}:{a + n}" for a, n in
                                               zip(start[i], count[i]))) for i in shown]
        return out


class LoadPlan(Plan):
    """Every chunk still on the base slab, copied to one new staged slab (not dirty: a
    commit does not write it back unless it is changed)."""

    name = "LoadPlan"

    def __init__(self, geometry: Geometry, slabmap: SlabMap, orders: Sequence[MemoryOrder]) -> None:
        super().__init__(geometry, slabmap, orders)
        box = slabmap.base_box
        inside = np.indices(tuple(box.tolist())).reshape(len(box), -1).T if box.all() else \
            np.zeros((0, len(box)), np.int64)
        ids = np.union1d(geometry.ids(inside), slabmap.ids[slabmap.slabs == BASE])
        slabs, offsets, _ = slabmap.lookup(ids)
        ids, offsets = ids[slabs == BASE], offsets[slabs == BASE]
        if not len(ids):
            return
        new, new_offsets = self._append(len(ids))
        extents = geometry.extents(geometry.positions(ids))
        self.transfers.append(chunk_rows(BASE, new, extents, offsets, new_offsets,
                                         self.axis(BASE), self.axis(new)))
        self.updates = (ids, new, new_offsets, False)


class GatherPlan(Plan):
    """Whole chunks (clipped at the edge) at given grid positions, from wherever they lie,
    side by side on one new array (a slab that the array does not keep)."""

    name = "GatherPlan"

    def __init__(self, geometry: Geometry, slabmap: SlabMap, positions: np.ndarray,
                 orders: Sequence[MemoryOrder]) -> None:
        super().__init__(geometry, None, orders)
        self.positions = positions
        ids = geometry.ids(positions)
        slabs, offsets, _ = slabmap.lookup(ids, positions)
        size = geometry.chunks[geometry.axis]
        out_offsets = np.arange(len(ids), dtype=np.int64) * size  # ``out``: the array's order
        extents = geometry.extents(positions)
        for slab in unique(slabs).tolist():
            mine = slabs == slab
            self.transfers.append(chunk_rows(slab, OUT, extents[mine], offsets[mine],
                                             out_offsets[mine], self.axis(slab),
                                             self.axis(OUT)))
