"""EncodedChunks: the one small interface through which conversion and the server move encoded
chunks between formats without knowing which is which (in the spirit of the sharding storage
transformer of zarr's draft, a translator between chunk keys and shard locations).

A precomputed scale (a chunk file each, or keyed by Morton code in shards) and a zarr array
(a chunk file each, or inner chunks in ``sharding_indexed`` shards) both present their chunks
as a regular grid in their own axis order, get and put in batches of grid positions, and say
which positions hold a chunk. ``encoding`` names the byte format of one chunk, so a caller can
tell when a chunk's bytes can be carried from one store to another without decoding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class EncodedChunks:
    """Encoded chunks of one array on a regular grid, addressed by (n, ndim) int64 positions.

    Attributes
    ----------
    shape : tuple of int
        The array's shape, in its own axis order.
    chunks : tuple of int
        The chunk shape (for a sharded zarr array, the inner chunk).
    dtype : numpy.dtype
    encoding : str
        The byte format of one chunk: its compression (``raw``, ``gzip``, ...), the memory
        order of its axes (``C``: last axis fastest; ``F``: first) and the numpy dtype string,
        e.g. ``"raw C <u1"`` for a little-endian C-order zarr chunk, ``"gzip F <u2"``; empty
        when the chunk is encoded otherwise (compressed_segmentation, jpeg, blosc...). A zarr
        (z, y, x) ``raw C`` chunk and a precomputed (x, y, z) ``raw F`` chunk of the reversed
        shape hold the same bytes (edge chunks aside: see ``clipped_edges``).
    clipped_edges : bool
        Edge chunks hold only the part inside ``shape`` (precomputed) rather than a whole
        chunk padded with the fill value (zarr).
    """

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    encoding: str = ""
    clipped_edges: bool = False

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Chunks per axis: ceil(shape / chunks)."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunks))

    def chunk_box(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, stops) of the chunks at ``positions`` in array coordinates, stops clipped
        at ``shape``."""
        chunks = np.asarray(self.chunks, np.int64)
        starts = np.asarray(positions, np.int64) * chunks
        return starts, np.minimum(starts + chunks, np.asarray(self.shape, np.int64))

    def get(self, positions: np.ndarray) -> list[bytes | memoryview | None]:
        """The encoded chunk at each position (bytes-like), None where absent; one batch of
        requests (shard indices once each, data ranges coalesced)."""
        raise NotImplementedError

    def put(self, positions: np.ndarray, blobs: Sequence[bytes | memoryview]) -> None:
        """Stage encoded chunks; stored on :meth:`commit`."""
        raise NotImplementedError

    def commit(self, *, progress: bool = False) -> None:
        """Store what is staged, each shard written whole and atomically."""
        raise NotImplementedError

    def list_positions(self) -> np.ndarray:
        """(n, ndim) positions of the chunks present, from shard indices or a listing."""
        raise NotImplementedError

    def where(self, position: Sequence[int]) -> str:
        """The chunk's location (its file, and its place in a shard), for error messages."""
        raise NotImplementedError
