"""ShardedKV: a MutableMapping from uint64 keys to bytes over the shard files of one directory.

Reads are batched: a batch of keys costs one read per shard index, one per group of nearby
minishard indices and one per group of nearby chunks, all issued together. Shard and minishard
indices are cached (bounded by bytes) and tied to the shard file's generation, so a shard that is
replaced under an open store is read again rather than at stale offsets.
"""

from __future__ import annotations

import itertools
import json
import operator
import os
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from . import codec, shardupdate
from .errors import ConflictError, CorruptDataError, NgShardError, ReadOnlyError, SpecError
from .plan import CommitPlan, ShardPlan
from .shardupdate import TRAILER_SIZE
from .spec import ShardingSpec, as_key_array, check_key
from .staging import DELETED, ShardChanges, Staging
from .storage import ANY, LocalStorage, ObjectInfo, Storage, open_storage, remove_stale
from .threads import WORKERS, bounded_map, pmap

DEFAULT_CACHE_BYTES = 256 << 20
DEFAULT_STAGED_BYTES = 1 << 30
DEFAULT_BUFFER_BYTES = 192 << 20
_PARALLEL_DECODE_BYTES = 2 << 20
_RETRIES = 5  # a shard replaced more often during one read is an error, not a race
MODES = ("r", "r+", "a", "w")
STRATEGIES = ("auto", "append", "rewrite")


@dataclass
class _Shard:
    """What is cached of one shard file: its index and the minishard indices decoded so far."""

    name: str
    size: int
    generation: Any
    ranges: np.ndarray  # (num_minishards, 2) absolute [start, end) of each minishard index
    minishards: dict[int, codec.MinishardIndex] = field(default_factory=dict)
    nbytes: int = 0
    # Where the bytes after the shard index live: the shard file itself, or for the obsolete
    # two-file variant the <shard>.data file, which starts at the end of the shard index.
    data_name: str = ""
    data_shift: int = 0
    data_generation: Any = None
    garbage: int = 0  # unreferenced bytes, as recorded by the trailer of an append

    def __post_init__(self) -> None:
        if not self.data_name:
            self.data_name, self.data_generation = self.name, self.generation

    @property
    def split(self) -> bool:
        return self.data_name != self.name


class _StaleShard(Exception):
    """A shard file changed between reading its index and reading through it."""


def _as_spec(spec: ShardingSpec | dict | str) -> ShardingSpec:
    if isinstance(spec, ShardingSpec):
        return spec
    if isinstance(spec, str) and not spec.lstrip().startswith("{"):
        with open(spec) as f:
            spec = f.read()
    return ShardingSpec.from_json(spec)


def _read_info(storage: Storage) -> dict | None:
    raw = storage.read("info")
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SpecError(f"{storage.path('info')}: not valid JSON ({e})") from None


def spec_from_info(url: str) -> ShardingSpec:
    """The sharding spec of a store from ``<url>/info`` (skeleton, mesh, annotation layers), or
    from the scale of ``<url>/../info`` whose key is the last path component (volume scales)."""
    storage = open_storage(url)
    info = _read_info(storage)
    if info is not None:
        if not isinstance(info, dict) or "sharding" not in info:
            raise SpecError(f"{storage.path('info')}: has no 'sharding' member; give the spec "
                            "(spec= or --spec)")
        return ShardingSpec.from_json(info["sharding"])
    parent, _, key = str(url).rstrip("/").rpartition("/")
    parent_info = _read_info(open_storage(parent)) if parent else None
    for scale in (parent_info or {}).get("scales", []) if isinstance(parent_info, dict) else []:
        if isinstance(scale, dict) and scale.get("key") == key and "sharding" in scale:
            return ShardingSpec.from_json(scale["sharding"])
    raise SpecError(f"{storage.path('info')}: no info file with a sharding spec; give the spec "
                    "(spec= or --spec)")


