"""Planning a pyramid: several coarser levels of a scale in one pass over it.

A stage reads its source scale once, in boxes of about ``task_bytes``, and every task makes
all the stage's levels of its box. Each level is sharded (or chunked) so that the source
footprint of one of its shards fits in a task's box: a task writes whole shards of every
level, never reading one back. A level whose one chunk would need more than a task's box
begins the next stage, whose source is the last level of the stage before.

Which task writes a shard: the one whose box holds the shard's first source voxel. With
voxel offsets that are multiples of the factors, the shards of every level tile the task
boxes exactly; otherwise a task reads a little past its box (the footprint of its shards).
Pure: no I/O, the tasks are small picklable values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..sharded.spec import ShardingSpec
from ..volume.grid import ChunkGrid
from ..volume.info import Scale, VolumeInfo
from ..volume.scales import coarser_scale
from ..volume.sharding import fitting_sharding
from ..volume.vectors import xyz


@dataclass(frozen=True)
class PyramidTask:
    """Make the levels ``levels`` (keys) of the source box [lo, hi) (voxels, 0-based in
    scale ``source``): for level i, the shards (or, unsharded, chunks) at positions
    ``units[i]`` of its grid of shards. ``info`` is the layer's info with every level (the
    stored one names them only once all are made)."""

    name: str
    url: str
    info: str
    source: str
    lo: tuple[int, int, int]
    hi: tuple[int, int, int]
    levels: tuple[str, ...]
    factors: tuple[tuple[int, int, int], ...]
    method: str
    sparse: bool
    unit_shapes: tuple[tuple[int, int, int], ...]  # per level: a unit's box of chunks
    units: tuple[np.ndarray, ...] = field(compare=False)
    kind: str = "pyramid"


def level_unit(grid: ChunkGrid, spec: ShardingSpec | None, most: Sequence[int]
               ) -> tuple[int, int, int]:
    """The box of chunks a task writes whole: a shard, or (a file per chunk) the box of
    at most ``most`` chunks, so a task holds a few units, not a unit per chunk."""
    if spec is None:
        return (min(most[0], grid.shape[0]), min(most[1], grid.shape[1]),
                min(most[2], grid.shape[2]))
    shape = grid.shard_shape(spec)
    assert shape is not None, "pyramid levels have box shards"
    return shape


def _grid(scale: Scale) -> ChunkGrid:
    return ChunkGrid(scale.size, scale.chunk_size, scale.voxel_offset)


def plan_levels(source: Scale, factors: list[tuple[int, int, int]], voxel_bytes: int,
                task_bytes: int, sharded: bool, chunk_size=None
                ) -> tuple[list[Scale], list[tuple[int, int, int]],
                           list[tuple[int, list[int], np.ndarray]]]:
    """The new levels' scales, the box of chunks each writes as a unit (a shard, or chunk
    files), and the stages: (index of the stage's source in ``[source] + levels``, indices
    of the levels it makes, its task box in source voxels)."""
    levels: list[Scale] = []
    unit_shapes: list[tuple[int, int, int]] = []
    stages: list[tuple[int, list[int], np.ndarray]] = []
    k = 0
    parent = source
    while k < len(factors):
        src_index, src = k, parent
        extent = np.asarray(src.size)
        cs = np.asarray(chunk_size or src.chunk_size)
        cumulative = np.ones(3, np.int64)
        made: list[int] = []
        box = np.minimum(cs * np.asarray(factors[k]), extent)  # (the first level's, at least)
        while k < len(factors):
            f = np.asarray(factors[k])
            reach = np.minimum(cs * cumulative * f, extent)
            if made and math.prod(reach.tolist()) * voxel_bytes > task_bytes:
                break
            cumulative = cumulative * f
            box = reach
            made.append(k)
            k += 1
        while (box < extent).any():  # grow the box while it fits the budget
            bigger = np.where(box < extent, np.minimum(box * 2, extent), box)
            if math.prod(bigger.tolist()) * voxel_bytes > task_bytes:
                break
            box = bigger
        cumulative = np.ones(3, np.int64)
        for i in made:
            cumulative = cumulative * np.asarray(factors[i])
            level = coarser_scale(parent, factors[i], None, chunk_size)
            most = [max(1, int(b // (c * m))) if b < e else 1 << 62
                    for b, c, m, e in zip(box, level.chunk_size, cumulative, extent)]
            if sharded:
                level = coarser_scale(parent, factors[i], fitting_sharding(
                    level.size, level.chunk_size, most, level.encoding), chunk_size)
            unit_shapes.append(level_unit(_grid(level), level.sharding, most))
            levels.append(level)
            parent = level
        stages.append((src_index, made, box))
    return levels, unit_shapes, stages


def pyramid_tasks(url: str, info: VolumeInfo, source: Scale, levels: list[Scale],
                  unit_shapes: list[tuple[int, int, int]], stages, factors, method: str,
                  sparse: bool) -> list[list[PyramidTask]]:
    """The tasks of every stage (a stage needs the one before it done)."""
    text = json.dumps(info.to_json(), sort_keys=True)
    chain = [source] + levels
    out = []
    for src_index, made, box in stages:
        src = chain[src_index]
        origin = np.asarray(src.voxel_offset)
        end = origin + np.asarray(src.size)
        regions = -(-np.asarray(src.size) // box)
        owned: dict[tuple, list] = {}
        cumulative = np.ones(3, np.int64)
        for j, i in enumerate(made):
            cumulative = cumulative * np.asarray(factors[i])
            level = chain[i + 1]
            grid = _grid(level)
            unit = np.asarray(unit_shapes[i])
            n = -(-np.asarray(grid.shape) // unit)
            units = np.stack(np.meshgrid(*[np.arange(a) for a in n], indexing="ij"),
                             axis=-1).reshape(-1, 3)
            cs = np.asarray(level.chunk_size)
            lo_abs = np.asarray(level.voxel_offset) + units * unit * cs
            hi_abs = np.minimum(lo_abs + unit * cs, np.asarray(level.voxel_offset) +
                                np.asarray(level.size))
            first = np.maximum(lo_abs * cumulative, origin)
            last = np.minimum(hi_abs * cumulative, end)
            region = np.minimum((first - origin) // box, regions - 1)
            for r in np.unique(region, axis=0):
                mine = (region == r).all(axis=1)
                entry = owned.setdefault(tuple(r.tolist()), [None] * len(made) + [
                    first[mine].min(axis=0), last[mine].max(axis=0)])
                entry[j] = units[mine]
                entry[-2] = np.minimum(entry[-2], first[mine].min(axis=0))
                entry[-1] = np.maximum(entry[-1], last[mine].max(axis=0))
        keys = tuple(chain[i + 1].key for i in made)
        shapes = tuple(xyz(int(v) for v in unit_shapes[i]) for i in made)
        stage_factors = tuple(xyz(int(v) for v in factors[i]) for i in made)
        tasks = []
        for r, entry in sorted(owned.items()):
            mine = tuple(u if u is not None else np.zeros((0, 3), np.int64)
                         for u in entry[:-2])
            lo, hi = entry[-2] - origin, entry[-1] - origin
            tasks.append(PyramidTask(
                f"{'+'.join(keys)}/{'_'.join(map(str, r))}", url, text, src.key,
                xyz(int(v) for v in lo), xyz(int(v) for v in hi), keys, stage_factors,
                method, sparse, shapes, mine))
        out.append(tasks)
    return out
