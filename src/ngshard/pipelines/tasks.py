"""What a worker runs: a task (do it, return what it wrote; the client records it as done),
or the probe the client sends before a job starts. Tasks are idempotent (a task run twice
writes the same bytes, each object atomically), so a task retried after its worker died, or
redone after an interruption, leaves nothing half-written."""

from __future__ import annotations

import socket
from collections.abc import Callable

from ..errors import MissingDependencyError, NgShardError, StorageAccessError
from ..storage import open_storage, rooted_options
from .plan import Task
from .pyramid import PyramidTask
from .sources import PrecomputedSource, forget_opened

_job: str | None = None  # the job whose arrays this process holds open


def run_task(task: Task | PyramidTask, job: str, roots: dict | None = None
             ) -> tuple[str, dict]:
    """Run ``task`` of the job ``job`` (a digest); returns its name and what it wrote
    (``chunks``, ``bytes``). ``roots``: the storage options of the trees it opens
    (:func:`~ngshard.storage.rooted_options`)."""
    with rooted_options(roots or {}):
        return _run(task, job)


def _run(task: Task | PyramidTask, job: str) -> tuple[str, dict]:
    global _job
    if job != _job:  # arrays opened for another job may have changed since
        forget_opened()
        _job = job
    if hasattr(task, "run"):  # a step of meshing or skeletonizing (phases.py) carries its work
        stats = task.run()
    elif isinstance(task, PyramidTask):
        from .to_pyramid import fill_pyramid

        stats = fill_pyramid(task)
    else:
        stats = _filler(task)(task)
    return task.name, stats


def _filler(task: Task) -> Callable[[Task], dict]:
    """What runs a task of one output box, by what it reads and writes."""
    if task.kind == "zarr":
        from .to_zarr import fill_zarr

        return fill_zarr
    if task.fast and isinstance(task.source, PrecomputedSource):
        from .carry import fill_carried

        return fill_carried
    if task.fast:
        from .fastpath import fill_fast

        return fill_fast
    from .to_precomputed import fill

    return fill


def probe(probes: list[tuple[str, str | None]], roots: dict | None = None) -> str:
    """Check from a worker that each ``(url, name)`` is reachable (and ``name``, when
    given, exists there), opened with the options of ``roots``
    (:func:`~ngshard.storage.rooted_options`); returns the worker's host name.

    Raises
    ------
    StorageAccessError
        Naming the URL, the worker's host and what failed (missing credentials, an unknown
        endpoint, a path this worker does not see).
    """
    host = socket.gethostname()
    with rooted_options(roots or {}):
        for url, name in probes:
            _reach(url, name, host)
    return host


def _reach(url: str, name: str | None, host: str) -> None:
    try:
        found = open_storage(url).stat(name or ".ngshard-probe") is not None
    except NgShardError as e:
        if isinstance(e, MissingDependencyError):
            raise
        raise StorageAccessError(f"a worker on {host} cannot reach {url}: {e}") from None
    except Exception as e:  # whatever the backend raises: credentials, DNS, refused
        raise StorageAccessError(
            f"a worker on {host} cannot reach {url}: {type(e).__name__}: {e}. Workers "
            f"need the same access as this client: pass storage_options= (credentials, "
            f"endpoint) to have them sent with every task") from None
    if name is not None and not found:
        raise StorageAccessError(
            f"a worker on {host} does not see {url}/{name}, which this client reads: "
            f"give a path or URL every worker can reach (a shared filesystem or an "
            f"object store)")
