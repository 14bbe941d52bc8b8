"""A zarr array as the chunk source of a staged-changes array (``ngshard.staged``): granules
(inner chunks of a sharded array) decoded and encoded in batches on threads, whole chunks at
the edge (the part past the array's shape holding the fill value), in C order, or Fortran
order where a ``transpose`` codec reverses the axes (so encoding is a plain copy either way).
Granules that hold only the fill value are not stored.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import numpy as np

from ..progress import progress_bar
from ..staged import ChunkSource, Geometry
from ..storage import Storage
from ..threads import pmap
from .codecs import Transpose
from .dtypes import is_fill
from .metadata import ArrayMetadata
from .reader import ChunkReader
from .writer import ChunkWriter


def memory_order(meta: ArrayMetadata) -> str:
    """"F" where the granule's codecs begin by reversing its axes, else "C"."""
    first = meta.chunk_codecs.array[:1]
    reverse = tuple(range(len(meta.shape)))[::-1]
    return "F" if first == (Transpose(reverse),) and len(meta.shape) > 1 else "C"


def write_metadata(storage: Storage, meta: ArrayMetadata) -> None:
    storage.write(meta.name, [json.dumps(meta.to_json(), indent=2).encode()])


class ZarrChunks(ChunkSource):
    """The granules of the array at ``storage`` described by ``meta``."""

    clipped_edges = False

    def __init__(self, storage: Storage, meta: ArrayMetadata, *, empty: bool = False,
                 progress: bool = False) -> None:
        self.storage, self.progress, self.empty = storage, progress, empty
        self.reader = ChunkReader(storage, meta)
        self.writer = ChunkWriter(self.reader)
        self.dtype, self.fill_value = meta.dtype, meta.fill_value
        self.committed = meta
        self.geometry = Geometry(meta.shape, meta.chunks, memory_order(meta))

    @property
    def meta(self) -> ArrayMetadata:
        return self.reader.meta

    def _bar(self, n: int, desc: str):
        batch = self.batch
        return progress_bar(range(0, n, batch), desc=desc, unit="batch",
                            total=-(-n // batch), enabled=self.progress and n > batch)

    def read(self, positions: np.ndarray,
             consume: Callable[[int, np.ndarray | None], None]) -> None:
        meta, codecs, batch = self.meta, self.meta.chunk_codecs, self.batch
        for first in self._bar(len(positions), "reading chunks"):
            part = positions[first:first + batch]
            blobs = self.writer.get(part)  # what was written back before the commit too
            present = [i for i, blob in enumerate(blobs) if blob is not None]
            for i in (i for i, blob in enumerate(blobs) if blob is None):
                consume(first + i, None)

            def one(i: int, first=first, part=part, blobs=blobs) -> None:
                consume(first + i, codecs.decode(blobs[i], meta.chunks, meta.dtype,
                                                 meta.fill_value,
                                                 self.reader.where(tuple(part[i].tolist()))))

            pmap(one, present, min_items=4)

    def encode(self, chunk: np.ndarray, copy: bool = True) -> bytes | memoryview | None:
        """The stored bytes of a granule clipped at the array's edge (None: all fill)."""
        if is_fill(chunk, self.fill_value):
            return None
        g = self.geometry
        if chunk.shape != g.chunks:  # an edge chunk: stored whole
            whole = np.full(g.chunks, self.fill_value, self.dtype, order=g.order)
            whole[tuple(slice(0, n) for n in chunk.shape)] = chunk
            chunk, copy = whole, False
        blob = self.meta.chunk_codecs.encode(chunk, self.fill_value)
        return bytes(blob) if copy and isinstance(blob, memoryview) else blob

    def write(self, positions: np.ndarray, chunks: Sequence[np.ndarray], *,
              stable: bool = False) -> None:
        batch = self.batch
        for first in self._bar(len(positions), "writing chunks"):
            blobs = pmap(lambda c: self.encode(c, not stable), chunks[first:first + batch],
                         min_items=2)
            part = positions[first:first + batch]
            gone = np.array([b is None for b in blobs], bool)
            self.writer.delete(part[gone])
            self.writer.put(part[~gone], [b for b in blobs if b is not None])

    def delete(self, positions: np.ndarray) -> None:
        self.writer.delete(positions)

    def resize(self, shape: tuple[int, ...]) -> None:
        self.geometry = self.geometry.resized(shape)
        self.reader.meta = self.meta.resized(shape)

    def plan(self, positions: np.ndarray, nbytes: int) -> object:
        plan = self.writer.plan(positions)
        if self.meta.shape != self.committed.shape:
            plan = f"{plan}\nthen {self.meta.name}: shape {list(self.meta.shape)}"
        return plan

    def commit(self) -> None:
        self.writer.commit(progress=self.progress)
        if self.meta.shape != self.committed.shape:
            write_metadata(self.storage, self.meta)
        self.committed = self.meta
        self.empty = False

    def abort(self) -> None:
        self.writer.abort()
        self.reader.meta = self.committed
        self.geometry = self.geometry.resized(self.committed.shape)
