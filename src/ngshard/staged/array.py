"""StagedChangesArray: an n-dimensional array over a chunk source that holds every changed
chunk in memory, decoded, until a commit (seed 003).

Its data lie in slabs: slab 0 is the full slab (one chunk of the fill value, broadcast, never
written), slab 1 the base slab (the stored chunks, read through the source on demand, in
batches), and every later one a staged slab (a numpy array of decoded chunks side by side).
A :class:`SlabMap` says where each chunk lies. Each method is a dumb executor of a plan made
first (``plans.py``, ``resize.py``, ``changes.py``); ``_*_plan`` methods return the plans
without running them, for printing.

Staged slabs are kept within ``staged_bytes``: past it the oldest slabs are written back to
the source (changed chunks encoded and staged there, spilled to disk where the store can) and
dropped; an assignment that alone would take more than half of it runs in pieces.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..commitplan import CommitPlan
from ..errors import SpecError
from ..limits import DEFAULT_STAGED_BYTES
from ..recycle import RESULTS
from ..types import MemoryOrder
from .boxes import box_rows, plain_boxes
from .changes import ChangesPlan
from .copy import copy_from_chunks, copy_rows_from_chunks, copy_slices
from .geometry import BASE, FULL
from .indexing import Selection, normalize
from .mapper import mapper
from .plans import GatherPlan, GetItemPlan, LoadPlan, Plan, SetItemPlan
from .resize import ResizePlan
from .slabmap import SlabMap
from .source import ChunkSource, WindowSource
from .transfer import OUT, VALUE, TransferPlan

#: Makes a read's result: ``(shape, dtype, order) -> array``
Allocator = Callable[[tuple[int, ...], Any, MemoryOrder], np.ndarray]


def memory_order(value: np.ndarray) -> MemoryOrder | None:
    """"C" if ``value`` varies fastest along its last axis (of those longer than one), "F"
    along its first, None otherwise or for a broadcast scalar: the order a slab made from it
    copies it into without transposing."""
    axes = [(abs(s), a) for a, (s, n) in enumerate(zip(value.strides, value.shape))
            if n > 1 and s]
    if not axes:
        return None
    fastest = min(axes)[1]
    return "C" if fastest == max(a for _, a in axes) else \
        "F" if fastest == min(a for _, a in axes) else None


class StagedChangesArray:
    """Numpy indexing (basic and orthogonal) over the chunks of ``source``, assignments
    staged in memory until :meth:`commit`.

    Parameters
    ----------
    source
        Where the chunks are stored; the array takes its shape, chunk shape, memory order,
        dtype and fill value.
    staged_bytes
        Memory for staged slabs. Past it the oldest are written back to the source (their
        changed chunks encoded, and spilled to disk where the source can) and dropped; an
        assignment of whole chunks worth an eighth of it or more writes them through.

    Examples
    --------
    >>> from ngshard.staged import MemoryChunks
    >>> arr = StagedChangesArray(MemoryChunks((30, 50), (10, 10), "int64"))
    >>> arr[5:20, 30:] = 42            # chunks (1, 3), (1, 4) whole: never read
    >>> int(arr[7, 40]), arr.source.writes
    (42, 0)
    >>> arr.commit()                   # each changed chunk encoded once
    >>> arr.source.writes
    4
    """

    def __init__(self, source: ChunkSource, staged_bytes: int = DEFAULT_STAGED_BYTES) -> None:
        self.source = source
        self.dtype = np.dtype(source.dtype)
        self.staged_bytes = int(staged_bytes)
        #: An assignment selecting wholly this many bytes of chunks not staged yet writes them
        #: through to the source (see SetItemPlan).
        self.write_through_bytes = self.staged_bytes // 8
        self._reset()

    def _reset(self) -> None:
        self.geometry = self.source.geometry
        # a new array: every chunk on the full slab, none read (seed 003: chunks that are not
        # stored lie on the full slab)
        self.map = SlabMap(self.geometry, (0,) * self.ndim if self.source.empty else None)
        full = np.broadcast_to(np.asarray(self.source.fill_value, self.dtype),
                               self.geometry.chunks)
        self.slabs: list[np.ndarray | None] = [full, None]  # slabs[1]: the source
        self.orders = [self.geometry.order] * 2  # memory order of each slab
        self._staged_nbytes = 0
        self._zero_fill = not np.asarray(self.source.fill_value, self.dtype).any()

    @property
    def shape(self) -> tuple[int, ...]:
        return self.geometry.shape

    @property
    def ndim(self) -> int:
        return self.geometry.ndim

    @property
    def chunk_nbytes(self) -> int:
        return math.prod(self.geometry.chunks) * self.dtype.itemsize

    @property
    def nbytes_staged(self) -> int:
        """Memory held by staged slabs."""
        return self._staged_nbytes

    def __repr__(self) -> str:
        return (f"StagedChangesArray(shape={self.shape}, chunks={self.geometry.chunks}, "
                f"dtype={self.dtype}, staged slabs={len(self.map.live_slabs())}, "
                f"staged bytes={self.nbytes_staged})")

    # --- plans, without running them --------------------------------------------------------

    def getitem_plan(self, index: Any) -> GetItemPlan:
        """What reading ``index`` will do: the chunks read and the copies, printable."""
        return GetItemPlan(self.geometry, self.map, normalize(index, self.shape), self.orders)

    def setitem_plan(self, index: Any, value: Any = None) -> SetItemPlan:
        """What assigning ``value`` at ``index`` will do (``value`` decides the memory order)."""
        selection = normalize(index, self.shape)
        order = None if value is None else memory_order(selection.value(np.asarray(value)))
        return SetItemPlan(self.geometry, self.map, selection, self.orders, order,
                           self._through())

    def _through(self) -> int:
        """Wholly selected chunks from which an assignment writes them through."""
        return max(1, -(-self.write_through_bytes // self.chunk_nbytes))

    def resize_plan(self, shape: tuple[int, ...]) -> ResizePlan:
        """What resizing to ``shape`` will do: edge chunks read, filled, deleted."""
        return ResizePlan(self.geometry, self.map, tuple(int(n) for n in shape), self.orders,
                          self.source.clipped_edges)

    def load_plan(self) -> LoadPlan:
        """What loading every stored chunk into staging will do."""
        return LoadPlan(self.geometry, self.map, self.orders)

    def _changes_plan(self, slabs: list[int] | None = None) -> ChangesPlan:
        live = sorted(self.map.live_slabs())
        return ChangesPlan(self.geometry, self.map, live if slabs is None else slabs,
                           self.orders)

    # --- the executor -----------------------------------------------------------------------

    def _run(self, plan: Plan, value: np.ndarray | None = None,
             out: np.ndarray | None = None) -> None:
        zero_fill = self._zero_fill  # new slabs start as the fill value: no copies
        for slab, n in plan.appends:
            assert slab == len(self.slabs), "a plan made for another state of the array"
            order = plan.orders[slab]
            new = self.geometry.new_slab(n, self.dtype, zero_fill, order)
            self.slabs.append(new)
            self.orders.append(order)
            self._staged_nbytes += new.nbytes
        zeroed_slabs = {slab for slab, _ in plan.appends} if zero_fill else set()
        for transfer in plan.transfers:
            if transfer.src == FULL and transfer.dst in zeroed_slabs:
                continue
            self._transfer(transfer, value, out, transfer.dst in zeroed_slabs)
        if isinstance(plan, SetItemPlan) and plan.through is not None:
            positions, start, count = plan.through
            whole = self._array(VALUE, value, out)
            self.source.write(positions, [
                whole[tuple(slice(a, a + n) for a, n in zip(row_start, row_count))]
                for row_start, row_count in zip(start.tolist(), count.tolist())])
        if isinstance(plan, ResizePlan):
            self.source.delete(plan.deletes)
            self.source.resize(plan.new.shape)
            self.geometry = plan.new
        plan.apply(self.map)
        for slab in plan.drops:
            self._staged_nbytes -= self._array(slab).nbytes
            self.slabs[slab] = None

    def _transfer(self, t: TransferPlan, value: np.ndarray | None,
                  out: np.ndarray | None, filled: bool = False) -> None:
        """One transfer; ``filled``: its destination holds the fill value already."""
        dst = self._array(t.dst, value, out)
        if t.src == BASE:
            g = self.geometry
            copy_from_chunks(self.source.read, g.positions, g.chunks[g.axis], g.axis,
                             None if filled else self._array(FULL), [(dst, t)])
        else:
            copy_slices(self._array(t.src, value, out), dst, t)

    def _array(self, end: int | str, value: np.ndarray | None = None,
               out: np.ndarray | None = None) -> np.ndarray:
        """What a transfer's end names: the assigned value, a read's result or a live slab."""
        found = value if end == VALUE else out if end == OUT else \
            self.slabs[end] if isinstance(end, int) else None
        if found is None:  # a plan made for another operation or state of the array
            raise AssertionError(f"{end!r} names nothing in this operation")
        return found

    # --- numpy ------------------------------------------------------------------------------

    def __getitem__(self, index: Any) -> np.ndarray:
        return self.read(index)

    def read(self, index: Any, into: Allocator = RESULTS.array) -> np.ndarray:
        """``self[index]``, the result made by ``into(shape, dtype, order)``: a new array (in
        memory of a large result dropped lately, ``recycle.RESULTS``), or one lent by
        :meth:`ngshard.recycle.Scratch.array` to a loop of reads."""
        selection = normalize(index, self.shape)
        if not self.geometry.addressable:
            return self._window_read(selection)
        if self._boxes_only([selection]):
            return self._read_boxes([selection], into)[0]
        plan = GetItemPlan(self.geometry, self.map, selection, self.orders)
        out = into(selection.shape, self.dtype, self.geometry.order)
        self._run(plan, out=out)
        return selection.finish(out)

    def read_many(self, indices: Sequence[Any]) -> list[np.ndarray]:
        """``[self[index] for index in indices]``, with every stored chunk that any of them
        touches fetched and decoded once, all in one batch (decoding on threads): many
        small reads cost what one read of their chunks costs.

        Raises
        ------
        IndexError
            A bad index (see :func:`normalize`), before anything is read.
        """
        selections = [normalize(index, self.shape) for index in indices]
        if not self.geometry.addressable:
            return [self._window_read(s) for s in selections]
        if self._boxes_only(selections):
            return self._read_boxes(selections)
        outs, base = [], []
        for selection in selections:
            plan = GetItemPlan(self.geometry, self.map, selection, self.orders)
            out = RESULTS.array(selection.shape, self.dtype, self.geometry.order)
            for t in plan.transfers:  # the base slab's rows wait for the one batch
                if t.src == BASE:
                    base.append((out, t))
                else:
                    self._transfer(t, None, out)
            outs.append(out)
        g = self.geometry
        copy_from_chunks(self.source.read, g.positions, g.chunks[g.axis], g.axis,
                         self._array(FULL), base)
        return [s.finish(out) for s, out in zip(selections, outs)]

    def _boxes_only(self, selections: list[Selection]) -> bool:
        """Whether the selections are all boxes and every chunk lies on the base slab
        (nothing staged, nothing resized): :meth:`_read_boxes` reads them."""
        return not len(self.map) and (self.map.base_box == self.geometry.grid).all() and \
            plain_boxes(selections)

    def _read_boxes(self, selections: list[Selection], into: Allocator = RESULTS.array
                    ) -> list[np.ndarray]:
        """Boxes from the base slab, every box's rows planned in one numpy pass
        (``boxes.py``) rather than a GetItemPlan each."""
        g = self.geometry
        outs = [into(s.shape, self.dtype, g.order) for s in selections]
        rows, box = box_rows(g, selections)
        copy_rows_from_chunks(self.source.read, g.positions, g.chunks[g.axis], g.axis,
                              self._array(FULL), outs, rows, box)
        return [s.finish(out) for s, out in zip(selections, outs)]

    def _window_read(self, selection: Selection) -> np.ndarray:
        """A read of an array whose grid is too large to address (``[11, 2**62]``; nothing
        can be staged in it): through a window of the grid around the selection, so the
        cost follows the selection, not the shape."""
        g = self.geometry
        origin, shape, axes = [], [], []
        for a, n, c in zip(selection.axes, g.shape, g.chunks):
            if not a.count:
                return selection.finish(np.empty(selection.shape, self.dtype))
            first, last = (int(a.array[0]), int(a.array[-1])) if a.array is not None else \
                (a.start, a.start + a.step * (a.count - 1))
            start = first // c * c
            origin.append(first // c)
            shape.append(min(n, (last // c + 1) * c) - start)
            axes.append(replace(a, start=a.start - start) if a.array is None else
                        replace(a, array=a.array - start))
        window = StagedChangesArray(WindowSource(self.source, np.array(origin), tuple(shape)))
        if not window.geometry.addressable:
            raise SpecError(f"a selection of {selection.shape} points spans too many chunks "
                            f"of an array of shape {g.shape} to read at once")
        moved = Selection(tuple(axes))
        out = RESULTS.array(moved.shape, self.dtype, g.order)
        window._run(GetItemPlan(window.geometry, window.map, moved, window.orders), out=out)
        return moved.finish(out)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self[...]
        return out if dtype is None else out.astype(dtype, copy=False)

    def __setitem__(self, index: Any, value: Any) -> None:
        """Stage an assignment: numpy's rules (value broadcast to the selection, the last of
        repeated points wins), orthogonal arrays.

        Raises
        ------
        IndexError
            A bad index (see :func:`normalize`).
        ValueError
            A value that does not broadcast to the selection.
        """
        selection = normalize(index, self.shape)
        self._assign(selection, selection.value(np.asarray(value)))

    def _assign(self, selection: Selection, value: np.ndarray) -> None:
        """Run the assignment, in pieces along the axis with the most chunks while one piece
        would add more than half the budget of staged bytes."""
        plan = SetItemPlan(self.geometry, self.map, selection, self.orders,
                           memory_order(value), self._through())
        if plan.new_chunks * self.chunk_nbytes > self.staged_bytes // 2:
            mappers = [mapper(a, n, c) for a, n, c in
                       zip(selection.axes, self.shape, self.geometry.chunks)]
            axis = int(np.argmax([len(m) for m in mappers]))
            m = mappers[axis]
            if len(m) > 1:
                half = m.bounds[len(m) // 2]
                cut = int(m.start[half])
                for lo, hi in ((0, cut), (cut, selection.axes[axis].count)):
                    axes = list(selection.axes)
                    axes[axis] = axes[axis].part(lo, hi)
                    index = [slice(None)] * self.ndim
                    index[axis] = slice(lo, hi)
                    self._assign(Selection(tuple(axes)), value[tuple(index)])
                return
        self._run(plan, value=value)
        self._keep_in_budget()

    # --- other operations -------------------------------------------------------------------

    def resize(self, shape: tuple[int, ...]) -> None:
        """Change the shape (staged, see ``resize.py``): chunks past the new edges are
        dropped (and deleted from storage on commit), new ones read as the fill value.

        Raises
        ------
        ValueError
            A shape with another number of axes.
        NgShardError
            Whatever the source refuses (``ChunkSource.check_resize``), before any change.
        """
        shape = tuple(int(n) for n in shape)
        if len(shape) != self.ndim:
            raise ValueError(f"new shape {shape} needs {self.ndim} axes")
        self.source.check_resize(shape)
        self._run(self.resize_plan(shape))
        self._keep_in_budget()

    def load(self) -> None:
        """Bring every stored chunk into memory (as staged chunks that a commit does not
        write unless they change)."""
        self._run(self.load_plan())
        self._keep_in_budget()

    def read_chunks(self, positions: Any) -> list[np.ndarray]:
        """Whole chunks (clipped at the edge) at (k, ndim) grid positions, in one batch."""
        positions = np.asarray(positions, np.int64).reshape(-1, self.ndim)
        if ((positions < 0) | (positions >= np.array(self.geometry.grid))).any():
            raise IndexError(f"chunk positions outside the grid {self.geometry.grid}")
        plan = GatherPlan(self.geometry, self.map, positions, self.orders)
        out = self.geometry.new_slab(len(positions), self.dtype)
        self._run(plan, out=out)
        size = self.geometry.chunks[self.geometry.axis]
        return [self.geometry.chunk_view(out, i * size, e, self.geometry.axis)
                for i, e in enumerate(self.geometry.extents(positions).tolist())]

    def changed_positions(self) -> np.ndarray:
        """(k, ndim) grid positions of the chunks staged here and changed."""
        staged = self.map.staged()
        return self.geometry.positions(self.map.ids[staged[self.map.dirty[staged]]])

    # --- writing back -----------------------------------------------------------------------

    def _keep_in_budget(self) -> None:
        """Past the budget, write back the oldest staged slabs until half of it is left."""
        if self.nbytes_staged <= self.staged_bytes:
            return
        evict, left = [], self.nbytes_staged
        for slab in sorted(self.map.live_slabs()):
            if left <= self.staged_bytes // 2:
                break
            evict.append(slab)
            left -= self._array(slab).nbytes
        self._write_back(self._changes_plan(evict))
        self.source.spill()

    def _write_back(self, plan: ChangesPlan) -> None:
        """Hand the plan's changed chunks, from all its slabs at once (the source encodes them
        in batches on threads), to the source; then drop the slabs."""
        views, positions = [], []
        for slab, axis, where, offsets in plan.groups():
            extents = self.geometry.extents(where).tolist()
            views += [self.geometry.chunk_view(self.slabs[slab], o, e, axis)
                      for o, e in zip(offsets.tolist(), extents)]
            positions.append(where)
        if positions:  # the slabs are dropped, not changed: the source may keep views
            self.source.write(np.concatenate(positions), views, stable=True)
        self._run(plan)

    def plan(self) -> CommitPlan:
        """What :meth:`commit` will do: the chunks it encodes (``changes``: which, on which
        slabs), then what the source's commit writes."""
        changes = self._changes_plan()
        plan = self.source.plan(changes.positions[changes.dirty], self.chunk_nbytes)
        return replace(plan, encode=changes.encode_count, changes=changes)

    def commit(self) -> None:
        """Encode every changed chunk, in batches on threads, and have the source store
        them with the deletions and shape a resize staged; then every chunk lies on the base
        slab again and the staged slabs are gone.

        Raises
        ------
        NgShardError
            What the source's commit raises (ConflictError: another writer changed a shard);
            the changes then wait in the source, and a later commit can retry.
        """
        self._write_back(self._changes_plan())
        self.source.commit()
        self._reset()

    def abort(self) -> None:
        """Drop every staged change, here and in the source."""
        self.source.abort()
        self._reset()
