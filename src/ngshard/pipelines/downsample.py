"""``ngshard.downsample``: coarser levels of a precomputed scale, a whole pyramid in one pass
over the data, as whole-shard tasks on any executor, resumable."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any

import numpy as np

from ..destination import claim
from ..errors import ExistsError, SpecError
from ..kinds import SEGMENTATION
from ..layers.dispatch import existing_source
from ..limits import DEFAULT_TASK_BYTES
from ..storage import (
    StorageOptions,
    open_storage,
    require_family,
    rooted_options,
    source_of,
)
from ..volume.downsample import check_method
from ..volume.factors import pyramid_factors
from ..volume.handle import read_volume_info, write_volume_info
from ..volume.info import Scale, VolumeInfo
from .plan import TaskList, listed
from .pyramid import plan_levels, pyramid_tasks
from .runner import Plan, run_plan


def downsample(url: str | os.PathLike, *, levels: int | None = None,
               factor: Sequence[int] | None = None, method: str | None = None,
               sparse: bool = False, scale: int | str | None = None,
               sharding: str = "auto", executor: Executor | None = None,
               workers: int | None = None, progress: bool = True, resume: bool = True,
               overwrite: bool = False, task_bytes: int = DEFAULT_TASK_BYTES,
               storage_options: StorageOptions | None = None) -> dict[str, Any]:
    """Add coarser levels below a scale of the precomputed volume at ``url``, every level
    of a task's box made from one read of it (see :func:`plan_pyramid`).

    Parameters
    ----------
    levels
        How many levels (default: until the coarsest fits in one chunk).
    factor
        The same (x, y, z) factor for every level; default neuroglancer's near-isotropic
        rule (4x4x40 nm: 2x2x1 until the voxel is near isotropic, then 2x2x2).
    method
        mean, mode, min, max or stride (default mode for a segmentation, mean otherwise).
    sparse
        Mode where background (0) wins a block only when it holds nothing else.
    scale
        The scale (index or key) the levels are made from (default the coarsest).
    sharding
        "auto": sharded as the source scale is (shards sized to the tasks), or "none".
    executor, workers, progress, resume, task_bytes
        As for :func:`ngshard.convert`.
    overwrite
        Replace levels of the same keys that are there already.
    storage_options
        How every process reaches ``url`` where it is not a local path (as for
        :func:`ngshard.convert`).

    Returns
    -------
    dict
        ``tasks``, ``run``, ``skipped``, ``chunks``, ``bytes`` (as convert), ``levels`` (the
        keys made).

    Raises
    ------
    NotFoundError, SpecError
        No volume at ``url``, a bad method, factor or sharding.
    ExistsError
        A level's key is a scale there already (or its folder holds chunks), and not
        ``overwrite``.
    """
    plain = source_of(url).url
    roots = {plain: storage_options} if "://" in plain else {}
    with rooted_options(roots):  # every open of a URL under it, in every process
        return _downsample(url, levels=levels, factor=factor, method=method, sparse=sparse,
                           scale=scale, sharding=sharding, executor=executor, workers=workers,
                           progress=progress, resume=resume, overwrite=overwrite,
                           task_bytes=task_bytes, roots=roots)


def _downsample(url: str | os.PathLike, *, levels: int | None, factor: Sequence[int] | None,
                method: str | None, sparse: bool, scale: int | str | None, sharding: str,
                executor: Executor | None, workers: int | None, progress: bool, resume: bool,
                overwrite: bool, task_bytes: int, roots: dict) -> dict[str, Any]:
    storage, source = existing_source(url)
    require_family(source, url, "precomputed")
    info = read_volume_info(storage)
    src = info.scale(len(info.scales) - 1 if scale is None else scale)
    method = method or ("mode" if info.type == SEGMENTATION else "mean")
    check_method(method, sparse)
    if sharding not in ("auto", "none"):
        raise SpecError(f"sharding must be 'auto' or 'none', not {sharding!r}")
    factors = pyramid_factors(src.size, src.resolution, src.chunk_size, levels, factor)
    if not factors:
        return {"tasks": 0, "run": 0, "skipped": 0, "chunks": 0, "bytes": 0, "levels": []}
    plan, new = plan_pyramid(storage.url, info, src, factors, method=method, sparse=sparse,
                              sharded=sharding == "auto" and src.sharding is not None,
                              task_bytes=task_bytes)
    made = [s.key for s in new]
    own = [s.key for s in info.scales if s.key in made and s != src]
    job = {**plan.job, "command": f"ngshard downsample {storage.url}"}

    def claim_levels(overwrite: bool) -> None:
        if own and not overwrite:
            raise ExistsError(f"{storage.url}: scale(s) {', '.join(own)} are there already: "
                              f"pass overwrite=True (--force) to replace them")
        if own:  # out of the info first: no info then names the files being replaced
            write_volume_info(storage, replace(
                info, scales=tuple(s for s in info.scales if s.key not in own)))
        for key in made:
            claim(storage.child(key), overwrite=overwrite)

    plan = replace(plan, job=json.loads(json.dumps(job)), claim=claim_levels, roots=roots,
                   probes=[(storage.url, "info")])
    stats = run_plan(plan, executor=executor, workers=workers, progress=progress,
                     resume=resume, overwrite=overwrite, what="downsampling")
    return {**stats, "levels": made}


def plan_pyramid(url: str, info: VolumeInfo, src: Scale, factors: list[tuple[int, int, int]],
                 *, method: str, sparse: bool, sharded: bool, task_bytes: int,
                 write_info: bool = True) -> tuple[Plan, list[Scale]]:
    """The plan that makes the levels ``factors`` below scale ``src`` of the layer at
    ``url`` (its info ``info``), and the levels; the info naming them is written once every
    task is done (``write_info``; False when the caller writes it)."""
    voxel_bytes = np.dtype(info.data_type).itemsize * info.num_channels
    levels, units, stages = plan_levels(src, factors, voxel_bytes, task_bytes, sharded)
    keys = [s.key for s in levels]
    if len(set(keys)) != len(keys) or src.key in keys:
        raise SpecError(f"{url}: the levels' keys {keys} are not distinct")
    full = info
    for level in levels:
        full = full.with_scale(level)
    tasks: list[list[TaskList]] = [listed(stage) for stage in pyramid_tasks(
        url, full, src, levels, units, stages, factors, method, sparse)]
    storage = open_storage(url)
    dirs = [storage.child(k) for k in keys]

    def prepare(empty: bool) -> None:
        for d in dirs:  # a fresh job replaces what an earlier one left there
            for name in d.list():
                d.delete(name)

    def finish() -> None:  # the info last, as stored now (another scale may have come)
        now = read_volume_info(storage)
        for level in levels:
            now = now.with_scale(level)
        write_volume_info(storage, now)

    job = {"from": url, "to": url, "levels": [s.to_json() for s in levels],
           "source": src.key, "method": method, "sparse": sparse}
    return Plan(json.loads(json.dumps(job)), url, prepare, tasks, dirs,
                finish=finish if write_info else None), levels
