"""Carrying out a commit plan, shard by shard: create, append, rewrite, compact, convert or
delete, each written so that every state a crash can leave is readable (atomic replacement, or
an append followed by a patch of the fixed-size shard index)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from .._arrays import unique
from ..commitplan import CommitPlan, ShardPlan
from ..errors import NgShardError
from ..progress import progress_bar
from ..storage import ANY, Storage, changed_on_storage
from ..threads import WORKERS, bounded_map
from ..types import Blob
from . import legacy, listing
from .changes import ShardChanges
from .plan import obsolete_shards, plan_shards, settle
from .reader import ShardReader, ShardState
from .shard_writer import Laid, rewrite_shard, write_shard
from .spec import ShardingSpec
from .staging import Staging
from .trailer import live_bytes
from .unindexed import UnindexedSizes, unindexed_bytes
from .update import append_update


def commit_staged(reader: ShardReader, staging: Staging, plan: CommitPlan | None, mode: str,
                  strategy: str, compact_ratio: float | None, *, progress: bool = False,
                  unindexed: UnindexedSizes | None = None) -> CommitPlan:
    """Apply the staged changes shard by shard and clear the staging; returns the plan
    followed. With ``plan`` None each shard is planned as its turn comes (one pass over the
    changes); a given plan must have been made for the current staged changes. Rewrites keep
    the unindexed entries ``unindexed`` measures."""
    if plan is not None and plan.staged_version != staging.version:
        raise NgShardError("the staged changes have changed since this plan was made; "
                           "make a new plan")
    given = None if plan is None else {p.shard: p for p in plan.shards}
    done: list[ShardPlan] = []

    def jobs() -> Iterator[tuple[ShardPlan, ShardChanges | None, ShardState | None]]:
        # Runs in this thread, lazily: one shard's changes per job in flight.
        changes = staging.iter_changes()
        if given is None:
            pairs = plan_shards(reader, changes, mode=mode, strategy=strategy,
                                compact_ratio=compact_ratio)
        else:
            pairs = ((given.pop(c.shard, None), c) for c in changes)
        for p, c in pairs:
            if p is not None:
                done.append(p)
                yield p, c, _append_base(reader, p, c)
        rest = list(given.values()) if given is not None else \
            obsolete_shards(reader, {p.name for p in done}) if mode == "w" else []
        for p in rest:  # "w": removals
            done.append(p)
            yield p, None, None

    in_flight = WORKERS if staging.spilled else 2 * WORKERS
    storage, spec = reader.storage, reader.spec

    def apply(job: tuple[ShardPlan, ShardChanges | None, ShardState | None]) -> int:
        plan, changes, base = job
        _apply(storage, spec, mode, plan, changes, base, unindexed)
        return plan.shard

    for shard in progress_bar(bounded_map(apply, jobs(), in_flight),
                              total=None if plan is None else len(plan.shards),
                              desc="committing shards", unit="shard", enabled=progress):
        staging.spilled_files.discard(shard)  # free its disk space as soon as it is done
    staging.clear()
    for p in done:
        reader.forget(p.name)
    if plan is None:
        plan = CommitPlan(storage.url, strategy, tuple(sorted(done, key=lambda p: p.shard)),
                          staged_version=staging.version)
    return plan


def _append_base(reader: ShardReader, plan: ShardPlan, changes: ShardChanges
                 ) -> ShardState | None:
    """For an append or rewrite: the shard as planned, with the indices of the touched
    minishards (a copy: the job thread must not share the cache's dicts)."""
    if plan.action not in ("append", "rewrite"):
        return None
    shard = reader.retrying(reader.shards, [plan.name])[plan.name]
    if shard is None or shard.generation != plan.generation:
        raise changed_on_storage(reader.storage.path(plan.name), "the commit was planned")
    reader.retrying(settle, reader, [shard])
    touched = reader.spec.locate(changes.keys)[1]
    reader.load_minishards([(shard, touched)])
    return ShardState(shard.name, shard.size, shard.generation, shard.ranges,
                      {m: shard.minishards[m] for m in unique(touched).tolist()},
                      garbage=shard.garbage, end=shard.end)


def _apply(storage: Storage, spec: ShardingSpec, mode: str, plan: ShardPlan,
           changes: ShardChanges | None, base: ShardState | None,
           unindexed: UnindexedSizes | None = None) -> None:
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
    assert changes is not None, f"a {plan.action} of {name} without its changes"
    keys, deleted = changes.keys, changes.deleted
    sizes, data = changes.encoded(spec.data_encoding)
    if plan.action == "create":
        write_shard(storage, spec, plan.shard, keys[~deleted], Laid(sizes, data),
                    if_generation=check)
        return
    where = storage.path(name)
    old: Blob | None = None
    if plan.action in ("rewrite", "compact"):
        old = read_whole(storage, [name], [plan.size_before], [plan.generation], where)[0]
    elif plan.action == "convert":  # the pair's bytes are those of the one file
        index_size = spec.shard_index_size
        old = b"".join(read_whole(storage, list(pair),
                                  [index_size, plan.size_before - index_size],
                                  plan.generation, where))
    if plan.action in ("append", "rewrite"):
        assert base is not None, f"an {plan.action} of {name} without the shard's state"
        # after the committed bytes: a dead append's tail past them is cut off
        update = append_update(spec, base.end, base.garbage - (base.size - base.end),
                               base.ranges, base.minishards, keys, deleted, sizes, data)
        if update.empty:
            storage.delete(name, if_generation=plan.generation)
        elif plan.action == "append":
            storage.append_and_patch(name, plan.generation, update.offset, update.tail,
                                     update.shard_index)
        else:  # the same bytes as an append would leave, written as a new object
            assert old is not None
            head = update.shard_index
            storage.write(name, [head, memoryview(old)[len(head):base.end], *update.tail],
                          if_generation=plan.generation)
        return
    keys, minishards, laid = rewrite_shard(spec, old, keys, deleted, sizes, data, where,
                                           unindexed)
    if plan.action == "convert":
        if len(keys):  # first the new file (readers prefer it), then the pair
            write_shard(storage, spec, plan.shard, keys, laid, minishards=minishards,
                        if_generation=None)
        for part, generation in zip(reversed(pair), reversed(plan.generation)):
            storage.delete(part, if_generation=generation)
    else:
        write_shard(storage, spec, plan.shard, keys, laid, minishards=minishards,
                    if_generation=check)


def read_whole(storage: Storage, names: list[str], sizes: list[int], generations: list[Any],
               where: str) -> list[Blob]:
    """The first ``sizes`` bytes of objects that must still have ``generations``."""
    reads = storage.read_ranges([(n, np.array([[0, size]])) for n, size in zip(names, sizes)])
    out = []
    for (gen, chunks), generation in zip(reads, generations):
        if chunks is None or (gen is not None and gen != generation):
            raise changed_on_storage(where, "the commit was planned")
        out.append(chunks[0])
    return out


def _measured(reader: ShardReader, name: str, unindexed: UnindexedSizes | None
              ) -> list[tuple[ShardState, int]]:
    """The shard ``name`` (if present) and the bytes a compaction of it would keep: indices,
    values and the unindexed entries ``unindexed`` measures (read only where the indexed
    bytes leave some over: a store without garbage or unindexed entries costs no read)."""
    out = []
    for shard in listing.full_shards(reader, [name]):
        live = live_bytes(reader.spec, shard.ranges, shard.minishards)
        if live < shard.size and unindexed is not None:
            live += unindexed_bytes(reader, shard, unindexed)
        out.append((shard, live))
    return out


def compact(reader: ShardReader, names: Iterable[str], *, progress: bool = False,
            unindexed: UnindexedSizes | None = None) -> CommitPlan:
    """Rewrite the named shards that hold garbage of earlier appends, without it (keeping the
    unindexed entries ``unindexed`` measures): one shard (its indices and its bytes) at a
    time per job."""
    spec = reader.spec
    plans: list[ShardPlan] = []

    def jobs() -> Iterator[ShardPlan]:
        for name in names:
            for shard, live in reader.retrying(_measured, reader, name, unindexed):
                number = spec.parse_shard_filename(shard.name)  # listed: a shard's name
                if live < shard.size and number is not None:
                    plans.append(ShardPlan(
                        shard.name, number, "compact",
                        keys_after=shard.key_count(), read_bytes=shard.size, write_bytes=live,
                        size_before=shard.size, generation=shard.generation,
                        garbage_after=0.0))
                    yield plans[-1]
                reader.forget(shard.name)  # its indices are not needed again

    none = ShardChanges(0, np.zeros(0, np.uint64), np.zeros(0, np.int64),
                        data=np.zeros(0, np.uint8))
    for _ in progress_bar(bounded_map(lambda p: _apply(reader.storage, spec, "r+", p, none, None,
                                                       unindexed), jobs(), WORKERS),
                          desc="compacting", unit="shard", enabled=progress):
        pass
    for p in plans:
        reader.forget(p.name)
    return CommitPlan(reader.storage.url, "compact", tuple(plans))
