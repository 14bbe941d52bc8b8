"""Batch lookups on stores without appends (object stores, HTTP, fsspec): one chain of reads
per shard (:mod:`ngshard.storage.chains`), its index, then its minishard indices, then its
values.

On an object store or a web server each shard's chain runs on its own: a shard's minishard
indices are asked for as soon as its index arrives, its values as soon as those arrive,
rather than every shard waiting at each step for the slowest one of the batch (measured with
``tools/bench_http.py``: the Python work between phases and the tail of each phase, with few
requests left in flight, left the network idle for a good part of a read). Stores that batch
their reads instead run the chains in lockstep, the same batches as phase by phase.

A shard whose file is absent returns nothing from its chain: it may be missing, or the
obsolete two-file variant, which :meth:`ShardReader.shards` reads (after the chains).

Minishard indices are read as spans of nearby ones (within the store's ``max_gap``), each
begun where the index before it ends when that is at most ``max_gap`` earlier, and those
spans are kept for the batch: where a writer puts each minishard's values right before its
index (tensorstore), values inside them are taken from there, not asked for again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._arrays import unique
from ..storage.base import coalesce, held_ranges, split_merged
from ..storage.chains import Chain, Head, Ranges
from ..storage.index_cache import changed_lately
from ..types import Blob
from .format import find_in_tables

if TYPE_CHECKING:
    from .reader import ShardReader, ShardState

Found = tuple["ShardState", np.ndarray, list[Blob]]


def read_found(reader: ShardReader, keys: np.ndarray) -> list[Found]:
    """For unique keys: per shard, the (n, 3) (key, start, end) rows found there and the
    stored bytes of each (see :meth:`ShardReader.read_found`)."""
    names, groups, keys, minishards = reader.by_shard(keys)
    whole = whole_shards(reader, keys, groups)
    done = reader.storage.run_chains([shard_chain(reader, name, keys[g], minishards[g], w)
                                      for name, g, w in zip(names, groups, whole)])
    found = [d for d in done if d is not None and len(d[1])]
    absent = [g for d, g in zip(done, groups) if d is None]
    if absent:  # missing, or two files: the reader's other way
        rows, shards = reader._lookup(keys[np.concatenate(absent)])
        reads = reader.read_through([(shards[name], r[:, 1:]) for name, r in rows.items()])
        found += [(shards[name], r, chunks) for (name, r), chunks in zip(rows.items(), reads)]
    return found


def whole_shards(reader: ShardReader, keys: np.ndarray, groups: list[np.ndarray]
                 ) -> list[bool]:
    """Per shard (its ``groups`` of sorted ``keys``): whether the batch asks for every key
    the shard can hold (:attr:`ShardReader.capacity`), so that the shard is read whole in
    one request rather than its indices first, two round trips before its values (as
    tensorstore reads a shard that a batch covers)."""
    if reader.capacity is None or not groups:
        return [False] * len(groups)
    counts = reader.capacity(keys[[int(g[0]) for g in groups]])
    if counts is None:
        return [False] * len(groups)
    return [0 < int(c) <= len(g) for c, g in zip(counts.tolist(), groups)]


def shard_chain(reader: ShardReader, name: str, keys: np.ndarray, minishards: np.ndarray,
                whole: bool = False) -> Chain:
    """The reads of ``keys`` (in ``minishards``) of shard ``name``, ``whole``: in one read of
    the whole file; returns what :func:`read_found` gives per shard, None where no file
    ``name`` exists."""
    size = reader.spec.shard_index_size
    head = yield Head(name, None if whole else size)
    if head is None:
        return None
    info, index = head
    if index is None:  # changed while its index was read
        raise reader.cache.stale(name, reader.storage.path(name))
    recent = changed_lately(info)
    shard = reader.cache.get(name, info.generation, recent) or \
        reader.adopt(name, info, None, info.generation, recent, [index[:size]])
    missing = reader.missing_minishards(shard, minishards)
    shift = shard.data_shift
    # what was read is kept: values and indices inside it are not read again
    held: tuple[np.ndarray, list[Blob]] = (np.array([[0, len(index)]]), [index]) if whole \
        else (np.zeros((0, 2), np.int64), [])
    if missing:
        ranges = shard.ranges[missing].astype(np.int64)
        inside, found = held_ranges(*held, ranges)
        chunks: list[Blob] = [c for c in found if c is not None]
        if not inside.all():  # read as nearby spans
            gap = reader.storage.max_gap
            spans, assignment = coalesce(with_lead(shard, ranges, gap, size), gap)
            gen, blobs = yield Ranges(shard.data_name, spans - shift)
            held = spans, reader.check_read(shard, spans, gen, blobs)
            chunks = split_merged(spans, held[1], ranges, assignment)
        reader.keep_minishards(shard, missing, reader.decode_minishards(shard, missing, chunks))
    needed = unique(minishards)
    hit, starts, sizes = find_in_tables([shard.minishards[m] for m in needed.tolist()],
                                        np.searchsorted(needed, minishards), keys)
    rows = np.stack([keys[hit], starts, starts + sizes], axis=1)
    ranges = rows[:, 1:].astype(np.int64)
    inside, values = held_ranges(*held, ranges)
    if not inside.all():
        unread = np.flatnonzero(~inside)
        gen, chunks = yield Ranges(shard.data_name, ranges[unread] - shift)
        for i, chunk in zip(unread.tolist(),
                            reader.check_read(shard, ranges[unread], gen, chunks)):
            values[i] = chunk
    return shard, rows, values


def with_lead(shard: ShardState, ranges: np.ndarray, gap: int, index_size: int
              ) -> np.ndarray:
    """Minishard index ``ranges`` of a shard, each begun earlier, where the previous index
    (or the shard index) ends, when that lead is at most ``gap`` bytes: the values of a
    minishard written right before its index (tensorstore's layout) then come with the
    index, a read worth less than another request (ranges nearer than ``gap`` are read as
    one anyway). Where indices lie side by side (ngshard's, igneous's layouts) nothing
    changes."""
    ends = unique(np.r_[shard.ranges[:, 1].astype(np.int64), index_size])
    before = ends[np.maximum(np.searchsorted(ends, ranges[:, 0], side="right") - 1, 0)]
    lead = ranges[:, 0] - before
    out = ranges.copy()
    near = (lead > 0) & (lead <= gap)
    out[near, 0] = before[near]
    return out

