"""What a worker runs: a task (do it, return what it wrote; the client records it as done),
or the probe the client sends before a job starts. Tasks are idempotent (a task run twice
writes the same bytes, each object atomically), so a task retried after its worker died, or
redone after an interruption, leaves nothing half-written."""

from __future__ import annotations

import socket

from ..errors import NgShardError, StorageAccessError
from .plan import Task
from .sources import forget_opened, storage_at

_job: str | None = None  # the job whose arrays this process holds open


def run_task(task: Task, job: str) -> tuple[str, dict]:
    """Run ``task`` of the job ``job`` (a digest); returns its name and what it wrote
    (``chunks``, ``bytes``)."""
    global _job
    if job != _job:  # arrays opened for another job may have changed since
        forget_opened()
        _job = job
    if task.kind == "zarr":
        from .to_zarr import fill_zarr as fill
    elif task.fast:
        from .fastpath import fill_fast as fill
    else:
        from .to_precomputed import fill
    return task.name, fill(task)


def probe(probes: list[tuple[str, str | None]], storage_options: dict | None) -> str:
    """Check from a worker that each ``(url, name)`` is reachable (and ``name``, when
    given, exists there); returns the worker's host name.

    Raises
    ------
    StorageAccessError
        Naming the URL, the worker's host and what failed (missing credentials, an unknown
        endpoint, a path this worker does not see).
    """
    host = socket.gethostname()
    for url, name in probes:
        try:
            storage = storage_at(url, storage_options)
            found = storage.stat(name or ".ngshard-probe") is not None
        except NgShardError:
            raise
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
    return host
