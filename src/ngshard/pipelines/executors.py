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

from ..cpus import available_cpus
from ..errors import MissingDependencyError

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def local_pool(workers: int | None = None) -> ProcessPoolExecutor:
    """A process pool of ``workers`` (default: the CPUs this process may use, see
    :func:`ngshard.cpus.available_cpus`). Workers are forked while this process has one
    thread (they start at once); otherwise they come from a forkserver, so none inherits a
    lock another thread held (it costs a new interpreter, about 0.5 s). On Linux each worker
    is killed when its parent dies (``kill -9`` of the client leaves no worker behind)."""
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
    return ProcessPoolExecutor(max_workers=workers or available_cpus(), mp_context=context,
                               initializer=die_with_parent, initargs=(parent,))


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
