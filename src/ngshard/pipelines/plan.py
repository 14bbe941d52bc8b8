"""Splitting a conversion into independent tasks: one per output shard (or, for a scale with
a file per chunk, one per box of chunks), each naming the box of the chunk grid it fills and
the source it reads. Pure: no I/O, no data; the tasks are small picklable values.

A precomputed shard whose chunks form a box (identity hash with enough bits: the shapes
``ChunkGrid.shard_shape`` gives) reads exactly that box. A spec that scatters chunks over
shards gives tasks holding their chunk positions; they read one chunk's box at a time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..sharded.spec import ShardingSpec
from ..volume.grid import ChunkGrid
from ..volume.sharding import auto_sharding


@dataclass(frozen=True)
class Task:
    """Fill the chunk-grid box [lo, hi) of one output (a precomputed scale or a zarr array)
    from ``source``. ``name`` is unique within the job (the resume record's name)."""

    name: str
    kind: str  # "precomputed" or "zarr"
    url: str  # the destination layer (precomputed) or array (zarr)
    scale: str  # the precomputed scale's key ("" for zarr)
    source: Any
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    shard: int | None = None  # the shard file this task writes whole (sharded precomputed)
    positions: np.ndarray | None = field(default=None, compare=False)  # scattered chunks
    fast: bool = False  # zarr -> precomputed: carry encoded chunks (fastpath.py)

    def whole_shard(self) -> int:
        """The shard this task writes whole (every task of a sharded scale has one)."""
        if self.shard is None:
            raise ValueError(f"task {self.name} writes no whole shard")
        return self.shard


def boxes(grid_shape: tuple[int, ...], box: tuple[int, ...]
          ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The boxes of ``box`` grid positions tiling a grid (clipped at its end), C order."""
    ranges = [range(0, n, b) for n, b in zip(grid_shape, box)]
    return [(lo, tuple(min(a + b, n) for a, b, n in zip(lo, box, grid_shape)))
            for lo in itertools.product(*ranges)]


def task_box(grid: ChunkGrid, chunk_bytes: int, task_bytes: int) -> tuple[int, int, int]:
    """A box of chunks holding at most ``task_bytes`` (at least one chunk): the box auto
    sharding would make, so the work of a task over a scale of a file per chunk, or of a
    zarr shard, matches that of a sharded scale's."""
    spec = auto_sharding(grid.size, grid.chunk_size, chunk_bytes, task_bytes)
    return grid.shard_shape(spec) or grid.shape


def precomputed_tasks(url: str, scale_key: str, grid: ChunkGrid, sharding: ShardingSpec | None,
                      source: Any, chunk_bytes: int, task_bytes: int, fast: bool = False
                      ) -> list[Task]:
    """The tasks that fill one precomputed scale."""
    def task(name: str, lo, hi, **kw) -> Task:
        return Task(f"{scale_key}/{name}", "precomputed", url, scale_key, source,
                    tuple(lo), tuple(hi), fast=fast, **kw)

    if sharding is None:
        box = task_box(grid, chunk_bytes, task_bytes)
        return [task(f"{'_'.join(map(str, lo))}", lo, hi) for lo, hi in boxes(grid.shape, box)]
    shard_box = grid.shard_shape(sharding)
    if shard_box is not None:
        out = []
        for lo, hi in boxes(grid.shape, shard_box):
            shard = int(grid.shard_of(np.array(lo), sharding)[0])
            out.append(task(sharding.shard_filename(shard), lo, hi, shard=shard))
        return out
    # scattered: every position's shard, grouped
    shape = grid.shape
    positions = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"),
                         axis=-1).reshape(-1, 3)
    shards = grid.shard_of(positions, sharding)[0]
    order = np.argsort(shards, kind="stable")
    cuts = np.flatnonzero(np.diff(shards[order])) + 1
    out = []
    for group in np.split(order, cuts):
        shard = int(shards[group[0]])
        pos = positions[group]
        out.append(task(sharding.shard_filename(shard), pos.min(axis=0), pos.max(axis=0) + 1,
                        shard=shard, positions=pos))
    return out


def zarr_tasks(url: str, shape: tuple[int, ...], shards: tuple[int, ...], source: Any
               ) -> list[Task]:
    """One task per shard of a zarr array, in array coordinates (voxels, not chunks)."""
    grid = tuple(-(-n // s) for n, s in zip(shape, shards))
    out = []
    for lo, _ in boxes(grid, (1,) * len(grid)):
        start = tuple(a * s for a, s in zip(lo, shards))
        stop = tuple(min(a + s, n) for a, s, n in zip(start, shards, shape))
        out.append(Task(f"{url.rstrip('/').rsplit('/', 1)[-1]}/{'.'.join(map(str, lo))}",
                        "zarr", url, "", source, start, stop))
    return out
