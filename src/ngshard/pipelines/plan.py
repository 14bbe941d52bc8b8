"""Splitting a job into independent tasks: one per output shard (or, for a scale with a file
per chunk, one per box of chunks), each naming the box of the chunk grid it fills and the
source it reads. No data; the tasks are small picklable values.

Tasks are generated lazily (:class:`TaskList`): a plan holds how many tasks each output has
and how to make them, never the tasks themselves, so the client's memory does not grow with
the volume (a 100 TiB volume is about 800,000 tasks of 128 MiB).

A precomputed shard whose chunks form a box (identity hash with enough bits: the shapes
``ChunkGrid.shard_shape`` gives) reads exactly that box. A spec that scatters chunks over
shards (murmurhash) gives tasks holding their chunk positions; they read one chunk's box at a
time. Finding which chunks each shard holds means hashing every chunk: that is done once, in
blocks, the chunk IDs spilled to temporary files by ranges of shards
(:class:`ScatteredShards`), so the memory is that of one block and one range.
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..limits import PLAN_BLOCK_CHUNKS, PLAN_RANGE_CHUNKS
from ..sharded.spec import ShardingSpec
from ..volume.grid import ChunkGrid
from ..volume.sharding import auto_sharding


@dataclass(frozen=True)
class Task:
    """Fill the chunk-grid box [lo, hi) of one output (a precomputed scale or a zarr array)
    from ``source``. ``name`` is unique within the job (the resume record's name)."""

    name: str
    kind: str  # "precomputed" or "zarr"
    url: str  # the destination layer (precomputed) or array (zarr), absolute
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


@dataclass(frozen=True)
class TaskList:
    """The tasks of one output (``part``: a scale's key or an array's name), made when
    iterated: ``len()`` is known without making them."""

    part: str
    count: int
    make: Callable[[], Iterator[Task]]

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Task]:
        return self.make()


def listed(tasks: Iterable[Any]) -> list[TaskList]:
    """Tasks made already (a pyramid's, a phase's), as task lists by output: the first part
    of their names (a scale's key, keys joined by "+" for a task making several)."""
    parts: dict[str, list] = {}
    for task in tasks:
        parts.setdefault(task.name.split("/", 1)[0], []).append(task)
    return [TaskList(part, len(made), made.__iter__) for part, made in parts.items()]


def boxes(grid_shape: tuple[int, ...], box: tuple[int, ...]
          ) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The boxes of ``box`` grid positions tiling a grid (clipped at its end), C order."""
    ranges = [range(0, n, b) for n, b in zip(grid_shape, box)]
    for lo in itertools.product(*ranges):
        yield lo, tuple(min(a + b, n) for a, b, n in zip(lo, box, grid_shape))


def box_count(grid_shape: tuple[int, ...], box: tuple[int, ...]) -> int:
    """How many boxes :func:`boxes` makes."""
    return math.prod(-(-n // b) for n, b in zip(grid_shape, box))


def task_box(grid: ChunkGrid, chunk_bytes: int, task_bytes: int) -> tuple[int, int, int]:
    """A box of chunks holding at most ``task_bytes`` (at least one chunk): the box auto
    sharding would make, so the work of a task over a scale of a file per chunk, or of a
    zarr shard, matches that of a sharded scale's."""
    spec = auto_sharding(grid.size, grid.chunk_size, chunk_bytes, task_bytes)
    return grid.shard_shape(spec) or grid.shape


def precomputed_tasks(url: str, scale_key: str, grid: ChunkGrid, sharding: ShardingSpec | None,
                      source: Any, chunk_bytes: int, task_bytes: int, fast: bool = False
                      ) -> TaskList:
    """The tasks that fill one precomputed scale."""
    def task(name: str, lo, hi, **kw) -> Task:
        return Task(f"{scale_key}/{name}", "precomputed", url, scale_key, source,
                    tuple(lo), tuple(hi), fast=fast, **kw)

    if sharding is None:
        box = task_box(grid, chunk_bytes, task_bytes)
        return TaskList(scale_key, box_count(grid.shape, box), lambda: (
            task(f"{'_'.join(map(str, lo))}", lo, hi) for lo, hi in boxes(grid.shape, box)))
    shard_box = grid.shard_shape(sharding)
    if shard_box is not None:
        def boxed() -> Iterator[Task]:
            for lo, hi in boxes(grid.shape, shard_box):
                shard = int(grid.shard_of(np.array(lo), sharding)[0])
                yield task(sharding.shard_filename(shard), lo, hi, shard=shard)
        return TaskList(scale_key, box_count(grid.shape, shard_box), boxed)
    scattered = ScatteredShards(grid, sharding)

    def spread() -> Iterator[Task]:
        for shard, pos in scattered:
            yield task(sharding.shard_filename(shard), pos.min(axis=0), pos.max(axis=0) + 1,
                       shard=shard, positions=pos)
    return TaskList(scale_key, scattered.count, spread)


