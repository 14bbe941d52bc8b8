"""Where tasks run: any ``concurrent.futures.Executor``. By default a local process pool;
on a cluster, a Dask ``distributed.Client``'s executor."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing.context import BaseContext

from ..errors import MissingDependencyError


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1


def local_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """A process pool of ``workers`` (default: one per core). Workers are forked while this
    process has one thread (they start at once); otherwise they come from a forkserver, so
    none inherits a lock another thread held (it costs a new interpreter, about 0.5 s).
    Workers ignore SIGINT: a Ctrl-C in the terminal reaches the whole process group, and only
    this process decides what stops (:func:`stop_pool`)."""
    context: BaseContext
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        context = multiprocessing.get_context("fork")
    else:
        server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload(["ngshard.pipelines.tasks"])
        context = server
    pool = ProcessPoolExecutor(max_workers=workers or default_workers(), mp_context=context,
                               initializer=_ignore_sigint)
    # Forked workers start at the first submit; a Ctrl-C landing in os.fork's at-fork
    # handlers is swallowed there ("Exception ignored") and the job would run on. So they
    # start now, with SIGINT held back until they are up.
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        pool.submit(int).result()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return pool


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_pool(executor: ProcessPoolExecutor) -> None:
    """Stop a local pool now: tasks not started are cancelled, running ones killed. Nothing
    half-written becomes visible (every write is a temporary renamed into place); a killed
    task's temporaries are removed when the job is run again."""
    processes = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(1)


def dask_client(address: str):
    """A ``distributed.Client`` connected to the scheduler at ``address`` (its
    ``get_executor()`` runs the tasks; close the client when done)."""
    try:
        from distributed import Client
    except ImportError as e:
        raise MissingDependencyError(f"--dask needs Dask's distributed: pip install "
                                     f"'ngshard[dask]' ({e})") from None
    return Client(address)


def in_flight(executor: Executor) -> int:
    """How many tasks to keep submitted at once: enough to keep every worker busy, few
    enough that a failure stops the job soon."""
    workers = getattr(executor, "_max_workers", None)
    if workers is None and hasattr(executor, "_client"):  # distributed's ClientExecutor
        workers = sum(executor._client.nthreads().values())
    return 2 * (workers or 32)
