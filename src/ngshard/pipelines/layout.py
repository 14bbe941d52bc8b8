"""Deciding a conversion's destination from its source, and the tasks that fill it.

zarr -> precomputed: every level of an OME-Zarr multiscale group (or the one array) becomes
a scale, with its voxel size in nm and its offset from the OME transforms; integer labels
(uint32, uint64, int64) become a segmentation layer with compressed_segmentation, the rest an
image of raw chunks; ``downsample`` adds coarser scales made from the scale above.
precomputed -> zarr: an OME-Zarr 0.5 group with one Zarr v3 sharded array per scale, axes
(c,) z, y, x.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SpecError
from ..limits import DEFAULT_TASK_BYTES
from ..sharded.infofile import as_spec
from ..storage import Storage, open_storage
from ..volume.factors import pyramid_factors
from ..volume.grid import ChunkGrid
from ..volume.handle import read_volume_info
from ..volume.info import DATA_TYPES, Scale, VolumeInfo, chunk_nbytes
from ..volume.layers import scale_key
from ..volume.sharding import auto_sharding
from ..volume.vectors import xyz
from ..zarr.handle import ArrayHandle
from ..zarr.ome import axis_roles, multiscales_05, read_group, to_nm
from . import fastpath
from .plan import TaskList, precomputed_tasks, task_box, zarr_tasks
from .runner import Plan, volume_plan
from .sources import PrecomputedSource, ZarrSource

_DTYPES = {"bool": "uint8", "int64": "uint64"}  # what precomputed stores them as
_LABELS = ("uint32", "uint64")


@dataclass(frozen=True)
class _Level:
    url: str
    roles: dict
    resolution: tuple[float, float, float]
    offset: tuple[int, int, int]


def _zarr_levels(src: str, axes: str | None, resolution: Sequence[float] | None = None,
                 offset: Sequence[int] | None = None, units: str | None = None
                 ) -> list[_Level]:
    """The arrays of a zarr source, finest first, with their axis roles and placement:
    from OME metadata, or from ``resolution`` (x, y, z voxel size of the finest level, in
    ``units``, default nm), ``offset`` (its voxel offset) and ``units`` (of OME scales
    without units) where the source has none."""
    ms = read_group(src)
    if ms is None:
        meta = ArrayHandle.open(src).meta
        names = meta.dimension_names if meta.dimension_names and \
            None not in meta.dimension_names else None
        given = [to_nm(r, units or "nm", src) for r in resolution] if resolution \
            else [1.0, 1.0, 1.0]
        return [_Level(src, axis_roles(len(meta.shape), names, axes, src), xyz(given),
                       xyz([int(o) for o in offset] if offset else [0, 0, 0]))]
    roles = axis_roles(len(ms.axes), ms.axes, axes, src)
    spatial = [roles[a] for a in "xyz"]
    if (resolution is not None or units) and all(ms.axes[i].unit for i in spatial):
        raise SpecError(f"{src}: its OME metadata gives the units "
                        f"({', '.join(str(ms.axes[i].unit) for i in spatial)}): "
                        f"resolution and units apply to sources without")
    if offset is not None and any(t for t in ms.levels[0].translation):
        raise SpecError(f"{src}: its OME metadata gives a translation: offset applies to "
                        f"sources without")
    base = ms.levels[0]
    levels = []
    for level in ms.levels:
        res: list[float] = []
        off: list[int] = []
        for k, i in enumerate(spatial):
            ratio = level.scale[i] / base.scale[i] if base.scale[i] else 1.0
            res.append(to_nm(resolution[k], units or "nm", src) * ratio if resolution
                       is not None else to_nm(level.scale[i], ms.axes[i].unit or units, src))
            off.append(int(np.floor(offset[k] / ratio)) if offset is not None else
                       int(np.floor(level.translation[i] / level.scale[i] + 0.5))
                       if level.scale[i] else 0)
        levels.append(_Level(f"{src.rstrip('/')}/{level.path}", roles, xyz(res), xyz(off)))
    return levels


def _pick(items: Sequence, scales: Sequence[int] | None, what: str) -> list[int]:
    if scales is None:
        return list(range(len(items)))
    bad = [s for s in scales if not 0 <= int(s) < len(items)]
    if bad:
        raise SpecError(f"scales {bad} do not exist: {what} has {len(items)}")
    return [int(s) for s in scales]


def _sharding(sharding: Any, size, chunk, chunk_bytes: int, encoding: str, task_bytes: int):
    if sharding is None or sharding == "none":
        return None
    if sharding == "auto":
        return auto_sharding(size, chunk, chunk_bytes, task_bytes, encoding)
    return as_spec(sharding)


def zarr_to_precomputed(src: str, dst: str, *, scales=None, chunk_size=None, encoding=None,
                        sharding: Any = "auto", axes: str | None = None,
                        downsample: bool | int = False, task_bytes: int = DEFAULT_TASK_BYTES,
                        resolution: Sequence[float] | None = None,
                        offset: Sequence[int] | None = None, units: str | None = None
                        ) -> Plan:
    levels = _zarr_levels(src, axes, resolution, offset, units)
    chosen = _pick(levels, scales, src)
    first_array = ArrayHandle.open(levels[chosen[0]].url)
    first = first_array.meta
    dtype_name = _DTYPES.get(first.dtype.name, first.dtype.name)
    if dtype_name not in DATA_TYPES:
        raise SpecError(f"{src}: data type {first.dtype} has no precomputed equivalent "
                        f"({', '.join(DATA_TYPES)})")
    dtype = np.dtype(dtype_name)
    roles = levels[0].roles
    channels = first.shape[roles["c"]] if "c" in roles else 1
    if "t" in roles and first.shape[roles["t"]] != 1:
        raise SpecError(f"{src}: a time axis of {first.shape[roles['t']]} points: precomputed "
                        f"holds one (convert a single time point)")
    encoding = encoding or ("compressed_segmentation" if dtype_name in _LABELS else "raw")
    layer_type = "segmentation" if dtype_name in _LABELS or \
        encoding == "compressed_segmentation" else "image"
    if chunk_size is None:
        inner = tuple(first.chunks[roles[a]] for a in "xyz")
        chunk_size = inner if all(8 <= c <= 512 for c in inner) else (64, 64, 64)
    chunk_size = tuple(int(c) for c in chunk_size)
    chunk_bytes = chunk_nbytes(chunk_size, channels, dtype)
    scale_list, sources, used = [], [], set()
    for i in chosen:
        level = levels[i]
        array = first_array if i == chosen[0] else ArrayHandle.open(level.url)
        size = xyz(int(array.meta.shape[level.roles[a]]) for a in "xyz")
        key = scale_key(level.resolution)
        key = key if key not in used else f"s{i}"
        used.add(key)
        scale_list.append(Scale(
            key=key, size=size, chunk_size=chunk_size, resolution=level.resolution,
            voxel_offset=level.offset, encoding=encoding,
            sharding=_sharding(sharding, size, chunk_size, chunk_bytes, encoding, task_bytes),
            compressed_segmentation_block_size=(8, 8, 8)
            if encoding == "compressed_segmentation" else None))
        sources.append((array, ZarrSource(level.url, tuple(sorted(level.roles.items())))))
    steps = 0 if len(levels) > 1 or not downsample else None if downsample is True \
        else int(downsample)
    factors = [] if steps == 0 else pyramid_factors(
        scale_list[-1].size, scale_list[-1].resolution, chunk_size, steps)
    info = VolumeInfo.from_json({"type": layer_type, "data_type": dtype_name,
                                 "num_channels": channels,
                                 "scales": [s.to_json() for s in scale_list]})
    first_stage, fast = [], []
    for scale, (array, source) in zip(scale_list, sources):
        grid = ChunkGrid(scale.size, scale.chunk_size, scale.voxel_offset)
        quick = array.meta.dtype == dtype and \
            fastpath.eligible(array, dict(source.roles), scale, dtype)
        fast.append(quick)
        first_stage.append(precomputed_tasks(dst, scale.key, grid, scale.sharding, source,
                                             chunk_bytes, task_bytes, quick))
    stages: list[list[TaskList]] = [first_stage]
    if factors:  # the pyramid below the last level, made as `ngshard downsample` makes it
        from .downsample import plan_pyramid

        pyramid, coarse = plan_pyramid(
            dst, info, scale_list[-1], factors, sparse=False, task_bytes=task_bytes,
            method="mode" if layer_type == "segmentation" else "mean",
            sharded=scale_list[-1].sharding is not None, write_info=False)
        stages += pyramid.stages
        for scale in coarse:
            info = info.with_scale(scale)
    job = {"from": src, "to": dst, "info": info.to_json(), "fast": fast,
           "sources": [s.roles for _, s in sources]}
    probes = [(src, _metadata(open_storage(src))), (dst, None)]
    return volume_plan(dst, info, stages, job, probes)


_CODECS = {"zstd": None, "gzip": [{"name": "bytes", "configuration": {"endian": "little"}},
                                  {"name": "gzip", "configuration": {"level": 5}}],
           "raw": [{"name": "bytes", "configuration": {"endian": "little"}}]}


def precomputed_to_zarr(src: str, dst: str, *, scales=None, encoding=None,
                        task_bytes: int = DEFAULT_TASK_BYTES) -> Plan:
    from ..zarr import create_array

    info = read_volume_info(open_storage(src))
    encoding = encoding or "zstd"
    if encoding not in _CODECS:
        raise SpecError(f"zarr chunks can be encoded {', '.join(_CODECS)}, not {encoding!r}")
    channels = info.num_channels
    lead = (channels,) if channels > 1 else ()
    arrays, stages, levels = [], [], []
    for i in _pick(info.scales, scales, src):
        s = info.scales[i]
        grid = ChunkGrid(s.size, s.chunk_size)
        chunk_bytes = chunk_nbytes(s.chunk_size, channels, info.data_type)
        box = task_box(grid, chunk_bytes, task_bytes)  # a task holds one zarr shard
        path = f"s{i}"
        url = f"{dst.rstrip('/')}/{path}"
        shape = lead + tuple(s.size[::-1])
        chunks = lead + tuple(s.chunk_size[::-1])
        shards = lead + tuple(b * c for b, c in zip(box[::-1], s.chunk_size[::-1]))
        arrays.append((url, shape, chunks, shards))
        levels.append((path, s.resolution, tuple(o * r for o, r in zip(s.voxel_offset,
                                                                       s.resolution))))
        stages.append(zarr_tasks(url, shape, shards, PrecomputedSource(src, s.key)))
    attributes = multiscales_05(levels, channels > 1)
    names = (("c",) if channels > 1 else ()) + ("z", "y", "x")
    storage = open_storage(dst)

    def prepare(empty: bool) -> None:
        group = {"zarr_format": 3, "node_type": "group", "attributes": attributes}
        storage.write("zarr.json", [json.dumps(group, indent=2).encode()])
        for url, shape, chunks, shards in arrays:
            create_array(url, shape, info.data_type, chunks, shards=shards,
                         codecs=_CODECS[encoding], dimension_names=names, overwrite=True)

    job = {"from": src, "to": dst, "info": info.to_json(), "encoding": encoding,
           "arrays": arrays}
    return Plan(json.loads(json.dumps(job)), dst, prepare, [stages],
                [open_storage(a[0]) for a in arrays], [(src, "info"), (dst, None)])


def _metadata(storage: Storage) -> str | None:
    """The name of the zarr metadata object at ``storage`` (what a worker must see)."""
    names = ("zarr.json", ".zarray", ".zgroup", ".zattrs")
    found = [n for n, info in zip(names, storage.stat_many(names)) if info is not None]
    return found[0] if found else None


def is_precomputed(url: str | Storage) -> bool:
    """Whether ``url`` holds a precomputed layer (an ``info`` file) rather than zarr."""
    return open_storage(url).read("info") is not None
