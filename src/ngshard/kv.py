"""ShardedKV: a MutableMapping from uint64 keys to bytes over the shard files of one directory.

Reads are batched: a batch of keys costs one read per shard index, one per group of nearby
minishard indices and one per group of nearby chunks, all issued together. Shard and minishard
indices are cached (bounded by bytes) and tied to the shard file's generation, so a shard that is
replaced under an open store is read again rather than at stale offsets.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from . import codec
from .errors import CorruptDataError, NgShardError, ReadOnlyError, SpecError
from .spec import ShardingSpec, as_key_array, check_key
from .storage import Storage, open_storage
from .threads import pmap

DEFAULT_CACHE_BYTES = 256 << 20
_RETRIES = 3  # a shard replaced this many times during one read is an error, not a race
MODES = ("r", "w")


@dataclass
class _Shard:
    """What is cached of one shard file: its index and the minishard indices decoded so far."""

    name: str
    size: int
    generation: Any
    ranges: np.ndarray  # (num_minishards, 2) absolute [start, end) of each minishard index
    minishards: dict[int, codec.MinishardIndex] = field(default_factory=dict)
    nbytes: int = 0


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

    Mode "r" reads; mode "w" creates a store: writes are collected in memory and written as
    complete shard files by :meth:`commit` (or on clean exit of a ``with`` block), replacing
    whatever shards were there.
    """

    def __init__(self, storage: Storage, spec: ShardingSpec, mode: str = "r", *,
                 cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if mode not in MODES:
            raise SpecError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.storage, self.spec, self.mode = storage, spec, mode
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, _Shard] = OrderedDict()
        self._cached_bytes = 0
        self._names: dict[int, str] = {}  # shard number -> file name, for single-key reads
        self._staged: dict[int, bytes] | None = {} if mode == "w" else None

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

    def _shards(self, names: list[str]) -> dict[str, _Shard | None]:
        """The current state of each named shard (None: no such file), indices read as needed."""
        out: dict[str, _Shard | None] = {}
        todo = []
        for name in names:
            info = self.storage.stat(name)
            cached = self._cache.get(name)
            if info is None:
                self._forget(name)
                out[name] = None
            elif cached is not None and cached.generation == info.generation:
                self._cache.move_to_end(name)
                out[name] = cached
            else:
                self._forget(name)
                todo.append((name, info))
        if not todo:
            return out
        size = self.spec.shard_index_size
        reads = self.storage.read_ranges(
            [(name, [[0, min(size, info.size)]]) for name, info in todo])
        for (name, info), (gen, chunks) in zip(todo, reads):
            if chunks is None or (gen is not None and gen != info.generation):
                raise _StaleShard(name)
            ranges = codec.decode_shard_index(chunks[0], self.spec.num_minishards, info.size,
                                              self.storage.path(name))
            shard = _Shard(name, info.size, info.generation, ranges)
            self._cache[name] = shard
            self._account(shard, ranges.nbytes)
            out[name] = shard
        return out

    def _load_minishards(self, wanted: list[tuple[_Shard, np.ndarray]]) -> None:
        """Read and decode the minishard indices not cached yet, in one batch."""
        requests, todo = [], []
        for shard, minishards in wanted:
            missing = [m for m in np.unique(minishards).tolist() if m not in shard.minishards]
            empty = [m for m in missing if shard.ranges[m, 0] == shard.ranges[m, 1]]
            for m in empty:
                shard.minishards[m] = codec.EMPTY_MINISHARD
            missing = [m for m in missing if shard.ranges[m, 0] != shard.ranges[m, 1]]
            if missing:
                requests.append((shard.name, shard.ranges[missing]))
                todo.append((shard, missing))
        if not requests:
            return
        reads = self.storage.read_ranges(requests)
        for (shard, _), (_, ranges), (gen, chunks) in zip(todo, requests, reads):
            self._check_read(shard, ranges, gen, chunks)

        def decode(job):
            (shard, missing), (_, chunks) = job
            path = self.storage.path(shard.name)
            return codec.decode_minishard_indices(
                chunks, self.spec.minishard_index_encoding, self.spec.shard_index_size,
                shard.size, lambda i: f"{path} (minishard {missing[i]} index at offset "
                                      f"{int(shard.ranges[missing[i], 0])})")

        for (shard, missing), indices in zip(todo, pmap(decode, zip(todo, reads), min_items=2)):
            shard.minishards.update(zip(missing, indices))
            self._account(shard, sum(index.nbytes for index in indices))

    def _check_read(self, shard: _Shard, ranges: np.ndarray, gen: Any,
                    chunks: list[bytes] | None) -> None:
        """Raise _StaleShard if the bytes were not read from the shard's cached generation, and
        CorruptDataError if they were but the file ended early."""
        if chunks is None or (gen is not None and gen != shard.generation):
            self._forget(shard.name)
            raise _StaleShard(shard.name)
        wanted = (ranges[:, 1] - ranges[:, 0]).tolist()
        if list(map(len, chunks)) != wanted:
            i = next(i for i, c in enumerate(chunks) if len(c) != wanted[i])
            raise CorruptDataError(f"{self.storage.path(shard.name)}: bytes [{int(ranges[i, 0])}, "
                                   f"{int(ranges[i, 1])}) lie past the end of the file")

    def _retrying(self, fn, *args):
        for _ in range(_RETRIES):
            try:
                return fn(*args)
            except _StaleShard as e:
                self._forget(str(e))
        raise NgShardError(f"{self.storage.url}: shard files kept changing during the read")

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

    def _get_many(self, keys: np.ndarray) -> dict[int, bytes]:
        found, shards = self._lookup(keys)
        requests = [(name, rows[:, 1:].astype(np.int64)) for name, rows in found.items()]
        out: dict[int, bytes] = {}
        encoding = self.spec.data_encoding
        for (name, rows), (gen, chunks) in zip(found.items(), self.storage.read_ranges(requests)):
            self._check_read(shards[name], rows[:, 1:], gen, chunks)
            where = self.storage.path(name)
            if encoding == "raw":
                out.update(zip(rows[:, 0].tolist(), chunks))
            else:
                for key, start, chunk in zip(rows[:, 0].tolist(), rows[:, 1].tolist(), chunks):
                    out[key] = codec.decode(chunk, encoding, f"{where} (chunk {key} at {start})")
        return out

    def get_many(self, keys: Iterable[int] | np.ndarray) -> dict[int, bytes]:
        """Values of many keys at once, as {key: value}; absent keys are left out."""
        keys = np.unique(as_key_array(keys))
        if self._staged is not None:
            return {k: self._staged[k] for k in keys.tolist() if k in self._staged}
        return self._retrying(self._get_many, keys)

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
        gen, chunk = self.storage.read_range(shard.name, start, end)
        if chunk is None or len(chunk) != end - start or gen != shard.generation:
            self._check_read(shard, np.array([[start, end]]), gen,
                             None if chunk is None else [chunk])
        if self.spec.data_encoding == "raw":
            return chunk
        return codec.decode(chunk, self.spec.data_encoding,
                            f"{self.storage.path(shard.name)} (chunk {key} at {start})")

    def __getitem__(self, key: int) -> bytes:
        k = check_key(key)
        if self._staged is not None:
            return self._staged[k]
        value = self._retrying(self._get_one, k)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        k = check_key(key)
        if self._staged is not None:
            return k in self._staged
        if self.storage.reads_report_generation:  # a cached hit must be confirmed by a stat
            self._retrying(self._shards, [self.spec.shard_filename(self.spec.locate_one(k)[0])])
        return self._retrying(self._find_one, k) is not None

    # --- listing ---------------------------------------------------------------------------

    def shard_names(self) -> list[str]:
        """Names of the shard files present, in shard order."""
        return [n for n in self.storage.list() if self.spec.parse_shard_filename(n) is not None]

    def _shard_keys(self, names: list[str]) -> dict[str, np.ndarray]:
        states = self._shards(names)
        present = [s for s in states.values() if s is not None]
        everything = np.arange(self.spec.num_minishards)
        self._load_minishards([(s, everything[s.ranges[:, 0] != s.ranges[:, 1]])
                               for s in present])
        out = {}
        for s in present:
            parts = [idx.keys for idx in s.minishards.values() if len(idx.keys)]
            out[s.name] = np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
        return out

    def keys_array(self) -> np.ndarray:
        """All keys in the store as a uint64 array, sorted by shard and then key.

        Reads only the shard and minishard indices (one batched read of each per shard).
        """
        if self._staged is not None:
            return np.array(sorted(self._staged), np.uint64)
        by_shard = self._retrying(self._shard_keys, self.shard_names())
        return np.concatenate(list(by_shard.values())) if by_shard else np.zeros(0, np.uint64)

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys_array().tolist())

    def __len__(self) -> int:
        return len(self.keys_array())

    def stats(self) -> list[dict]:
        """Per shard file present: name, size in bytes, number of keys."""
        names = self.shard_names()
        counts = self._retrying(self._shard_keys, names)
        return [{"name": n, "bytes": self._cache[n].size if n in self._cache
                 else self.storage.stat(n).size, "keys": len(counts.get(n, ()))} for n in names]

    # --- writes ----------------------------------------------------------------------------

    def _writable(self) -> dict[int, bytes]:
        if self._staged is None:
            raise ReadOnlyError(f"{self.storage.url}: store is open read-only (mode {self.mode!r})")
        return self._staged

    def __setitem__(self, key: int, value: bytes) -> None:
        self._writable()[check_key(key)] = _as_bytes(value, key)

    def __delitem__(self, key: int) -> None:
        del self._writable()[check_key(key)]

    def commit(self, *, progress: bool = False) -> None:
        """Write the collected keys as a complete store (mode "w")."""
        staged = self._writable()
        keys = np.fromiter(staged.keys(), np.uint64, count=len(staged))
        _write_store(self.storage, self.spec, keys, list(staged.values()), progress=progress)
        self._cache.clear()
        self._cached_bytes = 0

    def abort(self) -> None:
        """Drop the collected writes."""
        if self._staged is not None:
            self._staged.clear()

    def close(self) -> None:
        self._cache.clear()
        self._cached_bytes = 0

    def __enter__(self) -> ShardedKV:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._staged is not None:
            if exc_type is None:
                self.commit()
            else:
                self.abort()
        self.close()


