"""Carrying out a commit plan, shard by shard: create, append, rewrite, compact, convert or
delete, each written so that every state a crash can leave is readable (atomic replacement, or
an append followed by a patch of the fixed-size shard index)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..compression import encode
from ..errors import NgShardError
from ..progress import progress_bar
from ..storage import ANY, FileSlice, Storage, changed_on_storage
from ..threads import WORKERS, bounded_map, pmap
from . import legacy, listing
from .plan import CommitPlan, ShardPlan
from .reader import ShardReader, ShardState
from .spec import ShardingSpec
from .staging import ShardChanges, Staging
from .update import append_update, live_bytes, rewrite_shard, shard_from_region


def commit_staged(reader: ShardReader, staging: Staging, plan: CommitPlan, mode: str, *,
                  progress: bool = False) -> None:
    """Apply ``plan`` (made for the current staged changes) and clear the staging."""
    if plan.staged_version != staging.version:
        raise NgShardError("the staged changes have changed since this plan was made; "
                           "make a new plan")
    by_shard = {p.shard: p for p in plan.shards}

    def jobs() -> Iterator[tuple]:
        # Runs in this thread, lazily: one shard's changes in memory per job in flight.
        for changes in staging.iter_changes():
            p = by_shard.pop(changes.shard, None)
            if p is not None:
                yield p, changes, _append_base(reader, p, changes)
        yield from ((p, None, None) for p in list(by_shard.values()))  # "w": removals

    # Spilled changes are larger than memory: write them one shard at a time, unless each
    # shard is made from its spill file without reading it (new raw shards).
    loads_spills = staging.spilled and (mode != "w" or reader.spec.data_encoding != "raw")
    in_flight = 1 if loads_spills else 2 * WORKERS
    if staging.spilled:
        staging.spill()
    storage, spec = reader.storage, reader.spec
    prefix_of = reader.prefix_of  # unindexed prefixes (mesh fragments) that rewrites keep
    for _ in progress_bar(bounded_map(lambda job: _apply(storage, spec, mode, *job, prefix_of),
                                      jobs(),
                                      in_flight),
                          total=len(plan.shards), desc="committing shards", unit="shard",
                          enabled=progress):
        pass
    staging.clear()
    for p in plan.shards:
        reader.forget(p.name)


def _append_base(reader: ShardReader, plan: ShardPlan, changes: ShardChanges
                 ) -> ShardState | None:
    """For an append or rewrite: the shard as planned, with the indices of the touched
    minishards (a copy: the job thread must not share the cache's dicts)."""
    if plan.action not in ("append", "rewrite"):
        return None
    shard = reader.retrying(reader.shards, [plan.name])[plan.name]
    if shard is None or shard.generation != plan.generation:
        raise changed_on_storage(reader.storage.path(plan.name), "the commit was planned")
    reader.retrying(reader.settle, [shard])
    touched = reader.spec.locate(changes.keys)[1]
    reader.load_minishards([(shard, touched)])
    return ShardState(shard.name, shard.size, shard.generation, shard.ranges,
                      {m: shard.minishards[m] for m in np.unique(touched).tolist()},
                      garbage=shard.garbage, end=shard.end)


def _apply(storage: Storage, spec: ShardingSpec, mode: str, plan: ShardPlan,
           changes: ShardChanges | None, base: ShardState | None, prefix_of=None) -> None:
    """Carry out one shard's plan (in a job thread: touches storage, not the caches)."""
    name = plan.name
    check = ANY if mode == "w" else plan.generation
    pair = legacy.pair_names(name)
    if mode == "w":  # a new store: no obsolete two-file shard of that number either
        for part in pair:
            storage.delete(part)
    if plan.action == "delete":
        storage.delete(name, if_generation=check)
        return
    keys, deleted = changes.keys, changes.deleted
    if plan.action == "create" and changes.source is not None and spec.data_encoding == "raw":
        # a spilled shard: its spill file is the data, taken over rather than copied
        header = spec.shard_index_size
        size = os.path.getsize(changes.source) - header
        storage.write(name, shard_from_region(
            spec, keys, changes.lengths.astype(np.uint64), deleted,
            FileSlice(changes.source, header, size, owned=True), size, changes.offsets),
            if_generation=check)
        return
    values = changes.values
    if spec.data_encoding != "raw":
        values = pmap(lambda v: None if v is None else encode(v, spec.data_encoding), values)
    where = storage.path(name)
    old = None
    if plan.action in ("rewrite", "compact"):
        old = read_whole(storage, [name], [plan.size_before], [plan.generation], where)[0]
    elif plan.action == "convert":  # the pair's bytes are those of the one file
        index_size = spec.shard_index_size
        old = b"".join(read_whole(storage, list(pair),
                                  [index_size, plan.size_before - index_size],
                                  plan.generation, where))
    if plan.action in ("append", "rewrite"):
        # after the committed bytes: a dead append's tail past them is cut off
        update = append_update(spec, base.end, base.garbage - (base.size - base.end),
                               base.ranges, base.minishards, keys, values, deleted)
        if update.empty:
            storage.delete(name, if_generation=plan.generation)
        elif plan.action == "append":
            storage.append_and_patch(name, plan.generation, update.offset, update.tail,
                                     update.index)
        else:  # the same bytes as an append would leave, written as a new object
            storage.write(name, [update.index, memoryview(old)[len(update.index):base.end],
                                 *update.tail], if_generation=plan.generation)
        return
    parts = rewrite_shard(spec, old, keys, values, deleted, where, prefix_of)
    if plan.action == "convert":
        if parts is not None:  # first the new file (readers prefer it), then the pair
            storage.write(name, parts, if_generation=None)
        for part, generation in zip(reversed(pair), reversed(plan.generation)):
            storage.delete(part, if_generation=generation)
    elif parts is None:
        storage.delete(name, if_generation=check)
    else:
        storage.write(name, parts, if_generation=check)


def read_whole(storage: Storage, names: list[str], sizes: list[int], generations: list[Any],
               where: str) -> list[bytes | memoryview]:
    """The first ``sizes`` bytes of objects that must still have ``generations``."""
    reads = storage.read_ranges([(n, np.array([[0, size]])) for n, size in zip(names, sizes)])
    for (gen, chunks), generation in zip(reads, generations):
        if chunks is None or (gen is not None and gen != generation):
            raise changed_on_storage(where, "the commit was planned")
    return [chunks[0] for _, chunks in reads]


def compact(reader: ShardReader, names: Iterable[str], *, progress: bool = False
            ) -> CommitPlan:
    """Rewrite the named shards that hold garbage of earlier appends, without it."""
    spec = reader.spec
    plans = []
    for shard in reader.retrying(listing.full_shards, reader, list(names)):
        live = live_bytes(spec, shard.ranges, shard.minishards)
        if live < shard.size:
            plans.append(ShardPlan(shard.name, spec.parse_shard_filename(shard.name), "compact",
                                   keys_after=shard.key_count(), read_bytes=shard.size,
                                   write_bytes=live, size_before=shard.size,
                                   generation=shard.generation, garbage_after=0.0))
    none = ShardChanges(0, np.zeros(0, np.uint64), np.zeros(0, np.int64), [])
    for _ in progress_bar(bounded_map(lambda p: _apply(reader.storage, spec, "r+", p, none, None,
                                                       reader.prefix_of), plans),
                          total=len(plans), desc="compacting", unit="shard", enabled=progress):
        pass
    for p in plans:
        reader.forget(p.name)
    return CommitPlan(reader.storage.url, "compact", plans)
