"""Thread pools: one for leaf work that releases the GIL (numpy, zlib, reads), one for jobs
(a shard's whole update) that may themselves fan out leaf work. Jobs never wait on jobs and
leaves never wait on anything, so neither pool can deadlock on itself."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import TypeVar

from .cpus import available_cpus
from .limits import PSTART_SHARE

T = TypeVar("T")
R = TypeVar("R")

# the CPUs this process may use (affinity, cgroup quota, NGSHARD_CPUS), at least 2
WORKERS = max(2, available_cpus())


_leaves: ThreadPoolExecutor
_jobs: ThreadPoolExecutor


_where = threading.local()  # .leaf, .job: this thread is one of the leaf (job) pool's


def _leaf_thread() -> None:
    _where.leaf = True


def _job_thread() -> None:
    _where.job = True


def _new_pools() -> None:
    global _leaves, _jobs
    _leaves = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ngshard",
                                 initializer=_leaf_thread)
    _jobs = ThreadPoolExecutor(max_workers=2 * WORKERS, thread_name_prefix="ngshard-job",
                               initializer=_job_thread)


_new_pools()
# A forked child (a process pool's worker) inherits the pools without their threads: work
# given to them would never run. It gets pools of its own.
os.register_at_fork(after_in_child=_new_pools)


def park() -> bool:
    """Stop the pools' idle threads (new ones start when work comes) if they are the only
    threads but the caller's, so that the process may fork (see
    :func:`ngshard.pipelines.executors.forkable`); returns whether it did. Work running on
    them is finished first."""
    global _leaves, _jobs
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    if not others or not all(t.name.startswith(_PREFIXES) for t in others):
        return False
    _jobs.shutdown()  # first: a job may give work to the leaves
    _leaves.shutdown()
    _new_pools()
    return True


_PREFIXES = ("ngshard_", "ngshard-job_")  # ThreadPoolExecutor's names: prefix_N


def pool() -> ThreadPoolExecutor:
    """The leaf executor (never shut down: it lives as long as the process)."""
    return _leaves


def pmap(fn: Callable[[T], R], items: Iterable[T], *, min_items: int = 64) -> list[R]:
    """``list(map(fn, items))`` on the leaf pool when there are enough items to pay off
    (and on this thread when it is a leaf itself: leaves never wait on leaves)."""
    return pstart(fn, items, min_items=min_items)()


def pstart(fn: Callable[[T], R], items: Iterable[T], *, min_items: int = 64,
           join: bool = False) -> Callable[[], list[R]]:
    """:func:`pmap` begun now and finished by the function it returns (which waits and gives
    the results): the caller goes on with other work meanwhile (reading the next items, say).
    Few items, or a leaf thread: run here and now.

    A task per leaf thread, each taking the next run of items whenever it is free, a run
    being a share of what is left (guided scheduling): long runs of neighbouring items
    first (a thread writes its own part of an output, not pages the other is faulting in),
    single items at the end, so the threads end together however unequal the items (runs
    fixed beforehand left one idle for up to a run's work). After a failure no run is taken.

    ``join``: once the caller waits, it takes runs too, for items that hold the GIL little
    (decoding chunks). It would sleep otherwise, and where the system packs the threads of a
    process that was idle onto one CPU (a virtual machine's scheduler did here), the leaf
    threads alone then shared one core for the whole call (100 zarr boxes after a pause:
    41 ms with the caller asleep, 24 ms with it working, 22 ms without a pause). Not for
    items that take and drop the GIL many times each (small reads): a third thread there
    only adds hand-overs of the GIL (10,000 keys read at once: 61 ms against 47 ms)."""
    items = list(items)
    n = len(items)
    if n < min_items or getattr(_where, "leaf", False):
        done = list(map(fn, items))
        return lambda: done
    results: list = [None] * n
    lock = threading.Lock()
    state = [0, False]  # the next item, a failure

    def task() -> None:
        while True:
            with lock:
                first = state[0]
                if first >= n or state[1]:
                    return
                last = state[0] = first + -(-(n - first) // (PSTART_SHARE * WORKERS))
            try:
                for i in range(first, last):
                    results[i] = fn(items[i])
            except BaseException:
                state[1] = True
                raise

    futures = [_leaves.submit(task) for _ in range(min(WORKERS, n))]

    def wait() -> list[R]:
        try:
            if join:
                task()
        finally:
            futures_wait(futures)  # none still writes when this returns or raises
        for f in futures:
            f.result()
        return results

    return wait


def start_job(fn: Callable[[], R]) -> Future:
    """``fn()`` begun on a job thread (it must wait on no job itself); its future."""
    return _jobs.submit(fn)


def bounded_map(fn: Callable[[T], R], items: Iterable[T], in_flight: int = 2 * WORKERS
                ) -> Iterator[R]:
    """Results of ``fn`` over ``items`` in order, as jobs, with at most ``in_flight`` items
    taken from the (lazy) iterable and not yet finished: memory stays bounded."""
    pending: deque = deque()
    for item in items:
        pending.append(_jobs.submit(fn, item))
        if len(pending) >= in_flight:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def ahead(fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
    """Results of ``fn`` over ``items`` in order, each computed on a job thread while the
    caller works on the one before (the next started only once the one before is done: one
    at a time, as ``fn`` may not be safe to run twice at once); the first on this thread.
    On a pool's own thread all run on it (jobs never wait on jobs)."""
    if getattr(_where, "job", False) or getattr(_where, "leaf", False):
        yield from map(fn, items)
        return
    it = iter(items)
    for first in it:
        pending = fn(first)
        for item in it:
            future = _jobs.submit(fn, item)
            yield pending
            pending = future.result()
        yield pending
