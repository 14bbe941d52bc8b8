"""The one task runner of every pipeline (conversions, downsampling, transfers, TIFF stacks,
meshes and skeletons): a plan's stages run in order on any ``concurrent.futures.Executor``
(a local process pool, a Dask client's executor), tasks made lazily and submitted a bounded
number at a time, results taken as they complete (a slow task holds up nothing behind it),
finished tasks recorded in batches so an interrupted job resumes where it stopped. A Ctrl-C
stops a local pool at once and says how to resume.

Before anything is written, a probe runs on the executor: a worker that cannot reach the
job's storage (missing credentials, an endpoint it does not know, a path only the client
sees) fails the job with one :class:`~ngshard.errors.StorageAccessError` instead of dying in
its first task after the destination was claimed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import queue
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import (
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..destination import claim, is_empty
from ..errors import Interrupted, NgShardError
from ..progress import progress_bar
from ..storage import Storage, open_storage, remove_stale
from ..volume.handle import write_volume_info
from ..volume.info import VolumeInfo
from . import resume as records
from .executors import in_flight, local_executor, stop_pool
from .plan import TaskList
from .tasks import probe, run_task


@dataclass
class Plan:
    """A job: what identifies it (for resuming; canonical URLs), where it writes (``dst``),
    how to lay out a fresh destination, and its tasks in stages (a stage needs the ones
    before it done), each stage a list of lazily made task lists."""

    job: dict
    dst: str
    #: ``prepare(empty)`` lays out a fresh destination; ``empty``: it was just seen to hold
    #: nothing, so nothing of an earlier run needs removing
    prepare: Callable[[bool], None]
    stages: list[list[TaskList]]
    dirs: list[Storage] = field(default_factory=list)  # where workers write objects
    #: (url, name) pairs a worker must reach before the job starts: ``name`` must exist
    #: there (a source's metadata), or is None (a destination: reachable is enough)
    probes: list[tuple[str, str | None]] = field(default_factory=list)
    #: the storage options of the trees the tasks open, by root URL (sent with every task:
    #: see :func:`ngshard.storage.rooted_options`)
    roots: dict = field(default_factory=dict)
    #: a job inside an existing layer (a pyramid): makes its folders ready instead of
    #: refusing the layer (given ``overwrite``), and writes the info once every task is done
    claim: Callable[[bool], None] | None = None
    finish: Callable[[], None] | None = None


def volume_plan(dst: str, info: VolumeInfo, stages: list[list[TaskList]], job: dict,
                probes: list[tuple[str, str | None]]) -> Plan:
    """The plan of a job that writes the volume ``info`` at ``dst`` in ``stages``: its
    ``prepare`` empties the scales' folders and writes the info."""
    storage = open_storage(dst)
    dirs = [storage.child(s.key) for s in info.scales]

    def prepare(empty: bool) -> None:
        for d in () if empty else dirs:  # a fresh job replaces what an earlier one left
            for name in d.list():
                d.delete(name)
        write_volume_info(storage, info)

    return Plan(json.loads(json.dumps(job)), dst, prepare, stages, dirs, probes)


def run_plan(plan: Plan, *, executor: Executor | None = None, workers: int | None = None,
             progress: bool = True, resume: bool = True, overwrite: bool = False,
             what: str = "converting") -> dict[str, int]:
    """Run a plan's stages in order, skipping the tasks an interrupted run of the same job
    finished (``resume``), on ``executor`` (default a local process pool of ``workers``).

    Returns
    -------
    dict
        The counts :func:`ngshard.convert` returns.

    Raises
    ------
    StorageAccessError
        A worker cannot reach the job's storage (nothing was written).
    ExistsError
        The destination holds something else, and not ``overwrite``.
    NgShardError
        A local worker process died.
    Interrupted
        Ctrl-C (a local pool is stopped at once; the message says how to resume).
    """
    dst = plan.dst
    parts: Counter[str] = Counter()
    for stage in plan.stages:
        for tasks in stage:
            parts[tasks.part] += len(tasks)
    total = sum(parts.values())
    # the tasks of each output (a scale's key or an array's name), for `verify` of a job
    # that does not finish
    record = {**plan.job, "tasks": dict(sorted(parts.items()))}
    stats = {"tasks": total, "run": 0, "skipped": 0, "chunks": 0, "bytes": 0}
    storage = open_storage(dst)

    def left() -> str:
        finished = stats["skipped"] + stats["run"]
        return (f"{finished} of {total} tasks of {what} to {dst} are done, "
                f"{total - finished} left")

    with running(executor, workers, what, dst, left, total) as pool:
        _preflight(pool, plan)
        # a new layer in an empty place (one listing): no records of an earlier run there,
        # nothing to refuse or remove
        empty = plan.claim is None and is_empty(storage, plan.dirs)
        known = not empty and records.recorded(storage, record)
        if not known:  # not an unfinished run of this job
            if plan.claim is not None:
                plan.claim(overwrite)
            else:
                claim(storage, overwrite=overwrite, into=plan.dirs, empty=empty)
        done = records.start(storage, record, resume, known=known, empty=empty)
        stats["skipped"] = len(done)
        if not done:
            plan.prepare(empty)
        job = hashlib.sha256(json.dumps(plan.job, sort_keys=True).encode()).hexdigest()[:16]
        # with nothing to do after the tasks, their records are removed once they are done
        last = total - len(done) if plan.finish is None else None
        with records.Recorder(storage, last) as recorder:
            results = (r for stage in plan.stages for r in completed(
                pool, (t for tasks in stage for t in tasks if t.name not in done),
                run_task, job, plan.roots, record=lambda r: recorder.add(r[0])))
            for _, result in progress_bar(results, enabled=progress, total=total,
                                          initial=stats["skipped"], desc=what, unit="task"):
                stats["run"] += 1
                stats["chunks"] += result["chunks"]
                stats["bytes"] += result["bytes"]
    if plan.finish is not None:
        plan.finish()
    # records of this run only (the place was empty): removed without listing them
    records.clear(storage, recorder.written if empty else None)
    for d in plan.dirs:
        if d.local_root is not None:
            remove_stale(d.local_root)  # temporary files of workers that died
    return stats


