"""The one function a worker runs: do a task, then record it as done. Tasks are idempotent
(a task run twice writes the same bytes, each object atomically), so a task retried after
its worker died, or redone after an interruption, leaves nothing half-written."""

from __future__ import annotations

from collections.abc import Callable

from ..storage import rooted_options
from . import resume
from .plan import Task
from .pyramid import PyramidTask
from .sources import PrecomputedSource, forget_opened

_job: str | None = None  # the job whose arrays this process holds open


def run_task(task: Task | PyramidTask, root: str, job: str, roots: dict | None = None
             ) -> tuple[str, dict]:
    """Run ``task`` of the job ``job`` (a digest) writing under ``root``; returns its name and
    what it wrote (``chunks``, ``bytes``). ``roots``: the storage options of the trees it
    opens (:func:`~ngshard.storage.rooted_options`)."""
    with rooted_options(roots or {}):
        return _run(task, root, job)


def _run(task: Task | PyramidTask, root: str, job: str) -> tuple[str, dict]:
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
    resume.mark_done(root, task.name)
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
