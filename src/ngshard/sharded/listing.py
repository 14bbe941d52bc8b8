"""Listing a store from its indices alone: shard names, keys, per-shard statistics. Every
minishard index of the listed shards is read; no chunk data is.

Where the storage cannot list (a web server without directory listings), the shards present
are found by asking for the size of every shard name the spec allows, in one batch, up to
:data:`MAX_PROBED_SHARDS`; beyond that the listing is refused (UnlistableError), never
reported empty.

Shards are read a few at a time on threads, each by a reader of its own (the store's index
cache is neither used nor filled; its retry policy is shared), and handed on in order one at
a time: memory is a few shards' indices however large the store, and remote latency is
overlapped.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

import numpy as np

from ..errors import UnlistableError
from ..limits import MAX_PROBED_SHARDS, THREADED_SHARD_SECONDS
from ..progress import progress_bar
from ..storage import Storage
from ..threads import WORKERS, bounded_map
from . import legacy
from .reader import ShardReader, ShardState
from .spec import ShardingSpec
from .trailer import live_bytes


def shard_names(reader: ShardReader) -> list[str]:
    """Names of the shards present, in shard order (an obsolete two-file shard is listed under
    the name of the single file it stands for; a directory bearing a shard's name is listed,
    and reading it raises CorruptDataError). Storage that cannot list is probed (see the
    module docstring)."""
    if not reader.storage.supports_listing:
        return probe_shard_names(reader.storage, reader.spec)
    names = set(reader.storage.list(dirs=True))
    return sorted(n for n in names | legacy.shards_of_pairs(names)
                  if reader.spec.parse_shard_filename(n) is not None)


def probe_shard_names(storage: Storage, spec: ShardingSpec) -> list[str]:
    """The shards present among every name ``spec`` allows, found by one batch of size
    queries (HEAD requests over HTTP), in shard order. Obsolete two-file shards are not
    looked for.

    Raises
    ------
    UnlistableError
        More than :data:`MAX_PROBED_SHARDS` shard names to probe.
    """
    if spec.num_shards > MAX_PROBED_SHARDS:
        raise UnlistableError(
            f"{storage.url}: the server gives no directory listings, and the "
            f"{spec.num_shards} shard names shard_bits {spec.shard_bits} allows are more than "
            f"the {MAX_PROBED_SHARDS} ngshard probes: which shards are present cannot be found "
            f"(every key still reads)")
    names = [spec.shard_filename(i) for i in range(spec.num_shards)]
    return [n for n, found in zip(names, storage.stat_many(names)) if found is not None]


def full_shards(reader: ShardReader, names: list[str]) -> list[ShardState]:
    """The named shards that exist, with every minishard index loaded."""
    present = [s for s in reader.shards(names).values() if s is not None]
    reader.load_minishards([(s, np.flatnonzero(s.ranges[:, 0] != s.ranges[:, 1]))
                            for s in present])
    return present


def iter_full_shards(reader: ShardReader, names: list[str], *, progress: bool = False,
                     desc: str = "reading indices") -> Iterator[ShardState]:
    """:func:`full_shards` of each name in turn, ``WORKERS`` read ahead on threads; on local
    storage only where the first shard took :data:`~ngshard.limits.THREADED_SHARD_SECONDS`
    or more (a local shard of a few thousand keys loads in about a millisecond, less than
    the hand-overs of threads cost: 256 such shards took 0.42 s on threads, 0.25 s in turn;
    16 shards of 250,000 keys, 0.21 s on threads and 0.27 s in turn)."""
    storage, spec = reader.storage, reader.spec

    def load(name: str) -> ShardState | None:
        own = ShardReader(storage, spec, 0, reader.max_value_bytes, retry=reader.retry)
        found = own.retrying(full_shards, own, [name])
        return found[0] if found else None

    def loaded() -> Iterator[ShardState | None]:
        rest = names
        if storage.local_root is not None and names:
            start = time.perf_counter()
            yield load(names[0])
            rest = names[1:]
            if time.perf_counter() - start < THREADED_SHARD_SECONDS:
                yield from map(load, rest)
                return
        yield from bounded_map(load, rest, WORKERS)

    for shard in progress_bar(loaded(), total=len(names), desc=desc, unit="shard",
                              enabled=progress):
        if shard is not None:
            yield shard


def sorted_keys(shard: ShardState) -> np.ndarray:
    """The keys one shard's minishard indices list, sorted."""
    parts = [idx.keys for idx in shard.minishards.values() if len(idx.keys)]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)


def iter_shard_keys(reader: ShardReader, names: list[str], *, progress: bool = False
                    ) -> Iterator[np.ndarray]:
    """The sorted keys of each named shard in turn."""
    for shard in iter_full_shards(reader, names, progress=progress, desc="listing"):
        yield sorted_keys(shard)


def keys_array(reader: ShardReader) -> np.ndarray:
    """Every key the minishard indices list, sorted by shard and key (misplaced keys included,
    as tensorstore lists them: see ShardedKV.keys_array). O(keys) memory."""
    parts = list(iter_shard_keys(reader, shard_names(reader)))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


class StoreStats(list):
    """The per-shard dicts of :func:`store_stats`, with the reader's figures as ``reads``."""

    def __init__(self, shards: Iterable[dict], reads: dict[str, int]) -> None:
        super().__init__(shards)
        self.reads = reads


def store_stats(reader: ShardReader, names: list[str], *, progress: bool = False
                ) -> StoreStats:
    """:func:`iter_stats` of the named shards as a list, then the reader's figures: its
    index cache's, and the retries of its reads and of this listing's."""
    shards = list(iter_stats(reader, names, progress=progress))
    return StoreStats(shards, reader.stats())


def iter_stats(reader: ShardReader, names: list[str], *, progress: bool = False
               ) -> Iterator[dict]:
    """Per named shard present: name, size in bytes, number of keys, garbage fraction."""
    for s in iter_full_shards(reader, names, progress=progress, desc="reading indices"):
        live = live_bytes(reader.spec, s.ranges, s.minishards)
        yield {"name": s.name, "bytes": s.size, "keys": s.key_count(),
               "garbage": 1 - live / s.size if s.size else 0.0}
