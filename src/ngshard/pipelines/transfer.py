"""``ngshard.transfer``: a precomputed image or segmentation into a new precomputed layer,
re-sharded (``sharding`` auto, a spec, or none), re-chunked, re-encoded, cut to a bounding
box, a subset of its scales, then a pyramid below the last one, all in one job of whole-shard
tasks on any executor, resumable. Chunks whose bytes can be carried (same chunk grid and
encoding) are carried without being decoded (``carry.py``); segment layers (skeletons,
meshes) go through :mod:`.segments` (one task per output shard too; legacy meshes can
become multi-resolution ones).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import SpecError
from ..kinds import LEGACY_MESHES, LINKS, MESHES, SEGMENTATION, SKELETONS, kind_of
from ..limits import DEFAULT_TASK_BYTES
from ..sharded.infofile import as_spec, read_info
from ..storage import StorageOptions, open_storage, rooted_options, source_of
from ..types import Encoding
from ..volume.downsample import check_method
from ..volume.factors import pyramid_factors
from ..volume.grid import ChunkGrid
from ..volume.handle import read_volume_info
from ..volume.info import Scale, chunk_nbytes
from ..volume.sharding import auto_sharding
from ..volume.vectors import xyz
from .api import _apart, _destination, _source
from .layout import _pick
from .plan import TaskList, precomputed_tasks
from .runner import Plan, run_plan, volume_plan
from .sources import PrecomputedSource


def transfer(src: str | os.PathLike, dst: str | os.PathLike, *,
             scales: Sequence[int] | None = None, bbox: Any = None,
             chunk_size: Sequence[int] | None = None, encoding: Encoding | None = None,
             sharding: Any = "auto", downsample: bool | int = False,
             method: str | None = None, sparse: bool = False, multires: bool = False,
             lods: int | None = None,
             executor: Executor | None = None, workers: int | None = None,
             progress: bool = True, resume: bool = True, overwrite: bool = False,
             task_bytes: int = DEFAULT_TASK_BYTES,
             storage_options: StorageOptions | None = None,
             src_storage_options: StorageOptions | None = None) -> dict[str, int]:
    """Copy the precomputed layer ``src`` into a new layer ``dst``, changing its layout:
    volumes re-sharded, re-chunked, re-encoded, cut to ``bbox``; skeleton and mesh layers
    moved between a file per segment and shards.

    Parameters
    ----------
    scales
        Indices of the source scales to copy (default all).
    bbox
        ``((x0, y0, z0), (x1, y1, z1))``: the box to keep, in voxels of the first scale
        copied (absolute, voxel_offset included); coarser scales keep the box it covers.
    chunk_size, encoding
        The new chunk size and encoding (default the source's).
    sharding
        "auto" (box shards of about ``task_bytes``), "none" (a file per chunk or segment),
        or a spec (JSON text, dict or file).
    downsample, method, sparse
        Add coarser levels below the last scale copied (True: until one chunk; an integer:
        at most that many), near-isotropic, with ``method`` (default mode for
        segmentations, mean otherwise) and ``sparse`` as :func:`ngshard.downsample`.
    multires, lods
        Legacy meshes only: write them as multi-resolution meshes
        (``neuroglancer_multilod_draco``), each segment's fragments joined, with ``lods``
        levels of detail made by zmesh's simplification (default 3 where the ``meshing``
        extra is installed, else 1), each about a quarter of the triangles of the one below.
    executor, workers, progress, resume, overwrite, task_bytes, storage_options, src_storage_options
        As for :func:`ngshard.convert`.

    Returns
    -------
    dict
        ``tasks``, ``run``, ``skipped``, ``chunks``, ``bytes`` as for convert.

    Raises
    ------
    NotFoundError, SpecError
        No precomputed layer at ``src``; options that do not apply to it.
    MissingDependencyError
        ``lods`` above 1 without zmesh.
    ExistsError
        ``dst`` holds something, and not ``overwrite``.
    """
    roots = {u: o for u, o in ((source_of(src).url, src_storage_options or storage_options),
                               (source_of(dst).url, storage_options)) if "://" in u}
    with rooted_options(roots):  # every open of a URL under src or dst, in every process
        return _transfer(src, dst, scales=scales, bbox=bbox, chunk_size=chunk_size,
                         encoding=encoding, sharding=sharding, downsample=downsample,
                         method=method, sparse=sparse, multires=multires, lods=lods,
                         executor=executor, workers=workers,
                         progress=progress, resume=resume, overwrite=overwrite,
                         task_bytes=task_bytes, roots=roots)


def _transfer(src: str | os.PathLike, dst: str | os.PathLike, *, scales, bbox, chunk_size,
              encoding, sharding: Any, downsample: bool | int, method: str | None,
              sparse: bool, multires: bool, lods: int | None, executor: Executor | None,
              workers: int | None, progress: bool,
              resume: bool, overwrite: bool, task_bytes: int, roots: dict) -> dict[str, int]:
    src, _ = _source(src)
    dst = _destination(dst, "precomputed", src)
    _apart(src, dst)
    doc = read_info(open_storage(src))
    kind = kind_of(doc) if doc is not None else None
    if kind in (SKELETONS, MESHES, LEGACY_MESHES):
        given = {"scales": scales, "bbox": bbox, "chunk_size": chunk_size,
                 "encoding": encoding, "downsample": downsample or None, "method": method}
        wrong = [k for k, v in given.items() if v is not None]
        if wrong or sparse:
            raise SpecError(f"{src} is a {kind} layer: {', '.join(wrong or ['sparse'])} "
                            f"apply to volumes only")
        from .segments import segment_plan

        plan = segment_plan(src, dst, sharding=sharding, multires=multires, lods=lods)
    elif multires or lods is not None:
        raise SpecError(f"{src} is not a mesh layer: multires and lods apply to legacy "
                        f"meshes only")
    else:
        plan = volume_transfer(src, dst, scales=scales, bbox=bbox, chunk_size=chunk_size,
                               encoding=encoding, sharding=sharding, downsample=downsample,
                               method=method, sparse=sparse, task_bytes=task_bytes)
    plan.roots = roots
    return run_plan(plan, executor=executor, workers=workers, progress=progress,
                    resume=resume, overwrite=overwrite, what="transferring")


def _box(bbox: Any, where: str) -> tuple[np.ndarray, np.ndarray] | None:
    if bbox is None:
        return None
    try:
        lo, hi = (np.asarray([int(v) for v in corner], np.int64) for corner in bbox)
    except (TypeError, ValueError):
        lo = hi = np.zeros(0, np.int64)
    if lo.shape != (3,) or hi.shape != (3,) or (hi <= lo).any():
        raise SpecError(f"{where}: bbox must be ((x0, y0, z0), (x1, y1, z1)) with x0 < x1, "
                        f"..., got {bbox!r}")
    return lo, hi


def _cut(scale: Scale, box, first: Scale, where: str) -> tuple[tuple, tuple]:
    """The (offset, size) of ``scale`` inside ``box`` (voxels of ``first``)."""
    off, end = np.asarray(scale.voxel_offset), np.asarray(scale.voxel_offset) + scale.size
    if box is None:
        return tuple(off.tolist()), tuple(scale.size)
    ratio = np.asarray(scale.resolution) / np.asarray(first.resolution)
    lo = np.maximum(np.floor(box[0] / ratio).astype(np.int64), off)
    hi = np.minimum(np.ceil(box[1] / ratio).astype(np.int64), end)
    if (hi <= lo).any():
        raise SpecError(f"{where}: bbox {box[0].tolist()}-{box[1].tolist()} misses scale "
                        f"{scale.key} ({off.tolist()}-{end.tolist()})")
    return tuple(lo.tolist()), tuple((hi - lo).tolist())


def volume_transfer(src: str, dst: str, *, scales=None, bbox=None, chunk_size=None,
                    encoding=None, sharding: Any = "auto", downsample: bool | int = False,
                    method: str | None = None, sparse: bool = False,
                    task_bytes: int = DEFAULT_TASK_BYTES) -> Plan:
    """The plan of a volume transfer (see :func:`transfer`)."""
    from ..volume.encodings import require_codec

    source = read_volume_info(open_storage(src))
    chosen = _pick(source.scales, scales, src)
    box = _box(bbox, src)
    first = source.scales[chosen[0]]
    dtype = np.dtype(source.data_type)
    new_scales: list[Scale] = []
    stage: list[TaskList] = []
    fast: list[bool] = []
    for i in chosen:
        s = source.scales[i]
        off, size = _cut(s, box, first, src)
        chunk = xyz(int(c) for c in chunk_size) if chunk_size else s.chunk_size
        enc = encoding or s.encoding
        require_codec(enc, writing=True)
        chunk_bytes = chunk_nbytes(chunk, source.num_channels, dtype)
        spec = None if sharding in (None, "none") else auto_sharding(
            size, chunk, chunk_bytes, task_bytes, enc) if sharding == "auto" \
            else as_spec(sharding)
        block = s.compressed_segmentation_block_size or (
            (8, 8, 8) if enc == "compressed_segmentation" else None)
        scale = Scale(key=s.key, size=size, chunk_size=chunk, resolution=s.resolution,
                      voxel_offset=off, encoding=enc, sharding=spec,
                      compressed_segmentation_block_size=block, extra=s.extra)
        shift = xyz(int(a - b) for a, b in zip(off, s.voxel_offset))
        # chunks carried as bytes: the same grid (chunks and their origin) and encoding
        quick = chunk == s.chunk_size and enc == s.encoding and \
            block == s.compressed_segmentation_block_size and \
            all(d % c == 0 for d, c in zip(shift, chunk))
        fast.append(quick)
        grid = ChunkGrid(size, chunk, off)
        stage.append(precomputed_tasks(dst, s.key, grid, spec,
                                       PrecomputedSource(src, s.key, shift), chunk_bytes,
                                       task_bytes, quick))
        new_scales.append(scale)
    # the meshes, skeletons and segment properties it links to are not copied along
    info = replace(source, scales=tuple(new_scales),
                   extra={k: v for k, v in source.extra.items() if k not in LINKS})
    stages: list[list[TaskList]] = [stage]
    steps = None if downsample is True else int(downsample)
    factors = [] if not downsample else pyramid_factors(
        new_scales[-1].size, new_scales[-1].resolution, new_scales[-1].chunk_size, steps)
    if factors:
        from .downsample import plan_pyramid

        method = check_method(method or ("mode" if source.type == SEGMENTATION else "mean"),
                              sparse)
        pyramid, levels = plan_pyramid(dst, info, new_scales[-1], factors, method=method,
                                       sparse=sparse, task_bytes=task_bytes,
                                       sharded=new_scales[-1].sharding is not None,
                                       write_info=False)
        stages += pyramid.stages
        for level in levels:
            info = info.with_scale(level)
    job = {"from": src, "to": dst, "info": info.to_json(), "fast": fast,
           "command": f"ngshard transfer {src} {dst}"}
    return volume_plan(dst, info, stages, job, [(src, "info"), (dst, None)])

