"""A zarr array's chunk store: encoded granules (inner chunks of a sharded array, or chunk
objects) by grid position, read through a :class:`~ngshard.zarr.reader.ChunkReader`, staged,
and stored on commit, each shard (or chunk object) written whole in one atomic write. The
one writer of an array: ``ZarrArray`` assignments and ``encoded()`` puts stage here.

A shard all of whose granules inside the array are staged is written without being read;
any other is read whole, its other inner chunks carried over as they are, and written back
only if it has not changed in between (else ConflictError). Inner chunks go in C order after
or before the index, as zarr-python and tensorstore write them; a shard left with no chunk is
deleted. A raw or gzip C-order granule is byte for byte a precomputed chunk of the reversed
axes (``encoding`` says so), which conversion carries without decoding.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ..chunkstore import Blob, ChunkStore
from ..commitplan import CommitPlan, ShardPlan
from ..progress import progress_bar
from ..storage import ANY, Storage
from ..threads import bounded_map, pmap
from .reader import ChunkReader

Staged = dict[tuple[int, ...], Any]  # grid position -> encoded granule, None: a deletion


class ZarrChunkStore(ChunkStore):
    """The granules of the array ``reader`` reads (its ``meta``, which a resize replaces)."""

    clipped_edges = False

    def __init__(self, reader: ChunkReader) -> None:
        self.reader = reader
        self.dtype = reader.meta.dtype
        self.encoding = reader.meta.chunk_codecs.token(reader.meta.dtype)
        self.staged: Staged = {}

    shape = property(lambda self: self.reader.meta.shape)
    chunks = property(lambda self: self.reader.meta.chunks)

    @property
    def storage(self) -> Storage:
        return self.reader.storage

    def _positions(self, positions: np.ndarray) -> np.ndarray:
        positions = np.asarray(positions, np.int64).reshape(-1, len(self.shape))
        if ((positions < 0) | (positions >= np.array(self.grid_shape))).any():
            raise IndexError(f"chunk positions outside the grid {self.grid_shape} of "
                             f"{self.storage.url}")
        return positions

    # --- reading ----------------------------------------------------------------------------

    def get(self, positions: np.ndarray) -> list[Blob | None]:
        return self.get_tagged(positions)[0]

    def get_tagged(self, positions: np.ndarray, known: Callable[[Hashable], bool] | None = None
                   ) -> tuple[list[Blob | None], list[Hashable | None]]:
        positions = self._positions(positions)
        if not self.staged:
            return self.reader.get_tagged(positions, known)
        keys = list(map(tuple, positions.tolist()))
        todo = [i for i, k in enumerate(keys) if k not in self.staged]
        out = [self.staged.get(k) for k in keys]
        tags: list[Hashable | None] = [None] * len(keys)  # staged ones: no stored bytes
        found, found_tags = self.reader.get_tagged(positions[todo], known)
        for i, blob, tag in zip(todo, found, found_tags):
            out[i], tags[i] = blob, tag
        return out, tags

    def list_positions(self) -> np.ndarray:
        stored = self.reader.list_positions()
        if not self.staged:
            return stored
        keys = set(map(tuple, stored.tolist()))
        keys |= {k for k, b in self.staged.items() if b is not None}
        keys -= {k for k, b in self.staged.items() if b is None}
        return np.array(sorted(keys), np.int64).reshape(-1, len(self.shape))

    def where(self, position: Sequence[int]) -> str:
        return self.reader.where(tuple(position))

    # --- staging ----------------------------------------------------------------------------

    def put(self, positions: np.ndarray, blobs: Sequence[Blob]) -> None:
        positions = self._positions(positions)
        if len(blobs) != len(positions):
            raise ValueError(f"{len(blobs)} chunks for {len(positions)} positions")
        self.staged.update(zip(map(tuple, positions.tolist()), blobs))

    def delete(self, positions: np.ndarray) -> None:
        self.staged.update(dict.fromkeys(map(tuple, self._positions(positions).tolist())))

    def abort(self) -> None:
        self.staged = {}

    def resize(self, shape: Sequence[int]) -> None:
        self.reader.meta = self.reader.meta.resized(tuple(shape))

    # --- planning and committing ------------------------------------------------------------

    def _shards(self, staged: Staged) -> list[tuple[tuple[int, ...], dict[int, Any]]]:
        """Granules by shard: (shard position, {inner id: blob or None}), in C order."""
        keys = list(staged)
        positions = np.array(keys, np.int64).reshape(len(keys), len(self.shape))
        shard_pos, ids = self.reader.shard_of(positions)
        groups: dict[tuple[int, ...], dict[int, Any]] = {}
        for key, shard, i in zip(keys, map(tuple, shard_pos.tolist()), ids.tolist()):
            groups.setdefault(shard, {})[i] = staged[key]
        return sorted(groups.items())

    def _covered(self, shard: tuple[int, ...], ids: dict[int, Any]) -> bool:
        """Whether every inner chunk of ``shard`` inside the array is staged."""
        meta = self.reader.meta
        cps = np.array(meta.shard_codec.chunks_per_shard, np.int64)
        local = np.indices(tuple(cps)).reshape(len(cps), -1).T
        inside = np.flatnonzero(((np.array(shard) * cps + local) < meta.grid).all(axis=1))
        return all(i in ids for i in inside.tolist())

    def plan(self, positions: np.ndarray | None = None, nbytes: int = 0) -> CommitPlan:
        meta, storage = self.reader.meta, self.storage
        pending = [] if positions is None else map(tuple, np.asarray(positions).tolist())
        staged = {**self.staged, **dict.fromkeys(pending, nbytes)}

        def size(blob: Any) -> int:
            return blob if isinstance(blob, int) else len(blob)

        if meta.sharding is None:
            names = meta.key_encoding.keys(list(staged))
            return CommitPlan.files(storage.url, {
                n: None if b is None else size(b) for n, b in zip(names, staged.values())},
                unit="chunk object")
        shards = self._shards(staged)
        names = meta.key_encoding.keys([s for s, _ in shards])
        grid = tuple(-(-g // c) for g, c in zip(meta.grid, meta.sharding.chunks_per_shard))
        covered = [self._covered(s, ids) for s, ids in shards]
        infos = storage.stat_many([n for n, c in zip(names, covered) if not c])
        read = iter(0 if info is None else info.size for info in infos)
        plans = []
        for name, (shard, ids), whole in zip(names, shards, covered):
            sets = sum(b is not None for b in ids.values())
            plans.append(ShardPlan(
                name, int(np.ravel_multi_index(shard, grid)), "write" if whole else "rewrite",
                sets=sets, deletes=len(ids) - sets, keys_after=None,
                read_bytes=0 if whole else next(read),
                write_bytes=sum(size(b) for b in ids.values() if b is not None)))
        return CommitPlan(storage.url, "rewrite", tuple(plans))

    def commit(self, *, progress: bool = False) -> None:
        if not self.staged:
            return
        storage, meta = self.storage, self.reader.meta
        if meta.sharding is None:
            names = meta.key_encoding.keys(list(self.staged))
            storage.write_many([(n, bytes(b)) for n, b in zip(names, self.staged.values())
                                if b is not None])
            pmap(storage.delete, [n for n, b in zip(names, self.staged.values()) if b is None],
                 min_items=4)
        else:
            shards = self._shards(self.staged)
            done = bounded_map(self._write_shard, shards)
            for _ in progress_bar(done, enabled=progress, total=len(shards),
                                  desc="writing shards", unit="shard"):
                pass
        self.staged = {}

    def _write_shard(self, item: tuple[tuple[int, ...], dict[int, Any]]) -> None:
        shard, entries = item
        reader, sharding = self.reader, self.reader.meta.shard_codec
        name = reader.meta.key_encoding.keys([shard])[0]
        blobs: list[Any] = [None] * sharding.num_chunks
        generation: Any = ANY
        if not self._covered(shard, entries):
            found = reader.read_shard(name)
            generation = None if found is None else found[0]
            if found is not None:
                data = memoryview(found[1])
                index = sharding.read_index(data, reader.storage.path(name))
                for i in np.flatnonzero(~index.empty).tolist():
                    offset, nbytes = index.table[i].tolist()
                    blobs[i] = data[offset:offset + nbytes]
        for i, blob in entries.items():
            blobs[i] = blob
        parts = sharding.assemble(blobs)
        reader.forget(name)
        if parts is not None:
            reader.storage.write(name, parts, if_generation=generation)
        elif generation is not None:
            reader.storage.delete(name, if_generation=generation)
