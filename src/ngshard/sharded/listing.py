"""Listing a store from its indices alone: shard names, keys, per-shard statistics. Every
minishard index of the listed shards is read (batched per step); no chunk data is."""

from __future__ import annotations

import numpy as np

from . import legacy
from .reader import ShardReader, ShardState
from .update import live_bytes


def shard_names(reader: ShardReader) -> list[str]:
    """Names of the shards present, in shard order (an obsolete two-file shard is listed under
    the name of the single file it stands for; a directory bearing a shard's name is listed,
    and reading it raises CorruptDataError)."""
    names = set(reader.storage.list(dirs=True))
    return sorted(n for n in names | legacy.shards_of_pairs(names)
                  if reader.spec.parse_shard_filename(n) is not None)


def full_shards(reader: ShardReader, names: list[str]) -> list[ShardState]:
    """The named shards that exist, with every minishard index loaded."""
    present = [s for s in reader.shards(names).values() if s is not None]
    reader.load_minishards([(s, np.flatnonzero(s.ranges[:, 0] != s.ranges[:, 1]))
                            for s in present])
    return present


def _shard_keys(reader: ShardReader, names: list[str]) -> list[np.ndarray]:
    out = []
    for shard in full_shards(reader, names):
        parts = [idx.keys for idx in shard.minishards.values() if len(idx.keys)]
        out.append(np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64))
    return out


def keys_array(reader: ShardReader) -> np.ndarray:
    """Every key the minishard indices list, sorted by shard and key (misplaced keys included,
    as tensorstore lists them: see ShardedKV.keys_array)."""
    parts = reader.retrying(_shard_keys, reader, shard_names(reader))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def stats(reader: ShardReader) -> list[dict]:
    """Per shard file present: name, size in bytes, number of keys, garbage fraction."""
    out = []
    for s in reader.retrying(full_shards, reader, shard_names(reader)):
        live = live_bytes(reader.spec, s.ranges, s.minishards)
        out.append({"name": s.name, "bytes": s.size, "keys": s.key_count(),
                    "garbage": 1 - live / s.size if s.size else 0.0})
    return out
