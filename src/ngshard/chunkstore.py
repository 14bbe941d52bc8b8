"""ChunkStore: the one interface through which every chunk grid is read and written, as
encoded chunks by grid position (in the spirit of the sharding storage transformer of zarr's
draft, a translator between chunk positions and where their bytes lie).

A precomputed scale (a chunk file each, ``volume.chunks.FileChunks``, or keyed by Morton code
in shards, ``ShardedChunks``) and a zarr array (a chunk object each, or inner chunks in
``sharding_indexed`` shards, ``zarr.chunks.ZarrChunkStore``) all present their chunks as a
regular grid in their own axis order: get, put and delete in batches of positions, list the
positions present, plan and commit what is staged. A new chunk format is one subclass. The
staged array reads and writes through a store and a codec (``staged.stored``); conversion
and the server move chunks between stores, without decoding them where ``encoding`` says
the bytes are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from ._arrays import views
from .commitplan import CommitPlan
from .types import Blob


class ChunkStore:
    """Encoded chunks of one array on a regular grid, addressed by (n, ndim) int64 positions;
    puts and deletes are staged (reads see them) until :meth:`commit`.

    Attributes
    ----------
    shape : tuple of int
        The array's shape, in its own axis order (a staged resize included).
    chunks : tuple of int
        The chunk shape (for a sharded zarr array, the inner chunk).
    dtype : numpy.dtype
    encoding : str
        The byte format of one chunk: its compression (``raw``, ``gzip``, ``zstd``), the
        memory order of its axes (``C``: last axis fastest; ``F``: first) and the numpy dtype
        string, e.g. ``"raw C <u1"`` for a little-endian C-order zarr chunk, ``"gzip F
        <u2"``; empty when the chunk is encoded otherwise (compressed_segmentation, jpeg,
        blosc...). A zarr (z, y, x) ``raw C`` chunk and a precomputed (x, y, z) ``raw F``
        chunk of the reversed shape hold the same bytes (edge chunks aside).
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

    def get(self, positions: np.ndarray) -> list[Blob | None]:
        """The encoded chunk at each position (staged ones included), None where absent; one
        batch of requests (shard indices once each, data ranges coalesced)."""
        raise NotImplementedError

    def get_tagged(self, positions: np.ndarray, known: Callable[[Hashable], bool] | None = None
                   ) -> tuple[list[Blob | None], list[Hashable | None]]:
        """As :meth:`get`, with a tag per chunk that names the bytes stored, for a cache of
        decoded chunks: (object name, the object's generation, place in it), so that a chunk
        rewritten gets a new tag; None where the store cannot tell (here: always). Chunks
        whose tag ``known`` accepts (the cache holds them) are not read: their blob is None,
        their tag given."""
        return self.get(positions), [None] * len(positions)

    def get_gzip(self, positions: np.ndarray) -> tuple[list[Blob | None], list[Blob | None]]:
        """As :meth:`get`, and each chunk's gzip stream where it is stored as one (checked:
        it decodes whole), else None (here: always None)."""
        return self.get(positions), [None] * len(positions)

    def put(self, positions: np.ndarray, blobs: Sequence[Blob]) -> None:
        """Stage encoded chunks; stored on :meth:`commit`.

        Raises
        ------
        ReadOnlyError
            The store was opened for reading.
        """
        raise NotImplementedError

    def write_order(self, positions: np.ndarray) -> np.ndarray:
        """The order (indices into ``positions``) in which :meth:`commit` writes the chunks:
        chunks :meth:`put_block` stages back to back in it are written without a copy."""
        return np.arange(len(positions))

    def put_block(self, positions: np.ndarray, sizes: np.ndarray, block: np.ndarray) -> None:
        """Stage encoded chunks that lie back to back in ``block`` (a uint8 array, ``sizes``
        bytes each), which the caller hands over: the store may keep it rather than copy.

        Raises
        ------
        ReadOnlyError
            The store was opened for reading.
        """
        self.put(positions, views(block, sizes))

    def delete(self, positions: np.ndarray) -> None:
        """Stage the removal of chunks (absent ones are ignored)."""
        raise NotImplementedError

    def list_positions(self) -> np.ndarray:
        """(n, ndim) positions of the chunks present (stored or staged), from shard indices
        or a listing; stored entries that name no chunk of the grid are left out."""
        raise NotImplementedError

    def where(self, position: Sequence[int]) -> str:
        """The chunk's location (its file, and its place in a shard), for messages."""
        raise NotImplementedError

    def plan(self, positions: np.ndarray | None = None, nbytes: int = 0) -> CommitPlan:
        """What :meth:`commit` would do, with chunks at ``positions`` (about ``nbytes``
        each, encoded) counted as staged too."""
        raise NotImplementedError

    def commit(self, *, progress: bool = False) -> None:
        """Store what is staged, each shard or file written whole and atomically (or, for a
        local precomputed shard, appended to and patched); then nothing is staged."""
        raise NotImplementedError

    def abort(self) -> None:
        """Drop what is staged."""
        raise NotImplementedError

    def spill(self) -> None:
        """Move staged chunks out of memory where the store can (sharded: its spill files)."""

    def resize(self, shape: Sequence[int]) -> None:
        """Take ``shape`` from now on (the names of edge chunks may change with it); the
        array's metadata is its owner's to write."""
        raise NotImplementedError
