"""A zarr array's encoded granules as :class:`ngshard.chunkgrid.EncodedChunks`: what conversion
and the server move between formats without decoding (a raw or gzip C-order granule is byte
for byte a precomputed chunk of the reversed axes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..chunkgrid import EncodedChunks
from .reader import ChunkReader
from .writer import ChunkWriter


class ZarrEncodedChunks(EncodedChunks):
    """The granules (inner chunks of a sharded array) of the array ``reader`` reads; puts
    are staged until :meth:`commit`, which writes each shard whole."""

    clipped_edges = False

    def __init__(self, reader: ChunkReader) -> None:
        meta = reader.meta
        self.shape, self.chunks, self.dtype = meta.shape, meta.chunks, meta.dtype
        self.encoding = meta.chunk_codecs.token(meta.dtype)
        self.reader, self.writer = reader, ChunkWriter(reader)

    def _positions(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, np.int64).reshape(-1, len(self.shape))
        if ((positions < 0) | (positions >= np.array(self.grid_shape))).any():
            raise IndexError(f"chunk positions outside the grid {self.grid_shape} of "
                             f"{self.reader.storage.url}")
        return positions

    def get(self, positions: np.ndarray) -> list[bytes | memoryview | None]:
        return self.writer.get(self._positions(positions))

    def put(self, positions: np.ndarray, blobs: Sequence[bytes | memoryview]) -> None:
        positions = self._positions(positions)
        if len(blobs) != len(positions):
            raise ValueError(f"{len(blobs)} chunks for {len(positions)} positions")
        self.writer.put(positions, list(blobs))

    def commit(self, *, progress: bool = False) -> None:
        self.writer.commit(progress=progress)

    def abort(self) -> None:
        """Drop what is staged."""
        self.writer.abort()

    def where(self, position: Sequence[int]) -> str:
        return self.reader.where(tuple(position))

    def list_positions(self) -> np.ndarray:
        stored = self.reader.list_positions()
        if not self.writer.staged:
            return stored
        keys = set(map(tuple, stored.tolist()))
        keys |= {k for k, b in self.writer.staged.items() if b is not None}
        keys -= {k for k, b in self.writer.staged.items() if b is None}
        return np.array(sorted(keys), np.int64).reshape(-1, len(self.shape))
