"""Values with an unindexed prefix: bytes stored right before a value that no index entry
points at, found from the value itself. Multi-resolution meshes keep each segment's fragment
data so, before its manifest (the indexed value), as tensorstore's shard encoder writes
unindexed entries.

A store that has them is opened with ``prefix_of(keys, values)`` (the prefix lengths): its
rewrites and compactions then copy each kept value with its prefix (``update.rewrite_shard``),
and :func:`read_prefixed` reads values together with bytes before them. Such values are
written a whole shard at a time (:func:`prefixed_shard`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..compression import decode
from ..errors import CorruptDataError, NgShardError, SpecError
from ..storage import Storage
from .format import Entries, assemble_shard
from .infofile import INFO, read_info
from .spec import ShardingSpec

#: Layers whose sharded values carry unindexed prefixes.
PREFIXED_LAYERS = ("neuroglancer_multilod_draco",)


#: ``prefix_of(keys, values)``: the length of the unindexed prefix before each stored value
#: (values data-decoded), e.g. the mesh fragments before a multi-resolution manifest.
PrefixOf = Callable[[np.ndarray, list], np.ndarray]


def kept_prefixes(spec: ShardingSpec, old: memoryview, kept: Entries, prefix_of: PrefixOf,
                  where: str) -> np.ndarray:
    """The prefix lengths of the chunks ``kept`` (sorted by place), each checked to lie after
    the shard index and after the chunk before it."""
    values = [old[s:s + n] for s, n in zip(kept.starts.tolist(), kept.sizes.tolist())]
    return _checked_prefixes(spec, kept.keys, kept.starts, kept.sizes, values, prefix_of, where)


def _checked_prefixes(spec: ShardingSpec, keys: np.ndarray, starts: np.ndarray,
                      sizes: np.ndarray, values: list, prefix_of: PrefixOf, where: str
                      ) -> np.ndarray:
    if spec.data_encoding != "raw":
        values = [decode(v, spec.data_encoding, f"{where} (chunk {k})")
                  for k, v in zip(keys.tolist(), values)]
    pre = np.asarray(prefix_of(keys, values), np.uint64)
    floor = np.r_[np.uint64(spec.shard_index_size), (starts + sizes)[:-1]]
    bad = np.flatnonzero(pre > starts - np.minimum(floor, starts))
    if len(bad):
        i = int(bad[0])
        raise CorruptDataError(f"{where}: chunk {int(keys[i])} at {int(starts[i])} "
                               f"claims a prefix of {int(pre[i])} bytes, more than lie before "
                               f"it")
    return pre


def prefix_bytes(reader, shard) -> int:
    """Bytes of the unindexed prefixes before one shard's values (by the reader's
    ``prefix_of``; a prefix longer than the bytes before its value raises CorruptDataError):
    with the indexed bytes, what a compaction keeps. One batched read of the values."""
    parts = [idx for idx in shard.minishards.values() if len(idx.keys)]
    if not parts:
        return 0
    keys, starts, sizes = (np.concatenate([getattr(idx, a) for idx in parts])
                           for a in ("keys", "starts", "sizes"))
    order = np.argsort(starts, kind="stable")
    keys, starts, sizes = keys[order], starts[order], sizes[order]
    values = reader.read_through([(shard, np.stack([starts, starts + sizes], axis=1))])[0]
    return int(_checked_prefixes(reader.spec, keys, starts, sizes, values, reader.prefix_of,
                                 reader.storage.path(shard.name)).sum())


def rewrite_prefixed(spec: ShardingSpec, old: memoryview, kept: Entries, prefix_of: PrefixOf,
                     new_keys: np.ndarray, new_sizes: np.ndarray, new_data: Sequence,
                     where: str) -> list:
    """``update.rewrite_shard`` for kept chunks (sorted by place) with prefixes: each is
    copied with its prefix (prefix and chunk together, in their old order); the new chunks
    (``new_sizes`` bytes each, back to back in the parts ``new_data``) follow, without
    prefixes."""
    pre = kept_prefixes(spec, old, kept, prefix_of, where)
    new_sizes = np.asarray(new_sizes, np.uint64)
    spans = kept.sizes + pre
    copied = [old[s:s + n] for s, n in zip((kept.starts - pre).tolist(), spans.tolist())]
    region = np.concatenate([spans, new_sizes])
    offsets = np.cumsum(region, dtype=np.uint64) - region
    offsets[:len(pre)] += pre
    minishards = np.concatenate([kept.minishards, spec.locate(new_keys)[1]])
    all_keys = np.concatenate([kept.keys, new_keys])
    sizes = np.concatenate([kept.sizes, new_sizes])
    order = np.lexsort((all_keys, minishards))
    return assemble_shard(minishards[order], all_keys[order], sizes[order],
                          [*copied, *new_data], spec.num_minishards,
                          spec.minishard_index_encoding, offsets[order], int(region.sum()))


def prefixed_shard(spec: ShardingSpec, keys: np.ndarray, prefix_sizes: np.ndarray,
                   value_sizes: np.ndarray, data: Sequence, data_size: int | None = None
                   ) -> list:
    """A whole new shard (parts to write in order) whose data region ``data`` holds, for each
    key in turn, its prefix then its (data-encoded) value back to back; only the values are
    indexed. Keys distinct, in the order of their bytes in ``data``."""
    prefix_sizes = np.asarray(prefix_sizes, np.uint64)
    value_sizes = np.asarray(value_sizes, np.uint64)
    spans = prefix_sizes + value_sizes
    offsets = np.cumsum(spans, dtype=np.uint64) - spans + prefix_sizes
    minishards = spec.locate(keys)[1]
    order = np.lexsort((keys, minishards))
    return assemble_shard(minishards[order], keys[order], value_sizes[order], list(data),
                          spec.num_minishards, spec.minishard_index_encoding, offsets[order],
                          int(spans.sum()) if data_size is None else data_size)


def refuse_blind_writes(storage: Storage) -> None:
    """Refuse to open a mesh layer's store for writing without ``prefix_of``: its rewrites
    would drop the fragments."""
    doc = read_info(storage) if storage.stat(INFO) is not None else None
    if doc is not None and doc.get("@type") in PREFIXED_LAYERS:
        raise SpecError(f"{storage.url}: a {doc['@type']} layer: its mesh fragments lie "
                        f"unindexed before each manifest and a rewrite without prefix_of "
                        f"would drop them; change it through ngshard.open_meshes")


def read_prefixed(reader, keys: np.ndarray, span: Callable | None
                  ) -> dict[int, tuple[bytes | memoryview, bytes | memoryview]]:
    """{key: (bytes before, value)} of the keys present: ``span(key, value)`` gives the
    bytes wanted as ``(begin, end)`` relative to the value's start (``begin <= end <= 0``),
    by default ``(-prefix, 0)`` from the reader's ``prefix_of``. Two batched reads (the
    values, then the bytes before them), both checked against the shard generation the
    indices came from; a span reaching into the shard index raises CorruptDataError naming
    the key."""
    if span is None:
        if reader.prefix_of is None:
            raise NgShardError(f"{reader.storage.url}: the store has no prefix_of: give a span")

        def span(key: int, value: bytes) -> tuple[int, int]:
            return -int(reader.prefix_of(np.array([key], np.uint64), [value])[0]), 0

    return reader.retrying(_read, reader, np.unique(keys), span)


def _read(reader, keys: np.ndarray, span: Callable) -> dict:
    found, shards = reader._lookup(keys)
    reads = reader.read_through([(shards[name], rows[:, 1:]) for name, rows in found.items()])
    wanted, owners, values = [], [], {}
    encoding = reader.spec.data_encoding
    for (name, rows), chunks in zip(found.items(), reads):
        ks = rows[:, 0].tolist()
        where = reader.storage.path(name)
        if encoding != "raw":
            chunks = [decode(c, encoding, f"{where} (chunk {k})", reader.max_value_bytes)
                      for k, c in zip(ks, chunks)]
        values.update(zip(ks, chunks))
        rel = np.array([span(k, values[k]) for k in ks], np.int64).reshape(-1, 2)
        at = rows[:, 1].astype(np.int64)[:, None] + rel
        bad = np.flatnonzero((at[:, 0] < reader.spec.shard_index_size) |
                             (rel[:, 0] > rel[:, 1]) | (rel[:, 1] > 0))
        if len(bad):
            i = int(bad[0])
            raise CorruptDataError(f"{where}: key {ks[i]}: bytes [{int(at[i, 0])}, "
                                   f"{int(at[i, 1])}) before its value at {int(rows[i, 1])} "
                                   f"are not in the data region")
        wanted.append((shards[name], at))
        owners.append(ks)
    before = reader.read_through(wanted)
    return {k: (chunk, values[k]) for ks, chunks in zip(owners, before)
            for k, chunk in zip(ks, chunks)}
