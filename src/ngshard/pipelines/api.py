"""``ngshard.convert``: zarr -> precomputed or the reverse, chosen by the source, as
independent tasks on any executor, resumable."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..destination import claim
from ..errors import NgShardError, SpecError
from ..layers.dispatch import checked_source
from ..progress import progress_bar
from ..storage import StorageOptions, open_storage, remove_stale, rooted_options, source_of
from ..types import Encoding
from . import resume as records
from .executors import in_flight, local_pool
from .layout import (
    DEFAULT_TASK_BYTES,
    Plan,
    is_precomputed,
    precomputed_to_zarr,
    zarr_to_precomputed,
)
from .plan import Task
from .tasks import run_task


def convert(src: str | os.PathLike, dst: str | os.PathLike, *,
            scales: Sequence[int] | None = None, chunk_size: Sequence[int] | None = None,
            encoding: Encoding | None = None, sharding: Any = "auto",
            executor: Executor | None = None, workers: int | None = None,
            progress: bool = True, resume: bool = True, axes: str | None = None,
            downsample: bool | int = False, task_bytes: int = DEFAULT_TASK_BYTES,
            overwrite: bool = False, storage_options: StorageOptions | None = None,
            src_storage_options: StorageOptions | None = None) -> dict[str, int]:
    """Convert a zarr array or OME-Zarr group to a precomputed layer, or a precomputed layer
    to an OME-Zarr 0.5 group of Zarr v3 sharded arrays (which, by ``src``: a precomputed
    layer has an ``info``).

    Parameters
    ----------
    src, dst
        Local paths or fsspec URLs every worker can reach, or Neuroglancer sources
        (``zarr://...``, ``precomputed://...``, ``gs://b/p/|zarr3:``): a format named on
        ``src`` says which way to convert, one named on ``dst`` must be the one made.
    scales
        Indices of the source levels to convert (default all).
    chunk_size
        zarr -> precomputed: the (x, y, z) chunk size (default the zarr inner chunk, reversed,
        when between 8 and 512 per axis, else 64^3).
    encoding
        zarr -> precomputed: raw, compressed_segmentation, jpeg or png (default
        compressed_segmentation for uint32/uint64/int64 labels, raw otherwise);
        precomputed -> zarr: zstd (default), gzip or raw inner chunks.
    sharding
        zarr -> precomputed: "auto" (box shards of about ``task_bytes``), "none" (a file per
        chunk) or a spec (JSON text, dict or file).
    executor
        Where tasks run (any ``concurrent.futures.Executor``, e.g. a Dask
        ``Client(...).get_executor()``); default a local process pool of ``workers``.
    progress
        A progress bar over tasks.
    resume
        Skip the tasks an interrupted run of the same job finished (recorded under
        ``dst/.ngshard-convert/``); False starts afresh.
    overwrite
        Replace what ``dst`` holds (a layer, a zarr array or group, an unfinished conversion
        of another job): all of it is removed first. By default that is refused; an
        unfinished run of this same job is resumed (or restarted) either way.
    axes
        The source's axes as letters (x, y, z, c, t), overriding its metadata: "czyx".
    downsample
        zarr -> precomputed from a single level: add coarser scales (2x per axis, until the
        scale fits a chunk; an integer caps their number).
    task_bytes
        Uncompressed bytes per task (auto shard size): a worker's memory is about this.
    storage_options
        How to reach ``src`` and ``dst`` where they are not local paths (credentials,
        ``anon``, ``endpoint_url``, ...; ``retries`` and ``retry_seconds``: see
        :mod:`ngshard.storage.options`); every worker opens them so.
    src_storage_options
        Options for ``src`` alone, where it needs others than ``dst`` (another bucket, a
        public one read with ``anon``); default ``storage_options``.

    Returns
    -------
    dict
        ``tasks`` (of the job), ``run`` (this call), ``skipped`` (done before), ``chunks``
        and ``bytes`` written by this call.

    Raises
    ------
    NotFoundError, SpecError, CorruptDataError
        A missing or invalid source (naming the file), a format named on ``src`` or ``dst``
        that contradicts it; a task's error stops the job (tasks finished stay recorded;
        shards are never left half-written).
    ExistsError
        ``dst`` holds something other than this job's unfinished run, and not
        ``overwrite``.
    NgShardError
        A worker process died (the message says what to do).
    """
    roots = {u: o for u, o in ((source_of(src).url, src_storage_options or storage_options),
                               (source_of(dst).url, storage_options)) if "://" in u}
    with rooted_options(roots):  # every open of a URL under src or dst, in every process
        return _convert(src, dst, scales=scales, chunk_size=chunk_size, encoding=encoding,
                        sharding=sharding, executor=executor, workers=workers,
                        progress=progress, resume=resume, axes=axes, downsample=downsample,
                        task_bytes=task_bytes, overwrite=overwrite, roots=roots)


def _convert(src: str | os.PathLike, dst: str | os.PathLike, *, scales: Sequence[int] | None,
             chunk_size: Sequence[int] | None, encoding: Encoding | None, sharding: Any,
             executor: Executor | None, workers: int | None, progress: bool, resume: bool,
             axes: str | None, downsample: bool | int, task_bytes: int, overwrite: bool,
             roots: dict) -> dict[str, int]:
    src, to_zarr = _source(src)
    dst = _destination(dst, "zarr" if to_zarr else "precomputed", src)
    _apart(src, dst)
    if to_zarr:
        given = {"chunk_size": chunk_size, "axes": axes, "downsample": downsample or None}
        wrong = [k for k, v in given.items() if v is not None]
        if wrong or sharding not in ("auto", None):
            raise SpecError(f"{src} is precomputed: {', '.join(wrong or ['sharding'])} only "
                            f"apply to zarr -> precomputed")
        plan = precomputed_to_zarr(src, dst, scales=scales, encoding=encoding,
                                   task_bytes=task_bytes)
    else:
        plan = zarr_to_precomputed(src, dst, scales=scales, chunk_size=chunk_size,
                                   encoding=encoding, sharding=sharding, axes=axes,
                                   downsample=downsample, task_bytes=task_bytes)
    return run_plan(plan, dst, executor=executor, workers=workers, progress=progress,
                    resume=resume, overwrite=overwrite, roots=roots)


def _apart(src: str, dst: str) -> None:
    """Refuse a destination that is the source, or holds it, or lies inside it: replacing
    it would remove the source."""
    a, b = (open_storage(u).url.rstrip("/") for u in (src, dst))
    if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
        raise SpecError(f"the destination {dst} and the source {src} overlap: convert into "
                        f"another folder")


def _source(src: str | os.PathLike) -> tuple[str, bool]:
    """The plain URL of a conversion's source, and whether it is precomputed (to zarr)."""
    storage, source = checked_source(src)
    if source.format is not None:
        return source.url, source.family == "precomputed"
    return source.url, is_precomputed(storage)