class ShardedKV(MutableMapping):
    """uint64 -> bytes over a directory of shard files. Open with :func:`open_kv`.

    Reads see the staged changes; :meth:`commit` writes them shard by shard (see
    :func:`open_kv` for the modes and strategies).
    """

    def __init__(self, storage: Storage, spec: ShardingSpec, mode: str = "r", *,
                 strategy: str = "auto", compact_ratio: float | None = 0.5,
                 staged_bytes: int = DEFAULT_STAGED_BYTES, spill_dir: str | None = None,
                 cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if mode not in MODES:
            raise SpecError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if strategy not in STRATEGIES:
            raise SpecError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if strategy == "auto":
            strategy = "append" if storage.supports_append else "rewrite"
        if strategy == "append" and not storage.supports_append:
            raise SpecError(f"{storage.url}: strategy 'append' needs local files; use 'rewrite'")
        if mode == "r+" and not storage.list():
            raise FileNotFoundError(f"{storage.url}: no store here (mode 'a' or 'w' creates one)")
        self.storage, self.spec, self.mode = storage, spec, mode
        self.strategy, self.compact_ratio = strategy, compact_ratio
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, _Shard] = OrderedDict()
        self._cached_bytes = 0
        self._names: dict[int, str] = {}  # shard number -> file name, for single-key reads
        if spill_dir is None and isinstance(storage, LocalStorage) and mode != "r":
            # beside the shards: a spilled shard is then renamed into place, not copied
            os.makedirs(storage.root, exist_ok=True)
            spill_dir = storage.root
        if mode != "r":  # what killed writers left behind
            local = storage.root if isinstance(storage, LocalStorage) else None
            for folder in {spill_dir, local} - {None}:
                remove_stale(folder)
        self._staging = None if mode == "r" else Staging(spec, staged_bytes, spill_dir)

    def __repr__(self) -> str:
        return f"ShardedKV({self.storage.url!r}, mode={self.mode!r})"

    # --- shard and minishard indices ------------------------------------------------------

    def _forget(self, name: str) -> None:
        old = self._cache.pop(name, None)
        if old is not None:
            self._cached_bytes -= old.nbytes

    def _account(self, shard: _Shard, nbytes: int) -> None:
        shard.nbytes += nbytes
        self._cached_bytes += nbytes
        while self._cached_bytes > self.cache_bytes and len(self._cache) > 1:
            name = next(iter(self._cache))
            if name == shard.name:
                self._cache.move_to_end(name)
                name = next(iter(self._cache))
            self._forget(name)

    def _stats(self, names: list[str]) -> list[tuple[ObjectInfo, ObjectInfo | None] | None]:
        """For each shard: (info, None) of its file, (index info, data info) of an obsolete
        two-file shard, None if neither is there. Remote stats of a step go out together."""
        infos = self.storage.stat_many(names)
        missing = [i for i, info in enumerate(infos) if info is None]
        stems = [names[i][:-len(".shard")] for i in missing]
        index = self.storage.stat_many([f"{stem}.index" for stem in stems])
        have = [k for k, info in enumerate(index) if info is not None]
        data = self.storage.stat_many([f"{stems[k]}.data" for k in have])
        out: list = [(info, None) if info is not None else None for info in infos]
        for k, info in zip(have, data):
            if info is not None:
                out[missing[k]] = (index[k], info)
        return out

    def _shards(self, names: list[str]) -> dict[str, _Shard | None]:
        """The current state of each named shard (None: no such file), indices read as needed."""
        out: dict[str, _Shard | None] = {}
        todo = []
        stats = self._stats(names)
        for name, infos in zip(names, stats):
            cached = self._cache.get(name)
            generation = infos and (infos[0].generation if infos[1] is None
                                    else (infos[0].generation, infos[1].generation))
            if infos is None:
                self._forget(name)
                out[name] = None
            elif cached is not None and cached.generation == generation:
                self._cache.move_to_end(name)
                out[name] = cached
            else:
                self._forget(name)
                todo.append((name, infos, generation))
        if not todo:
            return out
        size = self.spec.shard_index_size
        index_names = [name if data is None else f"{name[:-6]}.index"
                       for name, (_, data), _ in todo]
        # The shard index, and where appends happen (local files), the end of the file,
        # where an append leaves its trailer.
        trailer = self.storage.supports_append

        def wanted(info: ObjectInfo) -> list[list[int]]:
            head = [[0, min(size, info.size)]]
            return head + [[max(0, info.size - TRAILER_SIZE), info.size]] if trailer else head

        reads = self.storage.read_ranges(
            [(n, wanted(info)) for n, (_, (info, _), _) in zip(index_names, todo)])
        for index_name, (name, (info, data), generation), (gen, chunks) in \
                zip(index_names, todo, reads):
            if chunks is None or (gen is not None and gen != info.generation):
                raise _StaleShard(name)
            total = info.size + (data.size if data is not None else 0)
            if data is not None and info.size != size:
                raise CorruptDataError(f"{self.storage.path(index_name)}: {info.size} bytes, "
                                       f"not the {size} of a shard index")
            ranges = codec.decode_shard_index(chunks[0], self.spec.num_minishards, total,
                                              self.storage.path(index_name))
            shard = _Shard(name, total, generation, ranges,
                           garbage=shardupdate.trailer_garbage(chunks[1], total)
                           if trailer else 0)
            if data is not None:
                shard.data_name, shard.data_shift = f"{name[:-6]}.data", size
                shard.data_generation = data.generation
            self._cache[name] = shard
            self._account(shard, ranges.nbytes)
            out[name] = shard
        return out

    def _read_through(self, wanted: list[tuple[_Shard, np.ndarray]]) -> list[list[bytes]]:
        """Read ``(shard, (n, 2) absolute ranges)`` past the shard indices, in one batch,
        checking each shard's bytes came from the generation its index was read from."""
        reads = self.storage.read_ranges(
            [(s.data_name, np.asarray(r, np.int64) - s.data_shift) for s, r in wanted])
        for (shard, ranges), (gen, chunks) in zip(wanted, reads):
            self._check_read(shard, ranges, gen, chunks)
        return [chunks for _, chunks in reads]

    def _load_minishards(self, wanted: list[tuple[_Shard, np.ndarray]]) -> None:
        """Read and decode the minishard indices not cached yet, in one batch."""
        todo = []
        for shard, minishards in wanted:
            missing = [m for m in np.unique(minishards).tolist() if m not in shard.minishards]
            empty = [m for m in missing if shard.ranges[m, 0] == shard.ranges[m, 1]]
            for m in empty:
                shard.minishards[m] = codec.EMPTY_MINISHARD
            missing = [m for m in missing if shard.ranges[m, 0] != shard.ranges[m, 1]]
            if missing:
                todo.append((shard, missing))
        if not todo:
            return
        reads = self._read_through([(shard, shard.ranges[missing]) for shard, missing in todo])

        def decode(job):
            (shard, missing), chunks = job
            path = self.storage.path(shard.name)
            return codec.decode_minishard_indices(
                chunks, self.spec.minishard_index_encoding, self.spec.shard_index_size,
                shard.size, lambda i: f"{path} (minishard {missing[i]} index at offset "
                                      f"{int(shard.ranges[missing[i], 0])})")

        # Threads pay off only on large indices; on small ones the GIL makes them cost.
        large = sum(len(c) for chunks in reads for c in chunks) > _PARALLEL_DECODE_BYTES
        jobs = zip(todo, reads)
        decoded = pmap(decode, jobs, min_items=2) if large else map(decode, jobs)
        for (shard, missing), indices in zip(todo, decoded):
            shard.minishards.update(zip(missing, indices))
            self._account(shard, sum(index.nbytes for index in indices))

    def _check_read(self, shard: _Shard, ranges: np.ndarray, gen: Any,
                    chunks: list[bytes] | None) -> None:
        """Raise _StaleShard if the bytes were not read from the shard's cached generation, and
        CorruptDataError if they were but the file ended early."""
        if chunks is None or (gen is not None and gen != shard.data_generation):
            self._forget(shard.name)
            raise _StaleShard(shard.name)
        wanted = (ranges[:, 1] - ranges[:, 0]).tolist()
        if list(map(len, chunks)) != wanted:
            i = next(i for i, c in enumerate(chunks) if len(c) != wanted[i])
            raise CorruptDataError(f"{self.storage.path(shard.name)}: bytes [{int(ranges[i, 0])}, "
                                   f"{int(ranges[i, 1])}) lie past the end of the file")

    def _retrying(self, fn, *args):
        """Run a read, again after each shard found changed under it; only a shard that keeps
        changing (another writer committing to it without pause) makes the read give up."""
        stale: Counter[str] | None = None
        while True:
            try:
                return fn(*args)
            except _StaleShard as e:
                name = str(e)
                self._forget(name)
                stale = stale or Counter()
                stale[name] += 1
                if stale[name] > _RETRIES:
                    raise NgShardError(f"{self.storage.path(name)}: changed {_RETRIES} times "
                                       f"during one read") from None

    # --- reads -----------------------------------------------------------------------------

    def _lookup(self, keys: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, _Shard]]:
        """For unique keys: per shard name, an (n, 3) array of (key, start, end) found there."""
        shard_nums, minishards = self.spec.locate(keys)
        order = np.argsort(shard_nums, kind="stable")
        shard_nums, minishards, keys = shard_nums[order], minishards[order], keys[order]
        bounds = np.flatnonzero(np.diff(shard_nums)) + 1
        groups = np.split(np.arange(len(keys)), bounds) if len(keys) else []
        names = [self.spec.shard_filename(int(shard_nums[g[0]])) for g in groups]
        states = self._shards(names)
        present = [(states[n], g) for n, g in zip(names, groups) if states[n] is not None]
        self._load_minishards([(s, minishards[g]) for s, g in present])
        found: dict[str, np.ndarray] = {}
        for shard, g in present:
            # One sorted table of the needed minishards, then one search for all keys.
            needed = np.unique(minishards[g]).tolist()
            parts = [shard.minishards[m] for m in needed]
            table = codec.MinishardIndex(*(np.concatenate(col) for col in zip(*parts)))
            owner = np.repeat(needed, [len(p.keys) for p in parts]).astype(np.uint64)
            order = np.argsort(table.keys, kind="stable")
            table = codec.MinishardIndex(*(col[order] for col in table))
            hit, pos = table.find(keys[g])
            # a key counts only in its own minishard
            hit[hit] = owner[order][pos[hit]] == minishards[g][hit]
            p = pos[hit]
            found[shard.name] = np.stack(
                [keys[g][hit], table.starts[p], table.starts[p] + table.sizes[p]], axis=1)
        return found, {s.name: s for s, _ in present}

    def _get_many(self, keys: np.ndarray) -> dict[int, bytes | memoryview]:
        found, shards = self._lookup(keys)
        reads = self._read_through([(shards[name], rows[:, 1:]) for name, rows in found.items()])
        out: dict[int, bytes | memoryview] = {}
        encoding = self.spec.data_encoding
        for (name, rows), chunks in zip(found.items(), reads):
            where = self.storage.path(name)
            keys = rows[:, 0].tolist()
            if encoding != "raw":  # decompression releases the GIL: spread it over threads
                chunks = pmap(lambda job, where=where: codec.decode(
                    job[2], encoding, f"{where} (chunk {job[0]} at {job[1]})"),
                    zip(keys, rows[:, 1].tolist(), chunks))
            out.update(zip(keys, chunks))
        return out

    def get_many(self, keys: Iterable[int] | np.ndarray, *, copy: bool = True
                 ) -> dict[int, bytes | memoryview]:
        """Values of many keys at once, as {key: value}; absent keys are left out.

        ``copy=False`` may return memoryviews into the batch's read buffers instead of bytes,
        saving a copy of every value (they keep those buffers alive)."""
        keys = np.unique(as_key_array(keys))
        out: dict[int, bytes | memoryview] = {}
        if self._staging:
            staged = self._staging.lookup_many(keys)
            out.update((k, v) for k, v in staged.items() if v is not None)
            keys = keys[~codec.member(keys, np.sort(np.fromiter(staged, np.uint64,
                                                                 len(staged))))]
        if self.mode != "w":
            out.update(self._retrying(self._get_many, keys))
        if copy:
            out = {k: v if type(v) is bytes else bytes(v) for k, v in out.items()}
        return out

    def _find_one(self, key: int) -> tuple[_Shard, int, int] | None:
        """(shard, start, end) of one key's chunk, None if absent: the single-key fast path."""
        shard_num, m = self.spec.locate_one(key)
        name = self._names.get(shard_num) or self._names.setdefault(
            shard_num, self.spec.shard_filename(shard_num))
        # Where reads report the generation they saw (local files), a cached index is used
        # without a stat first: a hit is confirmed by the read of its data, a miss by a stat.
        shard = self._cache.get(name) if self.storage.reads_report_generation else None
        fresh = shard is None
        if fresh:
            shard = self._shards([name])[name]
            if shard is None:
                return None
        index = shard.minishards.get(m)
        if index is None:
            self._load_minishards([(shard, np.array([m]))])
            index = shard.minishards[m]
        k = np.uint64(key)
        pos = int(index.keys.searchsorted(k))
        if pos == len(index.keys) or index.keys[pos] != k:
            if not fresh and self._shards([name])[name] is not shard:
                raise _StaleShard(name)
            return None
        start = int(index.starts[pos])
        return shard, start, start + int(index.sizes[pos])

    def _get_one(self, key: int) -> bytes | None:
        found = self._find_one(key)
        if found is None:
            return None
        shard, start, end = found
        shift = shard.data_shift
        gen, chunk = self.storage.read_range(shard.data_name, start - shift, end - shift)
        if chunk is None or len(chunk) != end - start or gen != shard.data_generation:
            self._check_read(shard, np.array([[start, end]]), gen,
                             None if chunk is None else [chunk])
        if self.spec.data_encoding == "raw":
            return chunk
        return codec.decode(chunk, self.spec.data_encoding,
                            f"{self.storage.path(shard.name)} (chunk {key} at {start})")

    def __getitem__(self, key: int) -> bytes:
        k = check_key(key)
        if self._staging:
            staged, value = self._staging.lookup(k)
            if staged:
                if value is None:
                    raise KeyError(key)
                return value
        value = None if self.mode == "w" else self._retrying(self._get_one, k)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        k = check_key(key)
        if self._staging:
            staged, value = self._staging.lookup(k)
            if staged:
                return value is not None
        if self.mode == "w":
            return False
        if self.storage.reads_report_generation:  # a cached hit must be confirmed by a stat
            self._retrying(self._shards, [self.spec.shard_filename(self.spec.locate_one(k)[0])])
        return self._retrying(self._find_one, k) is not None

    # --- listing ---------------------------------------------------------------------------

    def shard_names(self) -> list[str]:
        """Names of the shards present, in shard order (an obsolete two-file shard is listed
        under the name of the single file it stands for)."""
        names = set(self.storage.list())
        split = {f"{n[:-6]}.shard" for n in names
                 if n.endswith(".index") and f"{n[:-6]}.data" in names}
        return sorted(n for n in names | split if self.spec.parse_shard_filename(n) is not None)

    def _shard_keys(self, names: list[str]) -> dict[str, np.ndarray]:
        out = {}
        for shard in self._full_shards(names):
            parts = [idx.keys for idx in shard.minishards.values() if len(idx.keys)]
            out[shard.name] = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
        return out

    def _full_shards(self, names: list[str]) -> list[_Shard]:
        """The named shards that exist, with every minishard index loaded."""
        present = [s for s in self._shards(names).values() if s is not None]
        everything = np.arange(self.spec.num_minishards)
        self._load_minishards([(s, everything[s.ranges[:, 0] != s.ranges[:, 1]])
                               for s in present])
        return present

    def keys_array(self) -> np.ndarray:
        """All keys as a uint64 array: stored keys sorted by shard and key, then staged
        additions. Reads only the shard and minishard indices (one batched read each)."""
        stored = np.zeros(0, np.uint64)
        if self.mode != "w":
            by_shard = self._retrying(self._shard_keys, self.shard_names())
            if by_shard:
                stored = np.concatenate(list(by_shard.values()))
        if not self._staging:
            return stored
        staged, lengths = self._staging.status()
        stored = stored[~codec.member(stored, staged)]
        return np.concatenate([stored, staged[lengths != DELETED]])

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys_array().tolist())

    def __len__(self) -> int:
        return len(self.keys_array())

    def stats(self) -> list[dict]:
        """Per shard file present: name, size in bytes, number of keys, garbage fraction."""
        shards = self._retrying(self._full_shards, self.shard_names())
        out = []
        for s in shards:
            live = shardupdate.live_bytes(self.spec, s.ranges, s.minishards)
            out.append({"name": s.name, "bytes": s.size,
                        "keys": sum(len(i.keys) for i in s.minishards.values()),
                        "garbage": 1 - live / s.size if s.size else 0.0})
        return out

    # --- staged changes ----------------------------------------------------------------------

    def _writable(self) -> Staging:
        if self._staging is None:
            raise ReadOnlyError(f"{self.storage.url}: store is open read-only (mode {self.mode!r})")
        return self._staging

    def __setitem__(self, key: int, value: bytes) -> None:
        self._writable().set(check_key(key), _as_bytes(value, key))

    def __delitem__(self, key: int) -> None:
        staging = self._writable()
        k = check_key(key)
        if k not in self:
            raise KeyError(key)
        staging.set(k, None)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        """Stage many values (a mapping or (key, value) pairs) at once."""
        staging = self._writable()
        if kwargs:
            raise TypeError("keys must be integers, not keyword arguments")
        for keys, values in _batches(other):
            staging.set_many(keys, values)

    def abort(self) -> None:
        """Drop the staged changes; the store is left as it was."""
        if self._staging is not None:
            self._staging.clear()

    # --- commit ------------------------------------------------------------------------------

    def plan(self) -> CommitPlan:
        """What :meth:`commit` would do to each shard, decided from the indices alone."""
        staging = self._writable()
        keys, lengths = staging.status()
        nums = self.spec.locate(keys)[0].astype(np.int64) if len(keys) else np.zeros(0, int)
        order = np.argsort(nums, kind="stable")  # by shard, keys still sorted within
        shards, first = np.unique(nums[order], return_index=True)
        groups = dict(zip(shards.tolist(), np.split(order, first[1:])))
        plans = []
        if self.mode == "w":
            for num, group in groups.items():
                sets = lengths[group][lengths[group] != DELETED]
                if len(sets):
                    plans.append(ShardPlan(self.spec.shard_filename(num), num, "create",
                                           sets=len(sets), keys_after=len(sets),
                                           write_bytes=int(sets.sum())))
            planned = {p.name for p in plans}
            plans += [ShardPlan(n, self.spec.parse_shard_filename(n), "delete")
                      for n in self.shard_names() if n not in planned]
            return CommitPlan(self.storage.url, self.strategy, sorted(plans, key=_by_shard),
                              staging.version)
        names = {num: self.spec.shard_filename(num) for num in groups}
        self._retrying(self._shards, list(names.values()))  # all shard indices in one batch
        for num, name in names.items():
            group = groups[num]
            plan = self._retrying(self._plan_shard, name, num, keys[group], lengths[group])
            if plan is not None:
                plans.append(plan)
        return CommitPlan(self.storage.url, self.strategy, plans, staging.version)

    def _plan_shard(self, name: str, num: int, keys: np.ndarray, lengths: np.ndarray
                    ) -> ShardPlan | None:
        """Decide one shard's action from its shard index and its touched minishards only."""
        shard = self._shards([name])[name]
        is_set = lengths != DELETED
        new_bytes = int(lengths[is_set].sum())
        if shard is None:
            if not is_set.any():
                return None  # only deletions of keys that are not there
            return ShardPlan(name, num, "create", sets=int(is_set.sum()),
                             keys_after=int(is_set.sum()), write_bytes=new_bytes)
        touched = np.unique(self.spec.locate(keys)[1]).astype(np.intp)
        self._load_minishards([(shard, touched)])
        entries = shardupdate.Entries.of({m: shard.minishards[m] for m in touched.tolist()})
        present = codec.member(keys, np.sort(entries.keys))
        deletes = int((present & ~is_set).sum())
        touched_after = len(entries.keys) - deletes + int((is_set & ~present).sum())
        others = np.ones(self.spec.num_minishards, bool)
        others[touched] = False
        other_ranges = shard.ranges[others]
        known = all(m in shard.minishards for m in np.flatnonzero(
            others & (shard.ranges[:, 0] != shard.ranges[:, 1])).tolist())
        keys_after = touched_after + sum(len(shard.minishards[m].keys) for m in
                                         np.flatnonzero(others).tolist()
                                         if m in shard.minishards) if known else None
        base = dict(sets=int(is_set.sum()), deletes=deletes, keys_after=keys_after,
                    size_before=shard.size, generation=shard.generation)
        new_index = 24 * touched_after  # counted raw (gzip only shrinks)
        old_index = int((shard.ranges[touched, 1] - shard.ranges[touched, 0]).sum())
        dropped = int(entries.sizes[codec.member(entries.keys, keys)].sum())
        live_after = shard.size - shard.garbage - dropped - old_index + new_bytes + new_index
        if shard.split:  # readers and writers then deal with one file, as with any other
            return ShardPlan(name, num, "convert", read_bytes=shard.size,
                             write_bytes=live_after, **base)
        if touched_after == 0 and (other_ranges[:, 0] == other_ranges[:, 1]).all():
            return ShardPlan(name, num, "delete", **dict(base, keys_after=0))
        # Both strategies add the changes after the old bytes (in place, or in a copy) and
        # leave the replaced ones as garbage, until it passes compact_ratio.
        size_after = shard.size + new_bytes + new_index + shardupdate.TRAILER_SIZE
        garbage = 1 - live_after / size_after
        if self.compact_ratio is not None and garbage > self.compact_ratio:
            return ShardPlan(name, num, "compact", read_bytes=shard.size,
                             write_bytes=live_after, **base)
        if self.strategy == "rewrite":
            return ShardPlan(name, num, "rewrite", read_bytes=shard.size,
                             write_bytes=size_after, garbage_after=garbage, **base)
        return ShardPlan(name, num, "append", garbage_after=garbage,
                         write_bytes=size_after - shard.size + self.spec.shard_index_size,
                         **base)

    def commit(self, plan: CommitPlan | None = None, *, progress: bool = False) -> CommitPlan:
        """Apply the staged changes shard by shard, following ``plan`` (by default a fresh
        :meth:`plan`); returns the plan.

        Each shard file is replaced atomically (create, rewrite, compact) or appended to and
        then patched (append), so a crash leaves every shard readable, old or new. A shard that
        changed on storage since the plan was made raises ConflictError before it is written.
        """
        staging = self._writable()
        if plan is None:
            plan = self.plan()
        elif plan.staged_version != staging.version:
            raise NgShardError("the staged changes have changed since this plan was made; "
                               "make a new plan")
        by_shard = {p.shard: p for p in plan.shards}

        def jobs() -> Iterator[tuple]:
            # Runs in this thread, lazily: one shard's changes in memory per job in flight.
            for changes in staging.iter_changes():
                p = by_shard.pop(changes.shard, None)
                if p is not None:
                    yield p, changes, self._append_base(p, changes)
            yield from ((p, None, None) for p in list(by_shard.values()))  # "w": removals

        # Spilled changes are larger than memory: write them one shard at a time, unless each
        # shard is made from its spill file without reading it (new raw shards).
        loads_spills = staging.spilled and (self.mode != "w" or self.spec.data_encoding != "raw")
        in_flight = 1 if loads_spills else 2 * WORKERS
        if staging.spilled:
            staging.spill()
        for _ in tqdm(bounded_map(lambda job: self._apply(*job), jobs(), in_flight),
                      total=len(plan.shards), desc="committing shards", unit="shard",
                      disable=not progress):
            pass
        staging.clear()
        for p in plan.shards:
            self._forget(p.name)
        if self.mode == "w":
            self.mode = "a"  # the store exists now: later commits update it
        return plan

    def _append_base(self, plan: ShardPlan, changes: ShardChanges) -> _Shard | None:
        """For an append or rewrite: the shard as planned, with the indices of the touched
        minishards."""
        if plan.action not in ("append", "rewrite"):
            return None
        shard = self._retrying(self._shards, [plan.name])[plan.name]
        if shard is None or shard.generation != plan.generation:
            raise ConflictError(f"{self.storage.path(plan.name)}: changed on storage since the "
                                f"commit was planned (another writer?)")
        touched = self.spec.locate(changes.keys)[1]
        self._load_minishards([(shard, touched)])
        return _Shard(shard.name, shard.size, shard.generation, shard.ranges,
                      {m: shard.minishards[m] for m in np.unique(touched).tolist()},
                      garbage=shard.garbage)

    def _apply(self, plan: ShardPlan, changes: ShardChanges | None, base: _Shard | None
               ) -> None:
        """Carry out one shard's plan (in a job thread: touches storage, not the caches)."""
        name, storage = plan.name, self.storage
        check = ANY if self.mode == "w" else plan.generation
        if self.mode == "w":  # a new store: no obsolete two-file shard of that number either
            for legacy in (f"{name[:-6]}.index", f"{name[:-6]}.data"):
                storage.delete(legacy)
        if plan.action == "delete":
            storage.delete(name, if_generation=check)
            return
        keys, deleted = changes.keys, changes.deleted
        if plan.action == "create" and changes.source is not None and \
                self.spec.data_encoding == "raw":  # a spilled shard: its file is the data
            storage.write(name, shardupdate.shard_from_file(
                self.spec, keys, changes.lengths.astype(np.uint64), deleted, changes.source,
                changes.offsets), if_generation=check)
            return
        values = changes.values
        if self.spec.data_encoding != "raw":
            encoding = self.spec.data_encoding
            values = pmap(lambda v: None if v is None else codec.encode(v, encoding), values)
        where = storage.path(name)
        old = None
        if plan.action in ("rewrite", "compact"):
            old = self._read_whole([name], [plan.size_before], [plan.generation], where)[0]
        elif plan.action == "convert":  # the pair's bytes are those of the one file
            pair = [f"{name[:-6]}.index", f"{name[:-6]}.data"]
            index_size = self.spec.shard_index_size
            old = b"".join(self._read_whole(pair, [index_size, plan.size_before - index_size],
                                            plan.generation, where))
        if plan.action in ("append", "rewrite"):
            update = shardupdate.append_update(self.spec, base.size, base.garbage, base.ranges,
                                               base.minishards, keys, values, deleted)
            if update.empty:
                storage.delete(name, if_generation=plan.generation)
            elif plan.action == "append":
                storage.append_and_patch(name, plan.generation, update.offset, update.tail,
                                         update.index)
            else:  # the same bytes as an append would leave, written as a new object
                storage.write(name, [update.index, memoryview(old)[len(update.index):],
                                     *update.tail], if_generation=plan.generation)
            return
        parts = shardupdate.rewrite_shard(self.spec, old, keys, values, deleted, where)
        if plan.action == "convert":
            if parts is not None:  # first the new file (readers prefer it), then the pair
                storage.write(name, parts, if_generation=None)
            for legacy, generation in zip(reversed(pair), reversed(plan.generation)):
                storage.delete(legacy, if_generation=generation)
        elif parts is None:
            storage.delete(name, if_generation=check)
        else:
            storage.write(name, parts, if_generation=check)

    def _read_whole(self, names: list[str], sizes: list[int], generations: list[Any],
                    where: str) -> list[bytes | memoryview]:
        """The first ``sizes`` bytes of objects that must still have ``generations``."""
        reads = self.storage.read_ranges([(n, np.array([[0, size]]))
                                          for n, size in zip(names, sizes)])
        for (gen, chunks), generation in zip(reads, generations):
            if chunks is None or (gen is not None and gen != generation):
                raise ConflictError(f"{where}: changed on storage since the commit was planned "
                                    f"(another writer?)")
        return [chunks[0] for _, chunks in reads]

    def compact(self, names: Iterable[str] | None = None, *, progress: bool = False
                ) -> CommitPlan:
        """Rewrite shards without the garbage of earlier appends (all shards with garbage by
        default, or the named ones). Nothing else may be staged."""
        staging = self._writable()
        if staging:
            raise NgShardError(f"{self.storage.url}: commit or abort staged changes before "
                               f"compacting")
        names = self.shard_names() if names is None else list(names)
        plans = []
        for shard in self._retrying(self._full_shards, names):
            live = shardupdate.live_bytes(self.spec, shard.ranges, shard.minishards)
            if live < shard.size:
                plans.append(ShardPlan(shard.name, self.spec.parse_shard_filename(shard.name),
                                       "compact", keys_after=sum(
                                           len(i.keys) for i in shard.minishards.values()),
                                       read_bytes=shard.size, write_bytes=live,
                                       size_before=shard.size, generation=shard.generation,
                                       garbage_after=0.0))
        none = ShardChanges(0, np.zeros(0, np.uint64), np.zeros(0, np.int64), [])
        for _ in tqdm(bounded_map(lambda p: self._apply(p, none, None), plans),
                      total=len(plans), desc="compacting", unit="shard", disable=not progress):
            pass
        for p in plans:
            self._forget(p.name)
        return CommitPlan(self.storage.url, "compact", plans)

    def close(self) -> None:
        """Drop the caches and any staged changes not committed."""
        self._cache.clear()
        self._cached_bytes = 0
        if self._staging is not None:
            self._staging.clear()

    def __enter__(self) -> ShardedKV:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._staging is not None and exc_type is None:
            self.commit()
        self.close()


