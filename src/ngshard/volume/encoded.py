"""One precomputed scale as :class:`ngshard.chunkgrid.EncodedChunks`: the scale's encoded
chunks by (x, y, z) grid position, whichever chunk store holds them (shards keyed by Morton
code, or a file per chunk), for code that moves chunks between formats without decoding.

The channels live inside each chunk (a raw chunk is x, y, z, channel in Fortran order), so
the grid has three axes. ``get`` hands out a chunk as the scale encodes it, with a sharded
``data_encoding: gzip`` (or a ``.gz`` chunk file) already undone: a raw scale's token is
``"raw F <dtype>"``; other encodings (compressed_segmentation, jpeg, png) have none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..chunkgrid import EncodedChunks
from .volume import Volume


class ScaleEncodedChunks(EncodedChunks):
    """The encoded chunks of ``volume``'s scale (open it with mode "r+" to put)."""

    clipped_edges = True

    def __init__(self, volume: Volume) -> None:
        self.volume = volume
        self.store = volume.chunks
        self.shape = tuple(volume.scale.size)
        self.chunks = tuple(volume.scale.chunk_size)
        self.dtype = volume.dtype
        self.encoding = (f"raw F {volume.dtype.newbyteorder('<').str}"
                         if volume.scale.encoding == "raw" else "")

    def get(self, positions: np.ndarray) -> list[bytes | memoryview | None]:
        return self.store.get(np.asarray(positions, np.int64).reshape(-1, 3))

    def put(self, positions: np.ndarray, blobs: Sequence[bytes | memoryview]) -> None:
        self.volume._writable()
        self.store.put(np.asarray(positions, np.int64).reshape(-1, 3), blobs)

    def commit(self, *, progress: bool = False) -> None:
        self.store.commit(progress=progress)

    def list_positions(self) -> np.ndarray:
        return self.store.list_positions()

    def where(self, position: Sequence[int]) -> str:
        return self.store.where(position)