class ScatteredShards:
    """The chunk positions of each non-empty shard of a grid whose spec scatters chunks
    (``(shard, positions)`` in shard order when iterated), found by hashing the grid's
    chunks ``block`` at a time and spilling their IDs to a temporary file per range of shards
    (of about ``range_chunks`` chunks; at most 256 files). Memory: a block, and one range
    at a time while iterating (24 bytes a chunk: 40 MiB at 100 TiB of 64^3 uint8 chunks);
    temporary disk: 8 bytes a chunk.
    """

    def __init__(self, grid: ChunkGrid, spec: ShardingSpec, *, block: int = PLAN_BLOCK_CHUNKS,
                 range_chunks: int = PLAN_RANGE_CHUNKS) -> None:
        self.grid, self.spec, self.block = grid, spec, block
        ranges = max(1, min(1 << spec.shard_bits, -(-grid.num_chunks // range_chunks), 256))
        self._shift = max(0, spec.shard_bits - (ranges - 1).bit_length())
        self._dir = tempfile.TemporaryDirectory(prefix="ngshard-plan-")
        files: dict[int, Any] = {}
        # the non-empty shards: a flag per shard (up to 16 MiB of them), else their numbers
        flags = np.zeros(1 << spec.shard_bits, bool) if spec.shard_bits <= 24 else None
        numbers: set[int] = set()
        try:
            for codes in self._codes():
                shards = self._shards(codes)
                if flags is not None:
                    flags[shards] = True
                else:
                    s = np.sort(shards)
                    numbers.update(s[np.r_[True, s[1:] != s[:-1]]].tolist())
                which = (shards >> np.uint64(self._shift)).astype(np.uint16)  # < 256
                order = np.argsort(which, kind="stable")
                cuts = np.flatnonzero(np.diff(which[order])) + 1
                for group in np.split(order, cuts):
                    r = int(which[group[0]])
                    if r not in files:
                        files[r] = open(self._path(r), "wb")  # noqa: SIM115 (closed below)
                    codes[group].tofile(files[r])
        finally:
            for f in files.values():
                f.close()
        self.count = int(flags.sum()) if flags is not None else len(numbers)
        self._ranges = sorted(files)

    def _shards(self, codes: np.ndarray) -> np.ndarray:
        """The shard of each chunk ID, hashed ``block`` at a time (hashing makes
        temporaries several times the size of its input)."""
        return np.concatenate([self.spec.locate(codes[i:i + self.block])[0]
                               for i in range(0, len(codes), self.block)] or
                              [np.zeros(0, np.uint64)])

    def _path(self, r: int) -> str:
        return os.path.join(self._dir.name, f"{r}.u64")

    def _codes(self) -> Iterator[np.ndarray]:
        """The Morton codes of every chunk of the grid, about ``block`` at a time: a code is
        the OR of its coordinates' spread bits, so a block of rows (x, a run of y, every z)
        is an outer OR of three short arrays."""
        nx, ny, nz = self.grid.shape
        spread = [self.grid.morton(np.eye(3, dtype=np.int64)[d] * np.arange(n)[:, None])
                  for d, n in enumerate((nx, ny, nz))]
        ys = max(1, self.block // nz)
        for x in range(nx):
            for y in range(0, ny, ys):
                yield (spread[0][x] | spread[1][y:y + ys, None] | spread[2][None, :]).ravel()

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        for r in self._ranges:
            codes = np.fromfile(self._path(r), np.uint64)
            shards = self._shards(codes)
            order = np.argsort(shards, kind="stable")
            shards, codes = shards[order], codes[order]
            del order
            cuts = (np.flatnonzero(shards[1:] != shards[:-1]) + 1).tolist()
            for a, b in zip([0, *cuts], [*cuts, len(codes)]):
                yield int(shards[a]), self.grid.unmorton(np.sort(codes[a:b]))


def zarr_tasks(url: str, shape: tuple[int, ...], shards: tuple[int, ...], source: Any
               ) -> TaskList:
    """One task per shard of a zarr array, in array coordinates (voxels, not chunks)."""
    grid = tuple(-(-n // s) for n, s in zip(shape, shards))
    name = url.rstrip("/").rsplit("/", 1)[-1]

    def make() -> Iterator[Task]:
        for lo, _ in boxes(grid, (1,) * len(grid)):
            start = tuple(a * s for a, s in zip(lo, shards))
            stop = tuple(min(a + s, n) for a, s, n in zip(start, shards, shape))
            yield Task(f"{name}/{'.'.join(map(str, lo))}", "zarr", url, "", source, start,
                       stop)
    return TaskList(name, box_count(grid, (1,) * len(grid)), make)