def _destination(dst: str | os.PathLike, makes: str, src: str) -> str:
    """The plain URL of a conversion's destination, refusing a format it will not hold."""
    source = source_of(dst)
    if source.family not in (None, makes) or source.format == "zarr2":
        made = "Zarr v3" if makes == "zarr" else "a precomputed layer"
        raise SpecError(f"{os.fspath(dst)}: the destination says {source.format}, but "
                        f"converting {src} makes {made}")
    return source.url


def run_plan(plan: Plan, dst: str, *, executor: Executor | None = None,
             workers: int | None = None, progress: bool = True, resume: bool = True,
             overwrite: bool = False, roots: dict | None = None) -> dict[str, int]:
    """Run a plan's stages in order, skipping tasks done before (see :func:`convert`);
    ``roots``: the storage options of the trees the tasks open (see
    :func:`~ngshard.storage.rooted_options`), given to every task."""
    total = sum(map(len, plan.stages))
    # the tasks of each output (a scale's key or an array's name), for `verify` of a job
    # that does not finish
    parts = Counter(t.name.split("/", 1)[0] for stage in plan.stages for t in stage)
    record = {**plan.job, "tasks": dict(sorted(parts.items()))}
    if not records.recorded(dst, record):  # not an unfinished run of this job
        claim(open_storage(dst), overwrite=overwrite, into=plan.dirs)
    done = records.start(dst, record, resume)
    if not done:
        plan.prepare()
    job = hashlib.sha256(json.dumps(plan.job, sort_keys=True).encode()).hexdigest()[:16]
    todo = [[t for t in stage if t.name not in done] for stage in plan.stages]
    stats = {"tasks": total, "run": 0, "skipped": total - sum(map(len, todo)), "chunks": 0,
             "bytes": 0}
    pool = local_pool(workers) if executor is None else executor
    try:
        bar = progress_bar(_results(pool, todo, dst, job, roots or {}), enabled=progress,
                           total=total, initial=stats["skipped"], desc="converting",
                           unit="task")
        for _, result in bar:
            stats["run"] += 1
            stats["chunks"] += result["chunks"]
            stats["bytes"] += result["bytes"]
    except BrokenProcessPool as e:
        raise NgShardError(
            f"converting to {dst}: a worker process died ({e}). Killed for memory? Try fewer "
            f"workers. From a script, the pool's workers import it again: call "
            f"ngshard.convert under 'if __name__ == \"__main__\":' (or pass "
            f"executor=concurrent.futures.ThreadPoolExecutor()). Run again to resume."
        ) from None
    finally:
        if executor is None:  # our own pool
            pool.shutdown(cancel_futures=True)
    records.clear(dst)
    for d in plan.dirs:
        if d.local_root is not None:
            remove_stale(d.local_root)  # temporary files of workers that died
    return stats


def _results(executor: Executor, stages: list[list[Task]], dst: str, job: str, roots: dict
             ) -> Iterator[tuple[str, dict]]:
    """Results of every task, stage after stage, with a bounded number submitted at once;
    the first failure cancels what is not running yet, waits for what is (so nothing is
    being written once the error is raised), and is raised."""
    window = in_flight(executor)
    for stage in stages:
        pending: deque[Future] = deque()
        try:
            for task in stage:
                pending.append(executor.submit(run_task, task, dst, job, roots))
                while len(pending) >= window:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()
            wait(pending)
