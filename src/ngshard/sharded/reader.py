"""Reading a sharded store: shard and minishard indices in the generation-tied index cache,
batched lookups, the retry policy for shards replaced mid-read, and listing from the indices.

A batch of keys costs one read per shard index, one per group of nearby minishard indices and
one per group of nearby chunks: on local files each step of every shard together, elsewhere
each shard's steps on their own (``pipelined.py``). The cache (``storage/index_cache.py``) is
bounded by bytes and every entry is tied to the generation of the file it was read from, so a
shard replaced under an open store is read again rather than at stale offsets; a read that
meets such a replacement midway runs again under the retry policy (``storage/retry.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from .._arrays import unique
from ..compression import decode
from ..errors import CorruptDataError
from ..limits import DEFAULT_CACHE_BYTES, DEFAULT_MAX_VALUE_BYTES
from ..storage import ObjectInfo, Storage
from ..storage.index_cache import IndexCache, changed_lately
from ..storage.retry import RetryPolicy
from ..threads import pmap
from ..types import Blob
from . import legacy, pipelined
from .format import (
    EMPTY_MINISHARD,
    MinishardIndex,
    decode_minishard_indices,
    decode_shard_index,
    find_in_tables,
)
from .spec import ShardingSpec
from .trailer import TRAILER_SIZE, indices_end, trailer_garbage

# Threads pay off on minishard indices only past this many bytes read; on small ones the
# GIL makes them cost (1,024 gzip'd indices of 1.6 KiB: 25 ms on threads, 27 without; 300
# of them 7.2 against 6.7: the two cross near 1 MiB).
_PARALLEL_DECODE_BYTES = 1 << 20
R = TypeVar("R")


@dataclass
class ShardState:
    """What is known of one shard file: its index and the minishard indices decoded so far."""

    name: str
    size: int
    generation: Any
    ranges: np.ndarray  # (num_minishards, 2) absolute [start, end) of each minishard index
    minishards: dict[int, MinishardIndex] = field(default_factory=dict)
    # Where the bytes after the shard index live: the shard file itself, or for the obsolete
    # two-file variant the <shard>.data file, which starts at the end of the shard index.
    data_name: str = ""
    data_shift: int = 0
    data_generation: Any = None
    # Unreferenced bytes (as appends' trailers record them, with any dead append's tail) and
    # where the committed bytes end: past it lies only the tail of an append that died.
    garbage: int = 0
    end: int = 0
    tail_known: bool = True  # False: a dead append's tail may follow (see plan.settle)

    def __post_init__(self) -> None:
        if not self.data_name:
            self.data_name, self.data_generation = self.name, self.generation
        self.end = self.end or self.size

    @property
    def split(self) -> bool:
        """True for the obsolete two-file variant."""
        return self.data_name != self.name

    def key_count(self) -> int:
        return sum(len(i.keys) for i in self.minishards.values())


class ShardReader:
    """Reads of the shards of one store, with the index cache. Not thread-safe.

    ``retry``: the retry policy (by default the storage's, :attr:`Storage.retry
    <ngshard.storage.Storage.retry>`, set by the ``retries`` and ``retry_seconds`` storage
    options: its requests and these reads count their retries in one place)."""

    def __init__(self, storage: Storage, spec: ShardingSpec,
                 cache_bytes: int = DEFAULT_CACHE_BYTES,
                 max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES, *,
                 retry: RetryPolicy | None = None) -> None:
        self.storage, self.spec, self.max_value_bytes = storage, spec, max_value_bytes
        #: The shard states (indices) by shard file name.
        self.cache: IndexCache[ShardState] = IndexCache(cache_bytes)
        #: How reads that meet a shard replaced under them run again.
        self.retry = retry if retry is not None else storage.retry
        self._names: dict[int, str] = {}  # shard number -> file name, for single-key reads
        #: The most keys the shard of each of some keys can hold, where the keys' owner knows
        #: it (a chunk grid whose shards are boxes of chunks), else None: a batch asking for
        #: that many keys of a shard reads it whole (:func:`.pipelined.whole_shards`).
        self.capacity: Callable[[np.ndarray], np.ndarray | None] | None = None

    @property
    def cached_bytes(self) -> int:
        """Bytes of shard and minishard indices held in the cache (at most ``cache_bytes``,
        beyond the shard in use)."""
        return self.cache.nbytes

    @property
    def cached_shards(self) -> int:
        """Number of shards whose indices are cached."""
        return len(self.cache)

    def forget(self, name: str | None = None) -> None:
        """Drop one shard's cached indices (all, with no name)."""
        self.cache.forget(name)

    def stats(self) -> dict[str, int]:
        """The index cache's figures (:meth:`IndexCache.stats`) and the retry counts
        (:meth:`RetryPolicy.stats`: of the storage's requests and of these reads) since the
        storage was opened."""
        return {**self.cache.stats(), **self.retry.stats()}

    def retrying(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)`` under the retry policy: run again after each shard found replaced
        under it (see :meth:`RetryPolicy.run`)."""
        return self.retry.run(fn, *args)

    def shards(self, names: list[str]) -> dict[str, ShardState | None]:
        """The current state of each named shard (None: no such file), indices read as needed.

        Where objects can be appended to (local files), a stat of each shard first: a cached
        index of an unchanged shard costs nothing more, and an append's trailer lies at the
        end. Elsewhere the shard index is read straight away, one ranged GET from offset 0
        whose response gives the size and generation (no HEAD on the critical path): a
        cached index of that generation is used, else the index just read."""
        size = self.spec.shard_index_size
        if self.storage.supports_append:
            heads: list = [None] * len(names)
            found = legacy.with_pairs(self.storage, names, self.storage.stat_many(names))
        else:
            heads = self.storage.read_heads(names, size)
            found = legacy.with_pairs(self.storage, names, [h and h[0] for h in heads])
        out: dict[str, ShardState | None] = {}
        todo = []
        now = time.time()
        for name, infos, head in zip(names, found, heads):
            if infos is None:
                self.cache.forget(name)
                out[name] = None
                continue
            if head is not None and head[1] is None:  # changed while its index was read
                raise self.cache.stale(name, self.storage.path(name))
            generation = infos[0].generation if infos[1] is None else \
                (infos[0].generation, infos[1].generation)
            recent = changed_lately(*infos, now=now)
            cached = self.cache.get(name, generation, recent)
            if cached is not None:
                out[name] = cached
            else:
                todo.append((name, infos, generation, recent, head and [head[1]]))
        if not todo:
            return out
        index_names = [name if data is None else legacy.pair_names(name)[0]
                       for name, (_, data), _, _, _ in todo]
        # The shard index, and where appends happen (local files), the end of the file,
        # where an append leaves its trailer.
        trailer = self.storage.supports_append

        def wanted(info: ObjectInfo) -> np.ndarray:
            head = [[0, min(size, info.size)]]
            return np.array(head + [[max(0, info.size - TRAILER_SIZE), info.size]] if trailer
                            else head)

        unread = [k for k, item in enumerate(todo) if item[4] is None]
        reads: list = [(None, item[4]) for item in todo]
        for k, read in zip(unread, self.storage.read_ranges(
                [(index_names[k], wanted(todo[k][1][0])) for k in unread])):
            reads[k] = read
        for (name, (info, data), generation, recent, _), (gen, chunks) in zip(todo, reads):
            if chunks is None or (gen is not None and gen != info.generation):
                raise self.cache.stale(name, self.storage.path(name))
            out[name] = self.adopt(name, info, data, generation, recent, chunks)
        return out

    def adopt(self, name: str, info: ObjectInfo, data: ObjectInfo | None, generation: Any,
              recent: bool, chunks: list[Blob]) -> ShardState:
        """The state of shard ``name`` from its index just read (``chunks``: the index, and
        where appends happen, the file's last bytes), cached: what was decoded of a cached
        state of the same generation and index is kept."""
        size, trailer = self.spec.shard_index_size, self.storage.supports_append
        index_name = name if data is None else legacy.pair_names(name)[0]
        total = info.size + (data.size if data is not None else 0)
        if data is not None and info.size != size:
            raise CorruptDataError(f"{self.storage.path(index_name)}: {info.size} bytes, "
                                   f"not the {size} of a shard index")
        ranges = decode_shard_index(chunks[0], self.spec.num_minishards, total,
                                    self.storage.path(index_name))
        cached = self.cache.peek(name)
        shard = ShardState(name, total, generation, ranges)
        if cached is not None and cached.generation == generation and \
                np.array_equal(cached.ranges, ranges):  # confirmed: keep what was decoded
            shard.minishards, shard.garbage, shard.end, shard.tail_known = \
                cached.minishards, cached.garbage, cached.end, cached.tail_known
        elif data is not None:
            shard.data_name, shard.data_shift = legacy.pair_names(name)[1], size
            shard.data_generation = data.generation
        elif trailer and shard.end != indices_end(ranges, size):
            recorded = trailer_garbage(chunks[1], total)
            if recorded is not None and total - TRAILER_SIZE == indices_end(ranges, size):
                shard.garbage = recorded
            else:  # only writers need to know: see plan.settle
                shard.tail_known = False
        self.cache.put(name, shard, generation,
                       ranges.nbytes + sum(i.nbytes for i in shard.minishards.values()), recent)
        return shard

    def read_through(self, wanted: list[tuple[ShardState, np.ndarray]]) -> list[list[Blob]]:
        """Read ``(shard, (n, 2) absolute ranges)`` past the shard indices, in one batch,
        checking each shard's bytes came from the generation its index was read from."""
        reads = self.storage.read_ranges(
            [(s.data_name, np.asarray(r, np.int64) - s.data_shift) for s, r in wanted])
        return [self.check_read(shard, ranges, gen, chunks)
                for (shard, ranges), (gen, chunks) in zip(wanted, reads)]

    def load_minishards(self, wanted: list[tuple[ShardState, np.ndarray]]) -> None:
        """Read and decode the minishard indices not cached yet, in one batch."""
        todo = [(shard, missing) for shard, minishards in wanted
                if (missing := self.missing_minishards(shard, minishards))]
        if not todo:
            return
        reads = self.read_through([(shard, shard.ranges[missing]) for shard, missing in todo])
        large = sum(len(c) for chunks in reads for c in chunks) > _PARALLEL_DECODE_BYTES
        jobs = [(shard, missing, chunks) for (shard, missing), chunks in zip(todo, reads)]
        decoded = pmap(lambda job: self.decode_minishards(*job), jobs, min_items=2) if large \
            else [self.decode_minishards(*job) for job in jobs]
        for (shard, missing, _), indices in zip(jobs, decoded):
            self.keep_minishards(shard, missing, indices)

    def missing_minishards(self, shard: ShardState, minishards: np.ndarray) -> list[int]:
        """Of ``minishards``, those whose index must be read (empty ones are known now)."""
        missing = [m for m in unique(minishards).tolist() if m not in shard.minishards]
        for m in missing:
            if shard.ranges[m, 0] == shard.ranges[m, 1]:
                shard.minishards[m] = EMPTY_MINISHARD
        return [m for m in missing if shard.ranges[m, 0] != shard.ranges[m, 1]]

    def decode_minishards(self, shard: ShardState, missing: list[int], chunks: list[Blob]
                          ) -> list[MinishardIndex]:
        """The indices of the ``missing`` minishards of a shard, read as ``chunks``."""
        path = self.storage.path(shard.name)
        return decode_minishard_indices(
            chunks, self.spec.minishard_index_encoding, self.spec.shard_index_size,
            shard.size, lambda i: f"{path} (minishard {missing[i]} index at offset "
                                  f"{int(shard.ranges[missing[i], 0])})")

    def keep_minishards(self, shard: ShardState, missing: list[int],
                        indices: list[MinishardIndex]) -> None:
        """Add decoded minishard indices to the shard's state and the cache."""
        shard.minishards.update(zip(missing, indices))
        self.cache.grow(shard.name, shard, sum(index.nbytes for index in indices))

    def check_read(self, shard: ShardState, ranges: np.ndarray, gen: Any,
                    chunks: list[Blob] | None) -> list[Blob]:
        """The ``chunks`` read; Stale if they were not read from the shard's cached
        generation, CorruptDataError if they were but the file ended early."""
        if chunks is None or (gen is not None and gen != shard.data_generation):
            raise self.cache.stale(shard.name, self.storage.path(shard.name))
        wanted = (ranges[:, 1] - ranges[:, 0]).tolist()
        if list(map(len, chunks)) != wanted:
            i = next(i for i, c in enumerate(chunks) if len(c) != wanted[i])
            raise CorruptDataError(f"{self.storage.path(shard.name)}: bytes [{int(ranges[i, 0])}, "
                                   f"{int(ranges[i, 1])}) lie past the end of the file")
        return chunks

    # --- lookups ---------------------------------------------------------------------------

    def by_shard(self, keys: np.ndarray) -> tuple[list[str], list[np.ndarray], np.ndarray,
                                                  np.ndarray]:
        """Unique ``keys`` sorted by shard: the shard names, each one's positions, and the
        keys and their minishards in that order."""
        shard_nums, minishards = self.spec.locate(keys)
        order = np.argsort(shard_nums, kind="stable")
        shard_nums, minishards, keys = shard_nums[order], minishards[order], keys[order]
        bounds = np.flatnonzero(np.diff(shard_nums)) + 1
        groups = np.split(np.arange(len(keys)), bounds) if len(keys) else []
        names = [self.spec.shard_filename(int(shard_nums[g[0]])) for g in groups]
        return names, groups, keys, minishards

    def _lookup(self, keys: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, ShardState]]:
        """For unique keys: per shard name, an (n, 3) array of (key, start, end) found there."""
        names, groups, keys, minishards = self.by_shard(keys)
        states = self.shards(names)
        present = [(s, g) for n, g in zip(names, groups) if (s := states[n]) is not None]
        self.load_minishards([(s, minishards[g]) for s, g in present])
        # every needed minishard index of every shard, and each key's own one among them:
        # one search for all keys
        tables: list[MinishardIndex] = []
        which = np.zeros(len(keys), np.int64)
        for shard, g in present:
            needed = unique(minishards[g])
            which[g] = len(tables) + np.searchsorted(needed, minishards[g])
            tables += [shard.minishards[m] for m in needed.tolist()]
        mine = np.concatenate([g for _, g in present]) if present else np.zeros(0, np.intp)
        hit, starts, sizes = find_in_tables(tables, which[mine], keys[mine])
        owner = np.repeat(np.arange(len(present)), [len(g) for _, g in present])[hit]
        rows = np.stack([keys[mine][hit], starts, starts + sizes], axis=1)
        cuts = np.searchsorted(owner, np.arange(len(present) + 1)).tolist()
        found = {shard.name: rows[a:b] for (shard, _), a, b in zip(present, cuts, cuts[1:])}
        return found, {s.name: s for s, _ in present}

    def read_found(self, keys: np.ndarray) -> list[tuple[ShardState, np.ndarray, list[Blob]]]:
        """For unique keys: per shard, the (n, 3) (key, start, end) rows found there and the
        stored bytes of each. Where reads report what they read and the shard index is read
        anyway (object stores, HTTP), each shard's reads follow each other on their own
        (:func:`.pipelined.read_found`); elsewhere phase by phase, every shard together."""
        if not self.storage.supports_append:
            return pipelined.read_found(self, keys)
        found, shards = self._lookup(keys)
        reads = self.read_through([(shards[name], rows[:, 1:]) for name, rows in found.items()])
        return [(shards[name], rows, chunks) for (name, rows), chunks in zip(found.items(), reads)]

    def _get_many(self, keys: np.ndarray) -> dict[int, Blob]:
        found = self.read_found(keys)
        rows = np.concatenate([r for _, r, _ in found]) if found else np.zeros((0, 3), np.uint64)
        ks = rows[:, 0].tolist()
        chunks = [c for _, _, chunks in found for c in chunks]
        encoding = self.spec.data_encoding
        if encoding != "raw":  # decompression releases the GIL: spread it over threads
            where = [self.storage.path(shard.name) for shard, r, _ in found for _ in range(len(r))]

            def decoded(job: tuple[str, int, int, Blob]) -> Blob:
                return decode(job[3], encoding, f"{job[0]} (chunk {job[1]} at {job[2]})",
                              self.max_value_bytes)

            chunks = pmap(decoded, zip(where, ks, rows[:, 1].tolist(), chunks))
        return dict(zip(ks, chunks))

    def get_many(self, keys: np.ndarray) -> dict[int, Blob]:
        """Stored values of unique uint64 ``keys``, absent keys left out; values may be views
        into the batch's read buffers."""
        return self.retry.run(self._get_many, keys)

    def _find_one(self, key: int) -> tuple[ShardState, int, int] | None:
        """(shard, start, end) of one key's chunk, None if absent: the single-key fast path."""
        shard_num, m = self.spec.locate_one(key)
        name = self._names.get(shard_num) or self._names.setdefault(
            shard_num, self.spec.shard_filename(shard_num))
        # Where reads report the generation they saw (local files), a cached index is used
        # without a stat first: a hit is confirmed by the read of its data, a miss by a stat.
        shard = self.cache.unchecked(name) if self.storage.reads_report_generation else None
        fresh = shard is None
        if shard is None:
            shard = self.shards([name])[name]
            if shard is None:
                return None
        index = shard.minishards.get(m)
        if index is None:
            self.load_minishards([(shard, np.array([m]))])
            index = shard.minishards[m]
        k = np.uint64(key)
        pos = int(index.keys.searchsorted(k))
        if pos == len(index.keys) or index.keys[pos] != k:
            if not fresh and self.shards([name])[name] is not shard:
                raise self.cache.stale(name, self.storage.path(name))
            return None
        start = int(index.starts[pos])
        return shard, start, start + int(index.sizes[pos])

    def _get_one(self, key: int) -> Blob | None:
        found = self._find_one(key)
        if found is None:
            return None
        shard, start, end = found
        shift = shard.data_shift
        gen, chunk = self.storage.read_range(shard.data_name, start - shift, end - shift)
        if chunk is None or len(chunk) != end - start or gen != shard.data_generation:
            chunk = self.check_read(shard, np.array([[start, end]]), gen,
                                     None if chunk is None else [chunk])[0]
        if self.spec.data_encoding == "raw":
            return chunk
        return decode(chunk, self.spec.data_encoding,
                      f"{self.storage.path(shard.name)} (chunk {key} at {start})",
                      self.max_value_bytes)

    def get_one(self, key: int) -> Blob | None:
        """The stored value of one key (a checked int), None if absent."""
        return self.retry.run(self._get_one, key)

    def contains(self, key: int) -> bool:
        """Whether one key (a checked int) is stored."""
        if self.storage.reads_report_generation:  # a cached hit must be confirmed by a stat
            self.retry.run(self.shards, [self.spec.shard_filename(self.spec.locate_one(key)[0])])
        return self.retry.run(self._find_one, key) is not None
