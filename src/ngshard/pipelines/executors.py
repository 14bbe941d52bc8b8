"""Where tasks run: any ``concurrent.futures.Executor``. By default a local process pool;
on a cluster, a Dask ``distributed.Client``'s executor."""

from __future__ import annotations

import multiprocessing
import os
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
    none inherits a lock another thread held (it costs a new interpreter, about 0.5 s)."""
    context: BaseContext
    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        context = multiprocessing.get_context("fork")
    else:
        server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload(["ngshard.pipelines.tasks"])
        context = server
    return ProcessPoolExecutor(max_workers=workers or default_workers(), mp_context=context)


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