@contextmanager
def running(executor: Executor | None, workers: int | None, what: str, dst: str,
            left: Callable[[], str], tasks: int = 2, preload: Sequence[str] = ()
            ) -> Iterator[Executor]:
    """``executor``, or a local one for ``tasks`` tasks (a pool of ``workers``, the modules
    of ``preload`` imported before it forks, see
    :func:`~ngshard.pipelines.executors.local_executor`) shut down at the end; a Ctrl-C
    stops a local pool at once (running tasks killed, not waited for) and raises
    :class:`~ngshard.errors.Interrupted` saying what is ``left`` and how to resume."""
    own = executor is None
    pool: Executor | None = executor
    try:  # a Ctrl-C while the pool starts stops the job as well as one while it runs
        pool = local_executor(workers, tasks, preload) if executor is None else executor
        yield pool
    except KeyboardInterrupt:
        if own and pool is not None:
            stop_pool(pool)  # type: ignore[arg-type]
        own = False
        raise Interrupted(
            f"interrupted: {left()} (recorded in {dst}/{records.PREFIX}/): run the same "
            f"{'conversion' if what == 'converting' else 'command'} again to resume"
        ) from None
    except BrokenProcessPool as e:
        raise NgShardError(
            f"{what} to {dst}: a worker process died ({e}). Killed for memory? Try fewer "
            f"workers. From a script, the pool's workers import it again: call ngshard "
            f"under 'if __name__ == \"__main__\":' (or pass "
            f"executor=concurrent.futures.ThreadPoolExecutor()). Run again to resume."
        ) from None
    finally:
        if own and pool is not None:  # our own pool
            pool.shutdown(cancel_futures=True)


def _preflight(executor: Executor, plan: Plan) -> None:
    """Probe the plan's storage here, then from the workers of an executor that is not a
    local pool (as many probes as tasks in flight, so most workers run one), before
    anything is written; the first failure is raised."""
    if not plan.probes:
        return
    probe(plan.probes, plan.roots)
    if isinstance(executor, (ThreadPoolExecutor, ProcessPoolExecutor)):
        return  # this machine, this environment: what the client reaches, they reach
    futures = [executor.submit(probe, plan.probes, plan.roots)
               for _ in range(max(1, in_flight(executor) // 2))]
    for f in futures:
        f.result()


def completed(executor: Executor, tasks: Iterable, fn: Callable, *args: Any,
              record: Callable[[Any], None], window: int | None = None) -> Iterator[Any]:
    """``fn(task, *args)`` of every task on ``executor``, results as they complete, with at
    most ``window`` (default :func:`in_flight`) submitted and unfinished; ``tasks`` is
    taken lazily. Each result is passed to ``record`` before it is yielded. The first
    failure cancels what has not started, waits for what is running (so nothing is being
    written once the error is raised; those that finish are recorded too) and is raised.

    Finished futures come through a queue their callbacks fill: taking one costs the same
    with a window of 2,000 tasks as of 2 (``concurrent.futures.wait`` would look at all)."""
    window = window or in_flight(executor)
    todo = iter(tasks)
    finished: queue.SimpleQueue[Future] = queue.SimpleQueue()
    pending: set[Future] = set()
    interrupted = False
    try:
        while True:
            for task in itertools.islice(todo, window - len(pending)):
                future = executor.submit(fn, task, *args)
                pending.add(future)
                future.add_done_callback(finished.put)
            if not pending:
                return
            done = [finished.get()]
            while not finished.empty():  # take every one finished by now at once
                done.append(finished.get())
            pending.difference_update(done)
            failed = [e for e in map(Future.exception, done) if e is not None]
            results = [f.result() for f in done if f.exception() is None]
            for result in results:
                record(result)
            if failed:
                raise failed[0]
            yield from results
    except KeyboardInterrupt:
        interrupted = True  # the caller stops the running tasks: no waiting for them
        raise
    finally:
        for f in pending:
            f.cancel()
        for f in [] if interrupted else wait(pending).done:
            if not f.cancelled() and f.exception() is None:
                record(f.result())
