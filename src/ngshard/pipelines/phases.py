"""Jobs of two phases over a segmentation (meshes, skeletons): first a task per box of voxels
("forge": the pieces of every label found in the box, written as one bundle, see
:mod:`.fragments`), then a task per output shard ("merge": every piece of the shard's labels
joined and the shard written whole). The merge tasks are planned once the boxes are done, from
the bundles' indices: the sharding then fits the labels actually found.

Both phases run on the executors of conversions (a local process pool, any
``concurrent.futures.Executor``, Dask) through the one task runner (:mod:`.runner`: the
worker entry :func:`.tasks.run_task`, results as they complete, resume records written by
the client in batches, Ctrl-C stopping a local pool at once): a job interrupted in either
phase resumes where it stopped; the merge tasks planned again from the same bundles are the
same tasks. The layer's info is written after every shard, the segmentation's link to it
last.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._arrays import unique
from ..destination import claim
from ..errors import SpecError
from ..kinds import FRAGMENTS
from ..layers.sharding import resolve_sharding
from ..progress import progress_bar
from ..sharded.spec import ShardingSpec
from ..storage import Storage, open_storage, remove_stale
from ..threads import pmap
from . import resume as records
from .fragments import read_index
from .runner import completed, running
from .tasks import run_task


@dataclass(frozen=True)
class Step:
    """One task of a two-phase job: ``name`` (unique in the job: its resume record), and the
    module-level function it runs with ``args`` (small, picklable values)."""

    name: str
    fn: Callable[..., dict]
    args: tuple = field(compare=False)

    def run(self) -> dict:
        return self.fn(*self.args)


@dataclass
class Job:
    """A two-phase job writing the layer at ``dst``: ``doc`` identifies it (a resumed job
    must be the same job), ``forge`` are its box tasks, ``merge(spec, requests)`` makes the
    task of one shard from the pieces it joins, ``sharding(count, mean_bytes)`` chooses the
    spec once the labels are known, and ``finish(spec, count)`` writes the infos. A local
    pool imports the modules of ``preload`` (those its tasks use) once, before it forks."""

    what: str  # "meshing" or "skeletonizing", for messages
    dst: str
    doc: dict  # with "job" (the command: mesh, skeletonize) and "from" (the segmentation)
    forge: list[Step]
    merge: Callable[[ShardingSpec, int, list], Step]
    sharding: Callable[[int, float | None], ShardingSpec]
    finish: Callable[[ShardingSpec, int], None]
    preload: tuple[str, ...] = ()


def shard_spec(sharding: Any, count: int, mean: float | None, **kw: Any) -> ShardingSpec:
    """The sharding of a layer of ``count`` labels of ``mean`` bytes each (see
    :func:`~ngshard.layers.sharding.resolve_sharding`; None means "auto": these layers are
    always sharded)."""
    spec = resolve_sharding(sharding or "auto", count, mean, **kw)
    assert spec is not None  # resolve_sharding gives None for None alone
    return spec


def bundles(dst: str | Storage) -> Storage:
    """Where the box tasks of a job writing ``dst`` leave their bundles."""
    return open_storage(dst).child(FRAGMENTS)


def plan_merges(job: Job) -> tuple[ShardingSpec, int, list[Step]]:
    """The spec, the number of labels, and one merge task per shard that gets a label,
    from the indices of every box's bundle."""
    store = bundles(job.dst)
    names = [s.name.split("/", 1)[1] for s in job.forge]
    indices = pmap(lambda n: read_index(store, n), names, min_items=4)
    labels = [i[0] for i in indices]
    every = unique(np.concatenate(labels)) if labels else np.zeros(0, np.uint64)
    total = sum(int((r[:, 1] - r[:, 0]).sum()) for _, r in indices)
    spec = job.sharding(len(every), total / len(every) if len(every) else None)
    per_shard: dict[int, list] = {}
    for name, (keys, ranges) in zip(names, indices):
        if not len(keys):
            continue
        shards = spec.locate(keys)[0]
        order = np.argsort(shards, kind="stable")
        cuts = np.flatnonzero(np.diff(shards[order])) + 1
        for rows in np.split(order, cuts):
            per_shard.setdefault(int(shards[rows[0]]), []).append(
                (name, keys[rows], ranges[rows]))
    steps = [job.merge(spec, shard, per_shard[shard]) for shard in sorted(per_shard)]
    return spec, len(every), steps


