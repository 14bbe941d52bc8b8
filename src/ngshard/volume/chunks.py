"""Chunk stores: grid positions -> encoded chunk bytes, whether the chunks live in a sharded
key-value store (keyed by compressed Morton code) or as one file per chunk. Volumes read and
write through this one small interface, in batches; writes are staged until ``commit``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..compression import twin_suffix
from ..errors import NgShardError
from ..sharded import ShardedKV
from ..storage import Storage
from ..storage.twins import Twins, write_twins
from ..threads import pmap
from .grid import ChunkGrid


class ChunkStore:
    """Encoded chunks by grid position, read in batches, written on commit."""

    grid: ChunkGrid
    #: The sharded store holding the chunks (keyed by Morton code), None for a file per chunk.
    kv: ShardedKV | None = None

    def get(self, positions: np.ndarray) -> list[bytes | memoryview | None]:
        """The encoded chunk at each (n, 3) position (bytes-like), None where absent."""
        raise NotImplementedError

    def put(self, positions: np.ndarray, chunks: Sequence[bytes]) -> None:
        """Stage chunks; reads see them at once, storage on :meth:`commit`."""
        raise NotImplementedError

    def delete(self, positions: np.ndarray) -> None:
        """Stage the removal of chunks (absent ones are ignored)."""
        raise NotImplementedError

    def commit(self, *, progress: bool = False) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        """Drop what is staged."""
        raise NotImplementedError

    def spill(self) -> None:
        """Move staged chunks out of memory where the store can (sharded: its spill files)."""

    def plan(self, positions: np.ndarray, nbytes: int) -> object:
        """What :meth:`commit` would do with the chunks at ``positions`` staged too (about
        ``nbytes`` each); printable."""
        raise NotImplementedError

    def with_grid(self, grid: ChunkGrid) -> None:
        """Name chunks after ``grid`` from now on (a resized scale)."""
        self.grid = grid

    def where(self, position: Sequence[int]) -> str:
        """The chunk's location, for error messages."""
        raise NotImplementedError

    def list_positions(self) -> np.ndarray:
        """(n, 3) grid positions of the chunks present (stored or staged), from the shard
        indices or the file listing; entries that name no chunk of the grid are left out
        (``verify`` reports them)."""
        raise NotImplementedError


class ShardedChunks(ChunkStore):
    """Chunks in a sharded store, keyed by the compressed Morton code of their position."""

    def __init__(self, kv: ShardedKV, grid: ChunkGrid) -> None:
        self.kv, self.grid = kv, grid

    def get(self, positions: np.ndarray) -> list[bytes | memoryview | None]:
        keys = self.grid.morton(positions)
        found = self.kv.get_many(keys, copy=False)
        return [found.get(k) for k in keys.tolist()]

    def put(self, positions: np.ndarray, chunks: Sequence[bytes]) -> None:
        self.kv.set_many(self.grid.morton(positions), list(chunks))

    def delete(self, positions: np.ndarray) -> None:
        if len(positions):
            self.kv.delete_many(self.grid.morton(positions))

    def commit(self, *, progress: bool = False) -> None:
        self.kv.commit(progress=progress)

    def abort(self) -> None:
        self.kv.abort()

    def spill(self) -> None:
        self.kv.spill()

    def plan(self, positions: np.ndarray, nbytes: int) -> object:
        keys = self.grid.morton(positions)
        return self.kv.plan(pending=(keys, np.full(len(keys), nbytes, np.int64)))

    def list_positions(self) -> np.ndarray:
        codes = self.kv.keys_array()
        return self.grid.unmorton(codes[self.grid.codes_in_grid(codes)])

    def where(self, position: Sequence[int]) -> str:
        key = int(self.grid.morton(np.array([position]))[0])
        shard = self.kv.spec.shard_filename(self.kv.spec.locate_one(key)[0])
        return f"{self.kv.storage.path(shard)} chunk {key} at grid position {tuple(position)}"


class FileChunks(ChunkStore):
    """One file per chunk, named ``x0-x1_y0-y1_z0-z1``, or its compressed twin (``.gz``,
    ``.br``, ``.zstd``, ``.xz``, ``.bz2``) as cloud-volume writes them with ``compress=``.

    Writes go to the ``compress`` twin (None: the plain file). On a local store, or one
    where a twin was read, the other variants of a written chunk are removed after it is
    written (the plain file would hide a new twin from every reader); object stores written
    by cloud-files record compression as a Content-Encoding, not by name, so elsewhere that
    costs no requests.
    """

    def __init__(self, storage: Storage, grid: ChunkGrid, max_chunk_bytes: int | None = None,
                 compress: str | None = None) -> None:
        self.storage, self.grid, self.max_chunk_bytes = storage, grid, max_chunk_bytes
        self.suffix = twin_suffix(compress)
        self.files = Twins(storage, max_chunk_bytes)
        self._staged: dict[str, bytes | None] = {}  # None: a deletion

    def get(self, positions: np.ndarray) -> list[bytes | None]:
        names = self.grid.chunk_names(positions)
        todo = [n for n in names if n not in self._staged]
        found = dict(zip(todo, self.files.read_many(todo)))
        return [self._staged[n] if n in self._staged else found[n] for n in names]

    def put(self, positions: np.ndarray, chunks: Sequence[bytes]) -> None:
        self._staged.update(zip(self.grid.chunk_names(positions), chunks))

    def delete(self, positions: np.ndarray) -> None:
        self._staged.update(dict.fromkeys(self.grid.chunk_names(positions)))

    def commit(self, *, progress: bool = False) -> None:
        staged, self._staged = self._staged, {}
        written = [(n, b) for n, b in staged.items() if b is not None]
        write_twins(self.storage, written, self.suffix)
        stale = self.files.stored([n for n, b in staged.items() if b is None])
        if written and (self.storage.local_root is not None or self.files.seen_twins):
            stale += self.files.stored([n for n, _ in written], keep=self.suffix)
        pmap(self.storage.delete, stale, min_items=4)

    def abort(self) -> None:
        self._staged = {}

    def plan(self, positions: np.ndarray, nbytes: int) -> object:
        names = set(self.grid.chunk_names(positions))
        writes = len(names | {n for n, b in self._staged.items() if b is not None})
        deletes = len({n for n, b in self._staged.items() if b is None} - names)
        return (f"write {writes} chunk files to {self.storage.url} (about "
                f"{writes * nbytes} B), delete {deletes}")

    def list_positions(self) -> np.ndarray:
        found = []
        stored = set(self.files.list())
        for name in (stored | set(self._staged)) - {n for n, b in self._staged.items()
                                                      if b is None}:
            try:
                found.append(self.grid.parse_chunk_name(name))
            except NgShardError:
                continue
        return np.array(sorted(found), np.int64).reshape(-1, 3)

    def where(self, position: Sequence[int]) -> str:
        return self.storage.path(self.grid.chunk_names(np.array([position]))[0])
