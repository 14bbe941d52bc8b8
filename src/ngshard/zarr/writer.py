"""Writing a zarr array's chunks: encoded granules staged by grid position, then stored on
commit, each shard (or chunk object) written whole in one atomic write.

A shard all of whose granules inside the array are staged is written without being read;
any other is read whole, its other inner chunks carried over as they are, and written back
only if it has not changed in between (else ConflictError). Inner chunks go in C order after
or before the index, as zarr-python and tensorstore write them; a shard left with no chunk is
deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..progress import progress_bar
from ..storage import ANY
from ..threads import bounded_map, pmap
from .reader import ChunkReader


class ChunkWriter:
    """Staged encoded granules of the array ``reader`` reads (None: a deletion)."""

    def __init__(self, reader: ChunkReader) -> None:
        self.reader = reader
        self.staged: dict[tuple[int, ...], Any] = {}

    def put(self, positions: np.ndarray, blobs: Sequence[Any]) -> None:
        self.staged.update(zip(map(tuple, np.asarray(positions).tolist()), blobs))

    def delete(self, positions: np.ndarray) -> None:
        self.staged.update(dict.fromkeys(map(tuple, np.asarray(positions).tolist())))

    def abort(self) -> None:
        self.staged = {}

    def get(self, positions: np.ndarray) -> list[Any]:
        """The encoded granule at each position: staged (None for a staged deletion), else
        as stored."""
        positions = np.asarray(positions, np.int64).reshape(-1, len(self.reader.meta.shape))
        if not self.staged:
            return self.reader.get(positions)
        keys = list(map(tuple, positions.tolist()))
        todo = [i for i, k in enumerate(keys) if k not in self.staged]
        out = [self.staged.get(k) for k in keys]
        for i, blob in zip(todo, self.reader.get(positions[todo])):
            out[i] = blob
        return out

    def _shards(self, staged: dict[tuple[int, ...], Any]
                ) -> list[tuple[tuple[int, ...], dict[int, Any]]]:
        """Granules by shard: (shard position, {inner id: blob or None})."""
        keys = list(staged)
        positions = np.array(keys, np.int64).reshape(len(keys), -1)
        shard_pos, ids = self.reader.shard_of(positions)
        groups: dict[tuple[int, ...], dict[int, Any]] = {}
        for key, shard, i in zip(keys, map(tuple, shard_pos.tolist()), ids.tolist()):
            groups.setdefault(shard, {})[i] = staged[key]
        return list(groups.items())

    def _covered(self, shard: tuple[int, ...], ids: dict[int, Any]) -> bool:
        """Whether every inner chunk of ``shard`` inside the array is staged."""
        meta = self.reader.meta
        cps = np.array(meta.sharding.chunks_per_shard, np.int64)
        local = np.indices(tuple(cps)).reshape(len(cps), -1).T
        inside = np.flatnonzero(((np.array(shard) * cps + local) < meta.grid).all(axis=1))
        return all(i in ids for i in inside.tolist())

    def plan(self, positions: np.ndarray) -> str:
        """What :meth:`commit` would write with granules at ``positions`` staged too."""
        meta, storage = self.reader.meta, self.reader.storage
        staged = {**self.staged, **dict.fromkeys(map(tuple, positions.tolist()), b"")}
        if meta.sharding is None:
            writes = sum(b is not None for b in staged.values())
            return (f"write {writes} chunk objects to {storage.url}, delete "
                    f"{len(staged) - writes}")
        shards = self._shards(staged)
        whole = sum(self._covered(s, ids) for s, ids in shards)
        return (f"write {len(shards)} shards to {storage.url}: {whole} whole (not read), "
                f"{len(shards) - whole} read, merged and rewritten (or deleted if left "
                f"empty)")

    def commit(self, *, progress: bool = False) -> None:
        """Store what is staged; then nothing is."""
        if not self.staged:
            return
        storage, meta = self.reader.storage, self.reader.meta
        if meta.sharding is None:
            puts = [(n, bytes(b)) for n, b in zip(meta.key_encoding.keys(list(self.staged)),
                                                  self.staged.values()) if b is not None]
            gone = [n for n, b in zip(meta.key_encoding.keys(list(self.staged)),
                                      self.staged.values()) if b is None]
            storage.write_many(puts)
            pmap(storage.delete, gone, min_items=4)
        else:
            shards = self._shards(self.staged)
            done = bounded_map(self._write_shard, shards)
            for _ in progress_bar(done, enabled=progress, total=len(shards),
                                  desc="writing shards", unit="shard"):
                pass
        self.staged = {}

    def _write_shard(self, item: tuple[tuple[int, ...], dict[int, Any]]) -> None:
        shard, entries = item
        reader, sharding = self.reader, self.reader.meta.sharding
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