def run_job(job: Job, *, executor: Executor | None = None, workers: int | None = None,
            progress: bool = True, resume: bool = True, overwrite: bool = False
            ) -> dict[str, int]:
    """Run both phases of ``job`` (skipping tasks done before), then write its infos; the
    statistics: ``boxes``, ``shards``, ``segments``, ``run`` and ``skipped`` tasks."""
    storage = open_storage(job.dst)
    # what `verify` of the unfinished job names as the command that resumes it
    command = shlex.join(["ngshard", job.doc["job"], job.doc["from"], "--dst", job.dst])
    record = {**job.doc, "command": command, "tasks": {"box": len(job.forge)}}
    stats = {"boxes": len(job.forge), "shards": 0, "segments": 0, "run": 0, "skipped": 0}
    merging: list[Step] = []  # the merge tasks, once planned

    def left() -> str:
        finished = stats["run"] + stats["skipped"]
        total = stats["boxes"] + len(merging)
        later = "" if merging else " (and a task per shard after them)"
        return (f"{finished} of {total} tasks of {job.what} into {job.dst} are done, "
                f"{total - finished} left{later}")

    with running(executor, workers, job.what, job.dst, left,
                 preload=job.preload) as pool:
        if not records.recorded(storage, record):  # not an unfinished run of this job
            claim(storage, overwrite=overwrite)
            _clear_bundles(storage)
        done = records.start(storage, record, resume)
        if not done:
            _clear_bundles(storage)
        with records.Recorder(storage) as recorder:
            _phase(pool, job, job.forge, done, stats, progress, "boxes", recorder)
            spec, count, merges = plan_merges(job)
            merging += merges
            stats["shards"], stats["segments"] = len(merges), count
            _phase(pool, job, merges, done, stats, progress, "shards", recorder)
    job.finish(spec, count)
    records.clear(storage)
    _clear_bundles(storage)
    if storage.local_root is not None:
        remove_stale(storage.local_root)  # temporary files of workers that died
    return stats


def _phase(executor: Executor, job: Job, steps: list[Step], done: set[str], stats: dict,
           progress: bool, unit: str, recorder: records.Recorder) -> None:
    todo = [s for s in steps if s.name not in done]
    stats["skipped"] += len(steps) - len(todo)
    results = completed(executor, todo, run_task, _digest(job), {},
                        record=lambda r: recorder.add(r[0]))
    bar = progress_bar(results, enabled=progress,
                       total=len(steps), initial=len(steps) - len(todo),
                       desc=f"{job.what} ({unit})", unit=unit[:-1])
    for _ in bar:
        stats["run"] += 1


def _digest(job: Job) -> str:
    return hashlib.sha256(json.dumps(job.doc, sort_keys=True).encode()).hexdigest()[:16]


def _clear_bundles(storage: Storage) -> None:
    store = storage.child(FRAGMENTS)
    names = store.list()
    pmap(store.delete, names, min_items=8)
    if store.local_root is not None:
        with contextlib.suppress(OSError):
            os.rmdir(store.local_root)


def ids_doc(ids: Any) -> str | None:
    """A short digest of a set of labels, for a job's identity."""
    if ids is None:
        return None
    return hashlib.sha256(unique(np.asarray(ids, np.uint64)).tobytes()).hexdigest()[:16]


def destination_of(seg: str | os.PathLike, dst: str | os.PathLike | None, handle: Any,
                 member: str) -> tuple[str, str | None]:
    """The URL of the layer made, and the folder (relative) the segmentation's info names
    it by (None: not inside a precomputed segmentation)."""
    if dst is None:
        if handle is None:
            raise SpecError(f"{seg}: a zarr segmentation has no info to hold its {member}: "
                            f"give a destination")
        return f"{handle.storage.url.rstrip('/')}/{member}", member
    url = open_storage(dst).url.rstrip("/")
    if handle is None:
        return url, None
    root = handle.storage.url.rstrip("/") + "/"
    inside = url.startswith(root) and url != root.rstrip("/")
    return url, url[len(root):] if inside else None
