"""Reading a zarr array's stored chunks: encoded granules (inner chunks of a sharded array, or
chunk objects) by grid position, in batches, and the positions present.

A batch reads each shard index it needs once, through the generation-tied index cache of
``storage/index_cache.py`` (so a replaced shard is never read at stale offsets), then only the
inner chunks' byte ranges, coalesced by the storage, every shard's requests issued together.
A shard replaced between its index and its data is read again under the retry policy of
``storage/retry.py``: the precomputed reader's cache rules and retries, and its ChangedError.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

import numpy as np

from ..errors import CorruptDataError
from ..limits import DEFAULT_CACHE_BYTES
from ..storage import Storage
from ..storage.index_cache import IndexCache, changed_lately
from ..threads import pmap
from ..types import Blob
from .metadata import ArrayMetadata
from .shard_index import ShardIndex


class ChunkReader:
    """Encoded granules of one array at ``storage``, described by ``meta`` (which a resize
    replaces). Not thread-safe."""

    def __init__(self, storage: Storage, meta: ArrayMetadata,
                 cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.storage, self.meta = storage, meta
        #: Shard indices by shard object name.
        self.cache: IndexCache[ShardIndex] = IndexCache(cache_bytes)
        #: How reads that meet a shard replaced under them run again: the storage's policy,
        #: which also retries its failed requests (one count of both).
        self.retry = storage.retry

    # --- names ------------------------------------------------------------------------------

    def shard_of(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard positions, inner chunk ids in C order) of granule positions."""
        cps = np.array(self.meta.shard_codec.chunks_per_shard, np.int64)
        positions = np.asarray(positions, np.int64).reshape(-1, len(cps))
        ids = np.ravel_multi_index(tuple((positions % cps).T), tuple(cps.tolist())) \
            if len(positions) else np.zeros(0, np.int64)
        return positions // cps, ids

    def where(self, position: tuple[int, ...]) -> str:
        """A granule's location, for messages."""
        if self.meta.sharding is None:
            return self.storage.path(self.meta.key_encoding.keys([position])[0])
        shard, _ = self.shard_of(np.array([position]))
        name = self.meta.key_encoding.keys(shard)[0]
        return f"{self.storage.path(name)} inner chunk at {tuple(position)}"

    # --- the index cache --------------------------------------------------------------------

    def forget(self, name: str | None = None) -> None:
        """Drop one shard's cached index (all, with no name)."""
        self.cache.forget(name)

    def stats(self) -> dict[str, int]:
        """The index cache's figures and the retry counts since the reader was made (as
        ``ShardedKV.reader.stats()``)."""
        return {**self.cache.stats(), **self.retry.stats()}

    def indices(self, names: list[str]) -> list[tuple[Hashable, ShardIndex, bool] | None]:
        """(generation, index, recent) of each named shard, None where there is no shard
        (``recent``: it changed so lately that its generation may not tell the next change,
        see ``changed_lately``); every index not cached for the shard's current generation
        read in one batch."""
        sharding = self.meta.shard_codec
        infos = self.storage.stat_many(names)
        out: list = [None] * len(names)
        todo = []
        now = time.time()
        recent = [False] * len(names)
        for i, (name, info) in enumerate(zip(names, infos)):
            if info is None:
                self.cache.forget(name)
                continue
            recent[i] = changed_lately(info, now=now)
            cached = self.cache.get(name, info.generation, recent[i])
            if cached is not None:
                out[i] = (info.generation, cached, False)
                continue
            if info.size < sharding.index_nbytes:
                raise CorruptDataError(f"{self.storage.path(name)}: {info.size} bytes, "
                                       f"shorter than its shard index of "
                                       f"{sharding.index_nbytes}")
            todo.append((i, info))
        reads = self.storage.read_ranges(
            [(names[i], np.array([sharding.index_range(info.size)])) for i, info in todo])
        for (i, info), (generation, chunks) in zip(todo, reads):
            if chunks is None or (generation is not None and generation != info.generation):
                raise self.cache.stale(names[i], self.storage.path(names[i]))
            index = sharding.decode_index(chunks[0], info.size, self.storage.path(names[i]))
            self.cache.put(names[i], index, info.generation, index.nbytes, recent[i])
            out[i] = (info.generation, index, recent[i])
        return out

    # --- granules ---------------------------------------------------------------------------

    def get(self, positions: np.ndarray) -> list[Blob | None]:
        """The encoded granule at each (k, ndim) grid position, None where absent."""
        return self.get_tagged(positions)[0]

    def get_tagged(self, positions: np.ndarray, known: Callable[[Hashable], bool] | None = None
                   ) -> tuple[list[Blob | None], list[Hashable | None]]:
        """As :meth:`get`, with each granule's tag (see ``ChunkStore.get_tagged``): its
        shard's name and generation and its place there, None unsharded or where the shard
        changed too lately for its generation to tell; granules whose tag ``known`` accepts
        are not read (None)."""
        positions = np.asarray(positions, np.int64).reshape(-1, len(self.meta.shape))
        if self.meta.sharding is None:
            found: list[Blob | None] = list(
                self.storage.read_many(self.meta.key_encoding.keys(positions)))
            return found, [None] * len(found)
        return self.retry.run(self._get_sharded, positions, known)

    def _get_sharded(self, positions: np.ndarray, known: Callable[[Hashable], bool] | None
                     ) -> tuple[list[Blob | None], list[Hashable | None]]:
        shard_pos, ids = self.shard_of(positions)
        # shards by their ravelled position (a 1-D unique: a fraction of the 2-D one's cost)
        grid = tuple((shard_pos.max(axis=0) + 1).tolist()) if len(shard_pos) else ()
        flat = np.ravel_multi_index(tuple(shard_pos.T), grid) if len(shard_pos) else \
            np.zeros(0, np.intp)
        _, first, inverse = np.unique(flat, return_index=True, return_inverse=True)
        shards, inverse = shard_pos[first], inverse.reshape(-1)
        names = self.meta.key_encoding.keys(shards)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(shards) + 1)).tolist()
        out: list = [None] * len(positions)
        tags: list = [None] * len(positions)
        requests, plans = [], []
        for s, found in enumerate(self.indices(names)):
            if found is None:
                continue
            generation, index, recent = found
            rows = order[bounds[s]:bounds[s + 1]]
            if not recent:
                mine = ids[rows].tolist()
                for row, i in zip(rows.tolist(), mine):
                    tags[row] = (names[s], generation, i)
                if known is not None:
                    rows = rows[[not known(tags[row]) for row in rows.tolist()]]
            present, ranges = index.ranges(ids[rows])
            for row in rows[~present].tolist():
                tags[row] = None  # absent: nothing to name
            if len(ranges):
                requests.append((names[s], ranges))
                plans.append((rows[present].tolist(), generation, ranges))
        for (name, _), (rows, generation, ranges), (read_gen, chunks) in zip(
                requests, plans, self.storage.read_ranges(requests)):
            sizes = (ranges[:, 1] - ranges[:, 0]).tolist()
            if chunks is None or (read_gen is not None and read_gen != generation) or \
                    any(len(c) != n for c, n in zip(chunks, sizes)):  # shorter: it changed
                raise self.cache.stale(name, self.storage.path(name))
            for row, chunk in zip(rows, chunks):
                out[row] = chunk
        return out, tags

    def read_shard(self, name: str) -> tuple[Hashable, Blob] | None:
        """A whole shard (or chunk object) and its generation, None if absent."""
        return self.retry.run(self._read_whole, name)

    def _read_whole(self, name: str) -> tuple[Hashable, Blob] | None:
        info = self.storage.stat(name)
        if info is None:
            return None
        generation, data = self.storage.read_range(name, 0, info.size)
        if data is None or (generation is not None and generation != info.generation) \
                or len(data) != info.size:
            raise self.cache.stale(name, self.storage.path(name))
        return info.generation, data

    # --- listing ----------------------------------------------------------------------------

    def stored_keys(self) -> list[tuple[int, ...]]:
        """Grid positions (of shards, or of chunks when unsharded) of the objects stored,
        from a listing, level by level for "/"-separated keys."""
        enc, ndim = self.meta.key_encoding, len(self.meta.shape)
        if enc.separator == ".":
            return [p for p in (enc.parse(n, ndim) for n in self.storage.list()) if p]
        root = self.storage.child("c") if enc.kind == "default" else self.storage
        levels: list[tuple[tuple[int, ...], Storage]] = [((), root)]
        for depth in range(ndim):
            last = depth == ndim - 1

            def listing(level: tuple[tuple[int, ...], Storage], last: bool = last
                        ) -> list[str]:
                return level[1].list(dirs=not last)

            listed = pmap(listing, levels, min_items=4)
            levels = [((*prefix, int(n)), store.child(n) if not last else store)
                      for (prefix, store), names in zip(levels, listed)
                      for n in names if n.isdigit()]
        return [prefix for prefix, _ in levels]

    def list_positions(self) -> np.ndarray:
        """(n, ndim) grid positions of the granules stored, in C order."""
        grid = np.array(self.meta.grid, np.int64)
        ndim = len(grid)
        keys = np.array(self.stored_keys(), np.int64).reshape(-1, ndim)
        if self.meta.sharding is None:
            found = keys
        else:
            cps = np.array(self.meta.shard_codec.chunks_per_shard, np.int64)
            keys = keys[((keys * cps) < grid).all(axis=1)]
            names = self.meta.key_encoding.keys(keys)
            parts = [np.zeros((0, ndim), np.int64)]
            for shard, entry in zip(keys, self.retry.run(self.indices, names)):
                if entry is not None:
                    ids = np.flatnonzero(~entry[1].empty)
                    parts.append(shard * cps + np.stack(np.unravel_index(ids, tuple(cps)), 1))
            found = np.concatenate(parts)
        found = found[(found < grid).all(axis=1)]
        return found[np.lexsort(found.T[::-1])] if len(found) else found