def _by_shard(plan: ShardPlan) -> int:
    return plan.shard


def _as_bytes(value: Any, key: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"value of key {key} must be bytes, got {type(value).__name__}")


_BATCH = 1 << 16


def _batches(items: Mapping[int, bytes] | Iterable[tuple[int, bytes]]
             ) -> Iterator[tuple[np.ndarray, list[bytes]]]:
    """(keys, values) in batches, keys checked and converted at numpy speed."""
    if isinstance(items, Mapping):
        chunks = [(list(items.keys()), list(items.values()))]
    else:
        it = iter(items)
        first, second = operator.itemgetter(0), operator.itemgetter(1)
        chunks = ((list(map(first, batch)), list(map(second, batch)))
                  for batch in iter(lambda: list(itertools.islice(it, _BATCH)), []))
    for keys, values in chunks:
        if not set(map(type, values)) <= {bytes}:
            values = [_as_bytes(v, k) for k, v in zip(keys, values)]
        yield as_key_array(keys), values


def open_kv(url: str | os.PathLike, spec: ShardingSpec | dict | str | None = None,
            mode: str = "r", *, strategy: str = "auto", compact_ratio: float | None = 0.5,
            staged_bytes: int = DEFAULT_STAGED_BYTES, spill_dir: str | None = None,
            cache_bytes: int = DEFAULT_CACHE_BYTES) -> ShardedKV:
    """Open the sharded key-value store at ``url`` (a local path or any fsspec URL).

    ``spec`` is a :class:`ShardingSpec`, its JSON (object, text or file name), or None to read
    the ``sharding`` member of ``<url>/info``. Modes: "r" read only; "r+" update an existing
    store; "a" update, creating the store if needed; "w" create a new store (the shard files
    already there are removed on commit). Changes are staged (spilling past ``staged_bytes`` to
    ``spill_dir``) and written by ``commit()`` or on clean exit of a ``with`` block.

    ``strategy``: "append" (local files: append changes and patch the shard index; cost
    follows the change, not the shard), "rewrite" (read, merge, replace whole shards; object
    stores), or "auto". Appending leaves garbage; a shard whose garbage would pass
    ``compact_ratio`` is compacted instead (None: never).

    >>> with open_kv("memory://doc-kv", {"@type": "neuroglancer_uint64_sharded_v1",
    ...              "hash": "identity", "preshift_bits": 0, "minishard_bits": 1,
    ...              "shard_bits": 1}, mode="w") as kv:
    ...     kv[7] = b"seven"
    >>> open_kv("memory://doc-kv", kv.spec)[7]
    b'seven'
    """
    url = os.fspath(url)
    if spec is None:
        if mode == "w":
            raise SpecError("mode 'w' needs a sharding spec")
        spec = spec_from_info(url)
    return ShardedKV(open_storage(url), _as_spec(spec), mode, strategy=strategy,
                     compact_ratio=compact_ratio, staged_bytes=staged_bytes,
                     spill_dir=spill_dir, cache_bytes=cache_bytes)


def write_kv(url: str | os.PathLike, spec: ShardingSpec | dict | str,
             items: Mapping[int, bytes] | Iterable[tuple[int, bytes]], *,
             progress: bool = False, buffer_bytes: int = DEFAULT_BUFFER_BYTES,
             spill_dir: str | None = None) -> None:
    """Write a whole store at ``url`` from a mapping or an iterable of (key, bytes).

    The store then holds exactly ``items`` (the last value of a repeated key): shard files of
    an earlier store there are replaced or removed, each atomically. Items may be more than
    memory: past ``buffer_bytes`` they are partitioned by shard into temporary files (in
    ``spill_dir``), and each shard is built from its partition, so memory stays bounded by the
    buffer plus the largest shard.
    """
    kv = open_kv(url, spec, "w", staged_bytes=buffer_bytes, spill_dir=spill_dir)
    try:
        kv.update(items)
        kv.commit(progress=progress)
    finally:
        kv.close()
