"""A precomputed scale's chunk stores: (x, y, z) grid positions -> encoded chunk bytes, whether
the chunks live in a sharded key-value store (keyed by compressed Morton code) or as one file
per chunk (named after its voxel box). Both are :class:`~ngshard.chunkstore.ChunkStore`.

The channels live inside each chunk (a raw chunk is x, y, z, channel in Fortran order), so the
grid has three axes. ``get`` hands out a chunk as the scale encodes it, with a sharded
``data_encoding: gzip`` (or a ``.gz`` chunk file) already undone: a raw scale's encoding token
is ``"raw F <dtype>"``; other encodings (compressed_segmentation, jpeg, png...) have none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..chunkstore import Blob, ChunkStore
from ..commitplan import CommitPlan
from ..compression import decode
from ..errors import NgShardError
from ..sharded import ShardedKV
from ..staged.stored import Where
from ..storage import Storage
from ..storage.twins import Twins
from ..threads import pmap
from .grid import ChunkGrid
from .vectors import xyz


class ScaleStore(ChunkStore):
    """What both layouts of a scale share: the grid (which a resize replaces), clipped
    edges."""

    clipped_edges = True
    #: The sharded store holding the chunks (keyed by Morton code), None for a file per chunk.
    kv: ShardedKV | None = None
    storage: Storage

    def __init__(self, grid: ChunkGrid, dtype: np.dtype, encoding: str) -> None:
        self.grid, self.dtype, self.encoding = grid, np.dtype(dtype), encoding

    shape = property(lambda self: self.grid.size, doc="The scale's size (x, y, z).")
    chunks = property(lambda self: self.grid.chunk_size, doc="The chunk size (x, y, z).")

    def resize(self, shape: Sequence[int]) -> None:
        self.grid = ChunkGrid(xyz(shape), self.grid.chunk_size, self.grid.voxel_offset)


class ShardedChunks(ScaleStore):
    """Chunks in a sharded store, keyed by the compressed Morton code of their position."""

    kv: ShardedKV

    def __init__(self, kv: ShardedKV, grid: ChunkGrid, dtype: np.dtype, encoding: str = ""
                 ) -> None:
        super().__init__(grid, dtype, encoding)
        self.kv, self.storage = kv, kv.storage
        # a read of every chunk of a shard (a box of the grid) reads the shard whole
        kv.reader.capacity = lambda codes: self.grid.chunks_per_shard(kv.spec, codes)

    def get(self, positions: np.ndarray) -> list[Blob | None]:
        keys = self.grid.morton(positions)
        found = self.kv.get_many(keys, copy=False)
        return [found.get(k) for k in keys.tolist()]

    def get_gzip(self, positions: np.ndarray) -> tuple[list[Blob | None], list[Blob | None]]:
        if self.kv.spec.data_encoding != "gzip" or self.kv.mode != "r":
            return super().get_gzip(positions)
        keys = self.grid.morton(positions).tolist()
        found = self.kv.get_many_stored(keys)
        streams = [found.get(k) for k in keys]
        limit = self.kv.reader.max_value_bytes

        def inflated(i: int) -> Blob | None:  # the check: one stream, inflating whole, its CRC
            stream = streams[i]
            return None if stream is None else \
                decode(stream, "gzip", Where(self, positions[i]), limit)

        return pmap(inflated, range(len(keys)), min_items=2), streams

    def put(self, positions: np.ndarray, blobs: Sequence[Blob]) -> None:
        self.kv.set_many(self.grid.morton(positions), list(blobs))

    def write_order(self, positions: np.ndarray) -> np.ndarray:
        return self.kv.commit_order(self.grid.morton(positions))

    def put_block(self, positions: np.ndarray, sizes: np.ndarray, block: np.ndarray) -> None:
        self.kv.set_many(self.grid.morton(positions), block,
                         np.concatenate([[0], np.cumsum(sizes)]), adopt=True)

    def delete(self, positions: np.ndarray) -> None:
        if len(positions):
            self.kv.delete_many(self.grid.morton(positions))

    def commit(self, *, progress: bool = False) -> None:
        self.kv.commit(progress=progress)

    def abort(self) -> None:
        self.kv.abort()

    def spill(self) -> None:
        self.kv.spill()

    def plan(self, positions: np.ndarray | None = None, nbytes: int = 0) -> CommitPlan:
        keys = self.grid.morton(np.zeros((0, 3), np.int64) if positions is None else positions)
        return self.kv.plan(pending=(keys, np.full(len(keys), nbytes, np.int64)))

    def list_positions(self) -> np.ndarray:
        codes = self.kv.keys_array()
        return self.grid.unmorton(codes[self.grid.codes_in_grid(codes)])

    def where(self, position: Sequence[int]) -> str:
        key = int(self.grid.morton(np.array([position]))[0])
        shard = self.kv.spec.shard_filename(self.kv.spec.locate_one(key)[0])
        return f"{self.storage.path(shard)} chunk {key} at grid position {tuple(position)}"


class FileChunks(ScaleStore):
    """One file per chunk, named ``x0-x1_y0-y1_z0-z1``, or its compressed twin (``.gz``,
    ``.br``, ``.zstd``, ``.xz``, ``.bz2``) as cloud-volume writes them with ``compress=``;
    read, staged and written through ``files`` (see :class:`~ngshard.storage.twins.Twins`)."""

    def __init__(self, files: Twins, grid: ChunkGrid, dtype: np.dtype, encoding: str = ""
                 ) -> None:
        super().__init__(grid, dtype, encoding)
        self.files, self.storage = files, files.storage

    def get(self, positions: np.ndarray) -> list[Blob | None]:
        return self.files.read_many(self.grid.chunk_names(positions))

    def get_gzip(self, positions: np.ndarray) -> tuple[list[Blob | None], list[Blob | None]]:
        return self.files.read_gzip_many(self.grid.chunk_names(positions))

    def put(self, positions: np.ndarray, blobs: Sequence[Blob]) -> None:
        self.files.put_many(zip(self.grid.chunk_names(positions), blobs))

    def delete(self, positions: np.ndarray) -> None:
        self.files.delete_many(self.grid.chunk_names(positions))

    def commit(self, *, progress: bool = False) -> None:
        self.files.commit()

    def abort(self) -> None:
        self.files.abort()

    def plan(self, positions: np.ndarray | None = None, nbytes: int = 0) -> CommitPlan:
        names = [] if positions is None else self.grid.chunk_names(positions)
        return self.files.plan(names, nbytes)

    def list_positions(self) -> np.ndarray:
        found = []
        for name in self.files.list():
            try:
                found.append(self.grid.parse_chunk_name(name))
            except NgShardError:
                continue
        return np.array(sorted(found), np.int64).reshape(-1, 3)

    def where(self, position: Sequence[int]) -> str:
        return self.storage.path(self.grid.chunk_names(np.array([position]))[0])

