"""One precomputed scale as the chunk source of a staged-changes array: (x, y, z, channel)
chunks, Fortran ordered as the format stores them, edge chunks clipped, encoded with the
scale's encoding and kept in its chunk store (sharded, or a file per chunk).

The array's chunk grid has a fourth axis of one chunk (the channels); positions here drop it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from ..errors import NotFoundError, SpecError
from ..progress import progress_bar
from ..sharded.infofile import read_info, write_info
from ..staged import ChunkSource, Geometry
from ..storage import Storage
from ..threads import pmap
from .chunks import ChunkStore
from .encodings import decode_chunk, encode_chunk
from .grid import ChunkGrid
from .info import Scale, VolumeInfo


class ScaleChunks(ChunkSource):
    """The chunks of ``scale`` of the volume at ``storage``, through ``store``."""

    clipped_edges = True

    def __init__(self, storage: Storage, info: VolumeInfo, scale: Scale, store: ChunkStore,
                 *, progress: bool = False, empty: bool = False) -> None:
        self.storage, self.store, self.progress = storage, store, progress
        self.empty = empty  # nothing stored yet (a new scale): until the first commit
        self.dtype = np.dtype(info.data_type)
        self.channels = info.num_channels
        self.fill_value = 0
        self._reads = threading.local()  # .strict: see strict_reads
        self._adopt(scale)
        self.committed = scale

    def _adopt(self, scale: Scale) -> None:
        self.scale = scale
        self.grid = ChunkGrid(scale.size, scale.chunk_size, scale.voxel_offset)
        self.geometry = Geometry((*scale.size, self.channels),
                                 (*scale.chunk_size, self.channels), "F")
        self.store.with_grid(self.grid)

    def _bar(self, n: int, desc: str):
        batch = self.batch
        return progress_bar(range(0, n, batch), desc=desc, unit="batch",
                            total=-(-n // batch), enabled=self.progress and n > batch)

    # --- chunks ----------------------------------------------------------------------------

    def read(self, positions: np.ndarray,
             consume: Callable[[int, np.ndarray | None], None]) -> None:
        extents = None  # decoded shapes, worked out once a chunk is present
        positions = positions[:, :3]
        block, batch = self.scale.compressed_segmentation_block_size, self.batch
        for first in self._bar(len(positions), "reading chunks"):
            part = positions[first:first + batch]
            blobs = self.store.get(part)
            present = [i for i, blob in enumerate(blobs) if blob is not None]
            if len(present) < len(blobs) and getattr(self._reads, "strict", False):
                self._missing(part, [i for i, blob in enumerate(blobs) if blob is None])
            for i in (i for i, blob in enumerate(blobs) if blob is None):
                consume(first + i, None)  # absent: nothing to decode, no thread needed
            if not present:
                continue
            if extents is None:
                extents = self.geometry.extents(
                    np.concatenate([positions, np.zeros((len(positions), 1), np.int64)], 1)
                ).tolist()

            def one(i: int, first=first, part=part, blobs=blobs, extents=extents) -> None:
                consume(first + i, decode_chunk(
                    blobs[i], self.scale.encoding, extents[first + i], self.dtype,
                    block_size=block, where=self.store.where(part[i].tolist()), reuse=True))

            pmap(one, present, min_items=4)

    @contextmanager
    def strict_reads(self, strict: bool = True) -> Iterator[None]:
        """Within it, absent chunks that this thread reads raise NotFoundError rather than
        read as the fill value (a Volume's ``fill_missing=False``, for its reads but not for
        the reads an assignment makes); per thread, as one volume may be read on many."""
        before = getattr(self._reads, "strict", False)
        self._reads.strict = strict
        try:
            yield
        finally:
            self._reads.strict = before

    def _missing(self, part: np.ndarray, absent: list[int]) -> None:
        more = f" (and {len(absent) - 1} more chunks of this read)" if len(absent) > 1 else ""
        raise NotFoundError(f"{self.store.where(part[absent[0]].tolist())}: the chunk is "
                            f"absent{more}, and the volume was opened with fill_missing=False")

    def write(self, positions: np.ndarray, chunks: Sequence[np.ndarray], *,
              stable: bool = False) -> None:
        positions = positions[:, :3]
        block = self.scale.compressed_segmentation_block_size

        def one(chunk: np.ndarray) -> bytes | memoryview:
            if not (chunk.flags.f_contiguous or chunk.flags.c_contiguous):
                chunk = chunk.copy(order="K")  # gathered first, in its own order
            # raw chunks of stable Fortran-ordered memory (slabs being dropped) go as views
            return encode_chunk(chunk, self.scale.encoding, block_size=block, copy=not stable)

        done, blobs, batch = 0, [], self.batch
        for first in self._bar(len(positions), "writing chunks"):
            blobs += pmap(one, chunks[first:first + batch], min_items=2)
            # stable raw chunks are views: staged all at once, the store lays them out in
            # the order its commit writes them (one run per shard, written without a copy)
            if not stable or first + batch >= len(positions):
                self.store.put(positions[done:first + batch], blobs)
                done, blobs = first + batch, []

    def delete(self, positions: np.ndarray) -> None:
        self.store.delete(positions[:, :3])

    # --- shape -----------------------------------------------------------------------------

    def check_resize(self, shape: tuple[int, ...]) -> None:
        if shape[3] != self.channels:
            raise SpecError(f"a volume's channels cannot be resized ({self.channels} -> "
                            f"{shape[3]}): num_channels holds for every scale")
        grid = ChunkGrid(shape[:3], self.scale.chunk_size, self.scale.voxel_offset)
        if self.scale.sharding is not None and grid.bits != self.grid.bits:
            raise SpecError(
                f"resizing {self.storage.path(self.scale.key)} from {self.scale.size} to "
                f"{tuple(shape[:3])} changes its chunk grid from {self.grid.shape} to "
                f"{grid.shape}, and so the Morton bits per axis from {self.grid.bits} to "
                f"{grid.bits}: every sharded chunk ID would change. Write a new scale "
                f"instead, or resize within the grid's powers of two")

    def resize(self, shape: tuple[int, ...]) -> None:
        self._adopt(dataclasses.replace(self.scale, size=tuple(int(n) for n in shape[:3])))

    # --- committing ------------------------------------------------------------------------

    def spill(self) -> None:
        self.store.spill()

    def plan(self, positions: np.ndarray, nbytes: int) -> object:
        plan = self.store.plan(positions[:, :3], nbytes)
        if self.scale.size != self.committed.size:
            plan = f"{plan}\nthen the info: scale {self.scale.key} size {self.scale.size}"
        return plan

    def commit(self) -> None:
        self.store.commit(progress=self.progress)
        self.empty = False
        if self.scale.size != self.committed.size:
            # the info as stored now (another scale may have been added since we opened it)
            stored = VolumeInfo.from_json(read_info(self.storage), self.storage.path("info"))
            write_info(self.storage, stored.with_scale(self.scale).to_json())
        self.committed = self.scale

    def abort(self) -> None:
        self.store.abort()
        self._adopt(self.committed)
