"""Where tasks run: any ``concurrent.futures.Executor``. By default a local process pool
whose workers die with it; on a cluster, a Dask ``distributed.Client``'s executor."""

from __future__ import annotations

import ctypes
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing.context import BaseContext

from tqdm import tqdm

from .. import threads
from ..cpus import available_cpus
from ..errors import MissingDependencyError
from ..limits import THREAD_EXIT_SECONDS

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def local_executor(workers: int | None, tasks: int, preload: Sequence[str] = ()
                   ) -> Executor:
    """Where a job of ``tasks`` tasks runs when the caller gives no executor: a job of one
    task on a thread of this process (in a pool it keeps one worker busy and the others
    idle, the task fans its chunks out to threads either way, and a pool's start and the
    worker's opening of the storage again would cost more), else :func:`local_pool` (with
    the modules its tasks ``preload``). A Ctrl-C stops a one-task job once its task ends
    (a thread cannot be killed)."""
    if tasks <= 1:
        return ThreadPoolExecutor(1, thread_name_prefix="ngshard-task")
    return local_pool(workers, preload)


def local_pool(workers: int | None = None, preload: Sequence[str] = ()
               ) -> ProcessPoolExecutor:
    """A process pool of ``workers`` (default: the CPUs this process may use, see
    :func:`ngshard.cpus.available_cpus`). Workers are forked when this process runs one
    thread once OpenBLAS's idle threads are stopped (see :func:`forkable`; they start at
    once); otherwise they come from a forkserver, so none inherits a lock another thread
    held (it costs a new interpreter, about 0.5 s, once per process). The modules named in
    ``preload`` (what the tasks import: kimimaro takes about a CPU second) are imported
    once, before the workers fork (here, or in the forkserver), rather than by each worker;
    one that is not installed is left to the task to report. Workers ignore
    SIGINT: a Ctrl-C in the terminal reaches the whole process group, and only this process
    decides what stops (:func:`stop_pool`). On Linux each worker is killed when its parent
    dies (``kill -9`` of the client leaves no worker behind)."""
    context: BaseContext
    parent: int | None
    forked = forkable()
    if forked and preload:
        _preload(preload)
        forked = forkable()  # an import may have started a thread
    if forked:
        context = multiprocessing.get_context("fork")
        parent = os.getpid()
    else:
        server = multiprocessing.get_context("forkserver")
        server.set_forkserver_preload(["ngshard.pipelines.tasks", *preload])
        context = server
        parent = None  # the forkserver, which exits when this process does
    pool = ProcessPoolExecutor(max_workers=workers or available_cpus(), mp_context=context,
                               initializer=_start_worker, initargs=(parent,))
    # Workers start at the first submit. A Ctrl-C landing in os.fork's at-fork handlers is
    # swallowed there ("Exception ignored") and the job would run on: forked workers start
    # now, with SIGINT held back until they are up (a forkserver forks in its own process:
    # a Ctrl-C is taken at once). Either way a Ctrl-C meanwhile stops the pool.
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


def _preload(modules: Sequence[str]) -> None:
    """Import ``modules``; one not installed is skipped (the task that needs it says so)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def _start_worker(parent: int | None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)
    # tqdm's bars (kimimaro makes them, disabled) would make a named semaphore here that a
    # worker killed by stop_pool leaves behind ("leaked semaphore objects" at exit)
    tqdm.set_lock(threading.RLock())


def forkable() -> bool:
    """Whether this process may fork: it runs one thread, Python's and native ones (an
    object store's runtime, tensorstore's pools), which a forked child would inherit
    stopped, with whatever locks they held. Two kinds of idle threads are stopped first
    (they start again when next needed): ngshard's own thread pools' (when no other Python
    thread runs, see :func:`ngshard.threads.park`), and numpy's OpenBLAS's, kept from its
    import on (as OpenBLAS's own fork handler does). A thread Python has joined may stay a
    moment in the kernel on its way out (at load, tens of milliseconds): while every other
    thread is running, they are waited for, up to a fraction of a second."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return False
    if threading.active_count() > 1 and not threads.park():
        return False
    if not os.path.isdir("/proc/self/task"):  # no /proc: Python's threads only
        return True
    if _other_threads():
        _stop_blas_threads()
    deadline = time.monotonic() + THREAD_EXIT_SECONDS
    while states := _other_threads():
        if not set(states) <= _EXITING or time.monotonic() > deadline:
            return False  # a thread waiting for work (or a lock): it stays
        time.sleep(0.001)
    return True


#: The states of threads on their way out (running, dead)
_EXITING = {"R", "X", "Z"}


def _other_threads() -> list[str]:
    """The states (/proc's R, S, D, ...) of this process's native threads but the caller."""
    me = str(threading.get_native_id())
    states = []
    for tid in os.listdir("/proc/self/task"):
        if tid != me:
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):  # gone meanwhile
                continue
    return states


def _stop_blas_threads() -> None:
    """Stop the idle thread pool of every OpenBLAS this process loaded (numpy's, scipy's)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f
                     if "openblas" in line.lower() and line.count(" ") >= 5}
    except OSError:
        return
    for path in paths:
        try:
            ctypes.CDLL(path).blas_thread_shutdown_()
        except (OSError, AttributeError):  # not a library, or an OpenBLAS without it
            continue


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
    manager = getattr(executor, "_executor_manager_thread", None)
    executor.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(1)
    if manager is not None:  # it sees the workers gone and ends: a next pool may fork
        manager.join(1)


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