def _as_bytes(value: Any, key: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"value of key {key} must be bytes, got {type(value).__name__}")


def _collect(items: Mapping[int, bytes] | Iterable[tuple[int, bytes]]
             ) -> tuple[np.ndarray, list[bytes]]:
    if isinstance(items, Mapping):
        keys, values = list(items.keys()), list(items.values())
    else:
        pairs = list(items)
        keys = [p[0] for p in pairs]
        values = [p[1] for p in pairs]
    if not set(map(type, values)) <= {bytes}:
        values = [_as_bytes(v, k) for k, v in zip(keys, values)]
    return as_key_array(keys), values


def _write_store(storage: Storage, spec: ShardingSpec, keys: np.ndarray, values: list[bytes],
                 *, progress: bool = False) -> None:
    """Write ``keys``/``values`` as complete shard files and remove every other shard file.

    On duplicate keys the last value wins. Output is deterministic: chunks sorted by minishard
    and key, data before the minishard indices.
    """
    shard_nums, minishards = spec.locate(keys)
    order = np.lexsort((keys, minishards, shard_nums))  # stable: equal keys keep input order
    keys, shard_nums, minishards = keys[order], shard_nums[order], minishards[order]
    last = np.ones(len(keys), bool)
    last[:-1] = keys[1:] != keys[:-1]
    keys, shard_nums, minishards = keys[last], shard_nums[last], minishards[last]
    ordered = list(map(values.__getitem__, order[last].tolist()))
    with ThreadPoolExecutor(max_workers=min(8, 2 * (os.cpu_count() or 1))) as pool:
        if spec.data_encoding == "gzip":
            ordered = list(pool.map(codec.gzip_compress, ordered, chunksize=256))
        bounds = np.flatnonzero(np.diff(shard_nums)) + 1
        starts = np.r_[0, bounds].astype(int) if len(keys) else np.zeros(0, int)
        ends = np.r_[bounds, len(keys)].astype(int) if len(keys) else np.zeros(0, int)

        def write_shard(a: int, b: int) -> str:
            name = spec.shard_filename(int(shard_nums[a]))
            parts = codec.encode_shard(minishards[a:b], keys[a:b], ordered[a:b],
                                       spec.num_minishards, spec.minishard_index_encoding)
            storage.write(name, parts)
            return name

        jobs = pool.map(write_shard, starts.tolist(), ends.tolist())
        written = set(tqdm(jobs, total=len(starts), desc="writing shards", unit="shard",
                           disable=not progress))
    for name in storage.list():
        if name not in written and spec.parse_shard_filename(name) is not None:
            storage.delete(name)


def open_kv(url: str | os.PathLike, spec: ShardingSpec | dict | str | None = None,
            mode: str = "r", *, cache_bytes: int = DEFAULT_CACHE_BYTES) -> ShardedKV:
    """Open the sharded key-value store at ``url`` (a local path or any fsspec URL).

    ``spec`` is a :class:`ShardingSpec`, its JSON (object, text or file name), or None to read
    the ``sharding`` member of ``<url>/info``.

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
    return ShardedKV(open_storage(url), _as_spec(spec), mode, cache_bytes=cache_bytes)


def write_kv(url: str | os.PathLike, spec: ShardingSpec | dict | str,
             items: Mapping[int, bytes] | Iterable[tuple[int, bytes]], *,
             progress: bool = False) -> None:
    """Write a whole store at ``url`` from a mapping or iterable of (key, bytes).

    The store then holds exactly ``items``: shard files of an earlier store there are replaced
    or removed. Each shard file is written atomically.
    """
    keys, values = _collect(items)
    _write_store(open_storage(os.fspath(url)), _as_spec(spec), keys, values, progress=progress)



