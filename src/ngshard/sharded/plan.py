"""The plan of a commit: what happens to each shard, decided before anything is written.

Deciding reads only indices (here); doing (``commit.py``) follows the plan shard by shard.
Printing a plan shows a user what a commit will cost before it runs. Byte counts are those of
the raw encodings (gzip only shrinks them), indices included.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .._arrays import member, unique
from ..commitplan import CommitPlan, ShardPlan
from ..limits import PLAN_GROUP_KEYS, PLAN_GROUP_SHARDS
from . import listing
from .changes import DELETED, ShardChanges
from .format import Entries
from .reader import ShardReader, ShardState
from .spec import ShardingSpec
from .trailer import TRAILER_SIZE, indices_end, live_bytes, trailer_garbage


def plan_commit(reader: ShardReader, changes: Iterable[ShardChanges], *, mode: str,
                strategy: str, compact_ratio: float | None, version: int = -1) -> CommitPlan:
    """What a commit of the staged ``changes`` (one shard's at a time) does to each shard,
    decided from the shard and touched minishard indices alone. Mode "w" replaces the whole
    store: every shard is created, and shards present with no key are deleted."""
    plans = [p for p, _ in plan_shards(reader, changes, mode=mode, strategy=strategy,
                                       compact_ratio=compact_ratio) if p is not None]
    if mode == "w":
        plans += obsolete_shards(reader, {p.name for p in plans})
    return CommitPlan(reader.storage.url, strategy, tuple(sorted(plans, key=lambda p: p.shard)),
                      staged_version=version)


def plan_shards(reader: ShardReader, changes: Iterable[ShardChanges], *, mode: str,
                strategy: str, compact_ratio: float | None
                ) -> Iterator[tuple[ShardPlan | None, ShardChanges]]:
    """Each shard's plan (None: nothing to do) beside its changes, decided as they come."""
    spec = reader.spec
    if mode == "w":  # a new store: nothing to read, nothing to wait for
        for c in changes:
            yield _create(spec, spec.shard_filename(c.shard), c.shard, c.lengths), c
        return
    for group in _groups(changes):
        names = [spec.shard_filename(c.shard) for c in group]
        # the group's shard indices in one batch, and where their committed bytes end
        present = reader.retrying(reader.shards, names)
        reader.retrying(settle, reader, [s for s in present.values() if s is not None])
        for name, c in zip(names, group):
            yield reader.retrying(_plan_shard, reader, name, c.shard, c.keys, c.lengths,
                                  strategy, compact_ratio), c


def settle(reader: ShardReader, shards: list[ShardState]) -> None:
    """Where the committed bytes of shards end, for writers: a shard whose file goes on
    past its last minishard index holds the tail of an append that died. Find the trailer
    the last committed append left where its minishard indices end, and count everything
    after it as garbage (the next append cuts it off); without such a trailer (a shard
    whose first append died), count exactly, from every minishard index."""
    shards = [s for s in shards if not s.tail_known]
    if not shards:
        return
    size = reader.spec.shard_index_size
    starts = [indices_end(s.ranges, size) for s in shards]
    reads = reader.read_through([(s, np.array([[a, min(a + TRAILER_SIZE, s.size)]]))
                               for s, a in zip(shards, starts)])
    exact = []
    for shard, start, chunks in zip(shards, starts, reads):
        recorded = trailer_garbage(chunks[0], shard.size)
        if recorded is None:
            exact.append(shard)
            continue
        shard.end = start + TRAILER_SIZE
        shard.garbage = recorded + shard.size - shard.end
        shard.tail_known = True
    everything = [(s, np.flatnonzero(s.ranges[:, 0] != s.ranges[:, 1])) for s in exact]
    reader.load_minishards(everything)
    for shard in exact:
        ends = [int((i.starts + i.sizes).max()) for i in shard.minishards.values()
                if len(i.keys)]
        shard.end = max([indices_end(shard.ranges, size), *ends])
        shard.garbage = shard.size - live_bytes(reader.spec, shard.ranges, shard.minishards)
        shard.tail_known = True



def _groups(changes: Iterable[ShardChanges]) -> Iterator[list[ShardChanges]]:
    group: list[ShardChanges] = []
    keys = 0
    for c in changes:
        group.append(c)
        keys += len(c.keys)
        if len(group) >= PLAN_GROUP_SHARDS or keys >= PLAN_GROUP_KEYS:
            yield group
            group, keys = [], 0
    if group:
        yield group


def obsolete_shards(reader: ShardReader, kept: set[str]) -> list[ShardPlan]:
    """For mode "w": removal of every shard present but not in ``kept``."""
    spec = reader.spec
    return [ShardPlan(n, number, "delete") for n in listing.shard_names(reader)
            if n not in kept and (number := spec.parse_shard_filename(n)) is not None]


def _create(spec: Any, name: str, num: int, lengths: np.ndarray) -> ShardPlan | None:
    """A new shard of the set values among ``lengths`` (None if there are none)."""
    sets = lengths[lengths != DELETED]
    if not len(sets):
        return None  # only deletions of keys that are not there
    return ShardPlan(name, num, "create", sets=len(sets), keys_after=len(sets),
                     write_bytes=spec.shard_index_size + int(sets.sum()) + 24 * len(sets))


def _plan_shard(reader: ShardReader, name: str, num: int, keys: np.ndarray,
                lengths: np.ndarray, strategy: str, compact_ratio: float | None
                ) -> ShardPlan | None:
    """Decide one shard's action from its shard index and its touched minishards only."""
    spec = reader.spec
    shard = reader.shards([name])[name]
    if shard is None:
        return _create(spec, name, num, lengths)
    is_set = lengths != DELETED
    new_bytes = int(lengths[is_set].sum())
    touched = unique(spec.locate(keys)[1]).astype(np.intp)
    reader.load_minishards([(shard, touched)])
    entries = Entries.of({m: shard.minishards[m] for m in touched.tolist()})
    present = member(keys, np.sort(entries.keys))
    deletes = int((present & ~is_set).sum())
    touched_after = len(entries.keys) - deletes + int((is_set & ~present).sum())
    others = np.ones(spec.num_minishards, bool)
    others[touched] = False
    other_ranges = shard.ranges[others]
    known = all(m in shard.minishards for m in np.flatnonzero(
        others & (shard.ranges[:, 0] != shard.ranges[:, 1])).tolist())
    keys_after = touched_after + sum(len(shard.minishards[m].keys) for m in
                                     np.flatnonzero(others).tolist()
                                     if m in shard.minishards) if known else None
    base = dict(sets=int(is_set.sum()), deletes=deletes, keys_after=keys_after,
                size_before=shard.size, generation=shard.generation)
    new_index = 24 * touched_after
    old_index = int((shard.ranges[touched, 1] - shard.ranges[touched, 0]).sum())
    dropped = int(entries.sizes[member(entries.keys, np.sort(keys))].sum())
    live_after = shard.size - shard.garbage - dropped - old_index + new_bytes + new_index
    if shard.split:  # readers and writers then deal with one file, as with any other
        return ShardPlan(name, num, "convert", read_bytes=shard.size,
                         write_bytes=live_after, **base)
    if touched_after == 0 and (other_ranges[:, 0] == other_ranges[:, 1]).all():
        return ShardPlan(name, num, "delete", **dict(base, keys_after=0))
    # Both strategies add the changes after the old bytes (in place, or in a copy) and
    # leave the replaced ones as garbage, until it passes compact_ratio.
    size_after = shard.end + new_bytes + new_index + TRAILER_SIZE  # a dead tail is cut off
    garbage = 1 - live_after / size_after
    if compact_ratio is not None and garbage > compact_ratio:
        return ShardPlan(name, num, "compact", read_bytes=shard.size,
                         write_bytes=live_after, **base)
    if strategy == "rewrite":
        return ShardPlan(name, num, "rewrite", read_bytes=shard.size,
                         write_bytes=size_after, garbage_after=garbage, **base)
    return ShardPlan(name, num, "append", garbage_after=garbage,
                     write_bytes=size_after - shard.end + spec.shard_index_size, **base)


def with_pending(spec: ShardingSpec, changes: Iterable[ShardChanges], keys: Any, lengths: Any
                 ) -> Iterator[ShardChanges]:
    """The staged ``changes`` with values not staged yet (``keys``, their ``lengths``) counted
    in, shard by shard in shard order (for plans only: no data)."""
    keys = np.asarray(keys, np.uint64)
    lengths = np.asarray(lengths, np.int64)
    nums = spec.locate(keys)[0].astype(np.int64)
    order = np.lexsort((keys, nums))
    keys, lengths, nums = keys[order], lengths[order], nums[order]
    shards, first = np.unique(nums, return_index=True)
    extra = dict(zip(shards.tolist(), np.split(np.arange(len(keys)), first[1:])))
    for c in changes:
        rows = extra.pop(c.shard, None)
        if rows is None:
            yield c
            continue
        keep = ~member(c.keys, keys[rows])
        k = np.concatenate([c.keys[keep], keys[rows]])
        n = np.concatenate([c.lengths[keep], lengths[rows]])
        o = np.argsort(k, kind="stable")
        yield ShardChanges(c.shard, k[o], n[o])
    for shard, rows in sorted(extra.items()):
        yield ShardChanges(shard, keys[rows], lengths[rows])
