"""ChunkSource: the small interface between a staged-changes array and where its chunks are
stored. The array never knows the format: it asks for decoded chunks by grid position, in
batches, and hands decoded chunks back to be encoded and staged; the source's own commit
writes them. Stored arrays go through one implementation, :class:`~ngshard.staged.stored.
StoredChunks` (any chunk store and codec); :class:`MemoryChunks`, a dict of numpy arrays, is
the test double.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..commitplan import CommitPlan
from ..limits import CHUNK_BATCH, CHUNK_BATCH_BYTES
from ..types import MemoryOrder
from .geometry import Geometry


class ChunkSource:
    """Decoded chunks by grid position (an (k, ndim) int64 array of positions).

    Attributes
    ----------
    geometry : Geometry
        Shape, chunk shape and memory order (the order the codec wants chunks in).
    dtype : numpy.dtype
    fill_value
        What an absent chunk holds.
    clipped_edges : bool
        Stored edge chunks hold only the part inside the shape (precomputed), so a resize
        that moves the edge rewrites them; otherwise they are whole chunks (zarr).
    empty : bool
        Nothing is stored (a new array): every chunk starts on the full slab and none is
        read. False unless the source knows.
    """

    geometry: Geometry
    dtype: np.dtype
    fill_value: Any = 0
    clipped_edges: bool = False
    empty: bool = False

    @property
    def batch(self) -> int:
        """How many chunks a source fetches and decodes, or encodes and stages, together:
        about ``CHUNK_BATCH_BYTES`` of decoded chunks, at least one, at most ``CHUNK_BATCH``."""
        nbytes = math.prod(self.geometry.chunks) * np.dtype(self.dtype).itemsize
        return max(1, min(CHUNK_BATCH, CHUNK_BATCH_BYTES // max(1, nbytes)))

    def read(self, positions: np.ndarray, consume: Callable[[int, np.ndarray | None], None],
             into: Callable[[int], np.ndarray | None] | None = None,
             planes: np.ndarray | None = None) -> None:
        """Fetch and decode the chunks at ``positions`` (in batches, decoding on threads) and
        call ``consume(i, chunk)`` for each, None for an absent one. ``consume`` may run on
        any thread; the chunk is only valid during the call. ``into(i)``: where the caller
        wants chunk ``i`` whole (an array of any strides) or None; a source may decode a
        present chunk of that shape straight into it, and then does not call ``consume``
        for it (on bad bytes the array may hold part of the chunk). ``planes[i]``: how many
        leading planes of chunk ``i`` along its slowest axis in memory (the first in C
        order, the last in F order) the caller reads; a source may decode only those and
        give ``consume`` the chunk cut to them."""
        raise NotImplementedError

    def write(self, positions: np.ndarray, chunks: Sequence[np.ndarray], *,
              stable: bool = False) -> None:
        """Encode the chunks (each clipped at the array's edge), in batches on threads, and
        stage them; nothing is stored before :meth:`commit`. ``stable``: their memory will
        not change before then, so the source may keep views of it rather than copies."""
        raise NotImplementedError

    def delete(self, positions: np.ndarray) -> None:
        """Stage the removal of the chunks at ``positions`` (absent ones are ignored)."""
        raise NotImplementedError

    def check_resize(self, shape: tuple[int, ...]) -> None:
        """Raise if the array cannot take ``shape`` (before anything changes)."""

    def resize(self, shape: tuple[int, ...]) -> None:
        """Adopt ``shape`` (staged: stored on :meth:`commit`)."""
        self.geometry = self.geometry.resized(shape)

    def spill(self) -> None:
        """Move staged encoded chunks out of memory if the store can (spill files)."""

    def plan(self, positions: np.ndarray, nbytes: int) -> CommitPlan:
        """What :meth:`commit` would write if the chunks at ``positions`` (about ``nbytes``
        each, encoded) were staged too."""
        raise NotImplementedError

    def commit(self) -> None:
        """Store the staged chunks, deletions and shape."""
        raise NotImplementedError

    def abort(self) -> None:
        """Drop the staged chunks, deletions and shape."""
        raise NotImplementedError


class MemoryChunks(ChunkSource):
    """Chunks in a dict of numpy arrays, whole chunks at the edge (as zarr stores them, the
    part outside the shape holding the fill value): a source for tests and examples."""

    def __init__(self, shape: Sequence[int], chunks: Sequence[int], dtype: Any = "uint8",
                 fill_value: Any = 0, order: MemoryOrder = "C") -> None:
        self.geometry = Geometry(tuple(shape), tuple(chunks), order)
        self.dtype, self.fill_value = np.dtype(dtype), fill_value
        self.stored: dict[tuple[int, ...], np.ndarray] = {}
        self.stored_shape = self.geometry.shape
        self._staged: dict[tuple[int, ...], np.ndarray | None] = {}
        self.empty = True  # until a commit stores a chunk
        self.reads = 0  # chunks read, for tests
        self.writes = 0  # chunks written, for tests

    def read(self, positions, consume, into=None, planes=None) -> None:
        for i, key in enumerate(map(tuple, positions.tolist())):
            self.reads += 1
            consume(i, self._staged[key] if key in self._staged else self.stored.get(key))

    def write(self, positions, chunks, *, stable: bool = False) -> None:
        extents = self.geometry.extents(positions).tolist()
        for key, chunk, extent in zip(map(tuple, positions.tolist()), chunks, extents):
            if chunk.shape != tuple(extent):
                raise ValueError(f"chunk {key} of shape {chunk.shape}, not {tuple(extent)}")
            whole = np.full(self.geometry.chunks, self.fill_value, self.dtype)
            whole[tuple(slice(0, n) for n in chunk.shape)] = chunk
            self._staged[key] = whole
            self.writes += 1

    def delete(self, positions) -> None:
        self._staged.update(dict.fromkeys(map(tuple, positions.tolist())))

    def plan(self, positions, nbytes) -> CommitPlan:
        sizes = {str(key): None if chunk is None else chunk.nbytes
                 for key, chunk in self._staged.items()}
        sizes.update(dict.fromkeys(map(str, map(tuple, positions.tolist())), nbytes))
        return CommitPlan.files("memory", sizes, unit="chunk")

    def commit(self) -> None:
        for key, chunk in self._staged.items():
            if chunk is None:
                self.stored.pop(key, None)
            else:
                self.stored[key] = chunk
        self._staged.clear()
        self.stored_shape = self.geometry.shape
        self.empty = not self.stored

    def abort(self) -> None:
        self._staged.clear()
        self.geometry = self.geometry.resized(self.stored_shape)

    def array(self) -> np.ndarray:
        """Everything stored, as one array (what a reader of the committed store sees)."""
        g = self.geometry.resized(self.stored_shape)
        out = np.full(g.shape, self.fill_value, self.dtype)
        for key, chunk in self.stored.items():
            lo = np.array(key) * g.chunks
            box = tuple(slice(a, min(a + c, n)) for a, c, n in zip(lo, g.chunks, g.shape))
            out[box] = chunk[tuple(slice(0, s.stop - s.start) for s in box)]
        return out


class WindowSource(ChunkSource):
    """The chunks of ``source`` in a box of its grid (from chunk ``origin``, ``shape``
    elements, chunk-aligned at the origin), as a source of their own: for reading an array
    whose whole grid is too large to address."""

    def __init__(self, source: ChunkSource, origin: np.ndarray, shape: tuple[int, ...]
                 ) -> None:
        g = source.geometry
        self.source, self.origin = source, np.asarray(origin, np.int64)
        self.geometry = Geometry(shape, g.chunks, g.order)
        self.dtype, self.fill_value = source.dtype, source.fill_value
        self.clipped_edges = source.clipped_edges

    @property
    def batch(self) -> int:
        return self.source.batch

    def read(self, positions: np.ndarray, consume: Callable[[int, np.ndarray | None], None],
             into: Callable[[int], np.ndarray | None] | None = None,
             planes: np.ndarray | None = None) -> None:
        self.source.read(np.asarray(positions, np.int64) + self.origin, consume, into, planes)
