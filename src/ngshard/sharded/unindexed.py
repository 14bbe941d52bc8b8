"""Unindexed entries: bytes that no index entry points at, stored right before an indexed value
(as tensorstore's shard encoder allows), found from the value itself: a store whose values refer
to bytes laid out before them keeps them so.

Such a store is opened with ``unindexed(keys, values)``, the length of the unindexed bytes
before each stored value (the layer that knows its values supplies it). Its rewrites and
compactions then copy each kept value with the bytes before it (``update.rewrite_shard``), and
:func:`read_with_unindexed` reads values together with bytes before them. Whole shards with
unindexed entries are written by ``shard_writer``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._arrays import unique
from ..compression import decode
from ..errors import CorruptDataError, NgShardError, SpecError
from ..kinds import INFO, describe, kind_of, unindexed_entries
from ..storage import Storage
from ..types import Blob
from .format import Entries
from .infofile import read_info
from .spec import ShardingSpec

#: ``unindexed(keys, values)``: the length of the unindexed bytes right before each stored
#: value (values data-decoded).
UnindexedSizes = Callable[[np.ndarray, list], np.ndarray]


def kept_unindexed(spec: ShardingSpec, old: memoryview, kept: Entries,
                   unindexed: UnindexedSizes, where: str) -> np.ndarray:
    """The lengths of the unindexed bytes before the entries ``kept`` (sorted by place) of
    the shard ``old``, each checked to lie after the shard index and the entry before it."""
    values = [old[s:s + n] for s, n in zip(kept.starts.tolist(), kept.sizes.tolist())]
    return _checked(spec, kept.keys, kept.starts, kept.sizes, values, unindexed, where)


def _checked(spec: ShardingSpec, keys: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
             values: list, unindexed: UnindexedSizes, where: str) -> np.ndarray:
    if spec.data_encoding != "raw":
        values = [decode(v, spec.data_encoding, f"{where} (chunk {k})")
                  for k, v in zip(keys.tolist(), values)]
    before = np.asarray(unindexed(keys, values), np.uint64)
    floor = np.r_[np.uint64(spec.shard_index_size), (starts + sizes)[:-1]]
    bad = np.flatnonzero(before > starts - np.minimum(floor, starts))
    if len(bad):
        i = int(bad[0])
        raise CorruptDataError(f"{where}: chunk {int(keys[i])} at {int(starts[i])} claims "
                               f"{int(before[i])} unindexed bytes before it, more than lie "
                               f"there")
    return before


def unindexed_bytes(reader, shard, unindexed: UnindexedSizes) -> int:
    """Bytes of the unindexed entries of one shard (a length past the bytes before its value
    raises CorruptDataError): with the indexed bytes, what a compaction keeps. One batched
    read of the values."""
    parts = [idx for idx in shard.minishards.values() if len(idx.keys)]
    if not parts:
        return 0
    keys, starts, sizes = (np.concatenate([getattr(idx, a) for idx in parts])
                           for a in ("keys", "starts", "sizes"))
    order = np.argsort(starts, kind="stable")
    keys, starts, sizes = keys[order], starts[order], sizes[order]
    values = reader.read_through([(shard, np.stack([starts, starts + sizes], axis=1))])[0]
    return int(_checked(reader.spec, keys, starts, sizes, values, unindexed,
                        reader.storage.path(shard.name)).sum())


def refuse_blind_writes(storage: Storage) -> None:
    """Refuse to open a layer's store for writing without ``unindexed`` when that layer keeps
    unindexed entries (:func:`ngshard.kinds.unindexed_entries`): rewrites would drop them."""
    doc = read_info(storage) if storage.stat(INFO) is not None else None
    kind, what = kind_of(doc), unindexed_entries(doc)
    if kind is not None and what is not None:
        raise SpecError(f"{storage.url}: {describe(kind, doc)}: {what}, and a "
                        f"rewrite without unindexed= would drop them; open it through its "
                        f"layer (ngshard.open)")


def read_with_unindexed(reader, keys: np.ndarray, span: Callable | None,
                        unindexed: UnindexedSizes | None = None
                        ) -> dict[int, tuple[Blob, Blob]]:
    """{key: (bytes before, value)} of the keys present: ``span(key, value)`` gives the
    bytes wanted as ``(begin, end)`` relative to the value's start (``begin <= end <= 0``),
    by default ``(-n, 0)`` for the ``n`` unindexed bytes ``unindexed`` measures. Two batched
    reads (the values, then the bytes before them), both checked against the shard
    generation the indices came from; a span reaching into the shard index raises
    CorruptDataError naming the key."""
    if span is None:
        if unindexed is None:
            raise NgShardError(f"{reader.storage.url}: the store has no unindexed entries "
                               f"(opened without unindexed=): give a span")

        def span(key: int, value: bytes) -> tuple[int, int]:
            return -int(unindexed(np.array([key], np.uint64), [value])[0]), 0

    return reader.retrying(_read, reader, unique(keys), span)


def _read(reader, keys: np.ndarray, span: Callable) -> dict:
    found, shards = reader._lookup(keys)
    reads = reader.read_through([(shards[name], rows[:, 1:]) for name, rows in found.items()])
    wanted, owners = [], []
    values: dict[int, Blob] = {}
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
