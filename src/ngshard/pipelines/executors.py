"""Where tasks run: any ``concurrent.futures.Executor``. By default a local process pool
whose workers die with it; on a cluster, a Dask ``distributed.Client``'s executor."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing.context import BaseContext

from tqdm import tqdm

from ..cpus import available_cpus
from ..errors import MissingDependencyError

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def local_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """A process pool of ``workers`` (default: the CPUs this process may use, see
    :func:`ngshard.cpus.available_cpus`). Workers are forked while this process has one
    thread (they start at once); otherwise they come from a forkserver, so none inherits a
    lock another thread held (it costs a new interpreter, about 0.5 s). Workers ignore
    SIGINT: a Ctrl-C in the terminal reaches the whole process group, and only this process
    decides what stops (:func:`stop_pool`). On Linux each worker is killed when its parent
    dies (``kill -9`` of the client leaves no worker behind)."""
    context: BaseContext
    parent: int | None
    if "fork" in multiprocessing.get_all_start_methods() and _one_thread():
        context = multiprocessing.get_context("fork")
        parent = os.getpid()
    else:
        server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload(["ngshard.pipelines.tasks"])
        context = server
        parent = None  # the forkserver, which exits when this process does
    pool = ProcessPoolExecutor(max_workers=workers or available_cpus(), mp_context=context,
                               initializer=_start_worker, initargs=(parent,))
    # Workers start at the first submit. A Ctrl-C landing in os.fork's at-fork handlers is
    # swallowed there ("Exception ignored") and the job would run on: forked workers start
    # now, with SIGINT held back until they are up (a forkserver forks in its own process:
    # a Ctrl-C is taken at once). Either way a Ctrl-C meanwhile stops the pool.
    forked = parent is not None
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if forked else None
    try:
        try:
            pool.submit(int).result()
        finally:
            if held is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
    except KeyboardInterrupt:  # the caller never gets the pool
        stop_pool(pool)
        raise
    return pool


def _start_worker(parent: int | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)
    # tqdm's bars (kimimaro makes them, disabled) would make a named semaphore here that a
    # worker killed by stop_pool leaves behind ("leaked semaphore objects" at exit)
    tqdm.set_lock(threading.RLock())


def _one_thread() -> bool:
    """Whether this process runs one thread: Python's and native ones (an object store's
    runtime), which a forked child would inherit stopped, with whatever locks they held."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc: Python's threads only
        return threading.active_count() == 1


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel kill this process when its parent dies (Linux; elsewhere nothing).
    ``parent``: the pid the parent had, to catch a parent that died before this ran."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if (parent is not None and os.getppid() != parent) or os.getppid() == 1:
        os._exit(1)  # orphaned already


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
    """How many tasks to keep submitted at once: enough to keep every worker busy while
    results come back, few enough that a failure stops the job soon and the client holds
    few tasks."""
    workers = getattr(executor, "_max_workers", None)
    if workers is None and hasattr(executor, "_client"):  # distributed's ClientExecutor
        workers = sum(executor._client.nthreads().values())
    return 2 * (workers or 32)
