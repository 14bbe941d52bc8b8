"""Built-in sample data: a Neuroglancer segmentation layer, as a connectomics pipeline leaves
it: a sharded compressed_segmentation volume of Voronoi "cells" at two scales, whose segment
IDs key a sharded skeleton layer in its ``skeletons`` directory. Each cell's skeleton runs
along the cell through its own voxels, so a viewer shows it inside its segment; the other IDs'
skeletons are random walks that stay inside the volume.

The data is deterministic (a seeded generator, fixed encodings), so a rerun writes the same
bytes. It replaces the previous demo's files rather than writing over them: the volume's
shards are updated by appending, and a second run into them would leave half of every shard
garbage. A folder holding anything else is refused unless ``force``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from .errors import NgShardError
from .layers.skeletons import write_skeletons
from .sharded import ShardingSpec
from .volume import create_volume
from .volume.layers import scale_key, write_volume_info

DEMO_SPEC = ShardingSpec(hash="murmurhash3_x86_128", preshift_bits=0, minishard_bits=4,
                         shard_bits=3, minishard_index_encoding="gzip", data_encoding="gzip")
RESOLUTION = (8, 8, 40)  # nm per voxel, x y z
DOWNSAMPLE = (2, 2, 1)  # of the second scale
#: Info member that marks a folder as the demo's: only such a folder is replaced by a rerun.
MARKER = "ngshard_demo"
# the folders of the two scales and of the skeleton layer
DEMO_DIRS = (scale_key(RESOLUTION), scale_key(np.multiply(RESOLUTION, DOWNSAMPLE)), "skeletons")
# The files the demo writes in those folders, and the temporaries an interrupted write leaves.
_DEMO_FILE = re.compile(r"info|[0-9a-f]+\.shard")
_TEMP_FILE = re.compile(r"\.(info|[0-9a-f]+\.shard)~.+\.tmp")


def chain(vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A skeleton of ``vertices`` joined in order, each to the next: (vertices, edges)."""
    n = len(vertices)
    return vertices, np.stack([np.arange(n - 1), np.arange(1, n)], axis=1)


def walk_skeletons(rng: np.random.Generator, lengths: np.ndarray, shape: tuple[int, int, int],
                   step: float = 50.0) -> list[np.ndarray]:
    """Random walks of ``lengths`` vertices (nm, steps of ``step`` nm per axis), all at once,
    folded back at the faces so that every vertex lies inside the volume's voxel centres'
    box (a walk that is clipped instead sticks to the faces)."""
    res = np.asarray(RESOLUTION, float)
    lo, span = res / 2, (np.asarray(shape) - 1) * res  # first and last voxel centres
    starts = rng.uniform(lo, lo + span, (len(lengths), 3))
    steps = rng.normal(0, step, (int(lengths.sum()), 3))
    first = np.cumsum(lengths) - lengths
    walked = steps.cumsum(axis=0)
    walked -= np.repeat(walked[first] - steps[first], lengths, axis=0)  # each walk from 0
    u = np.mod(np.repeat(starts, lengths, axis=0) + walked - lo, 2 * span)
    return np.split(lo + span - np.abs(u - span), first[1:])


def cell_skeletons(cells: np.ndarray, n: int, vertices: int = 32, stride: int = 2
                   ) -> dict[int, np.ndarray]:
    """For each cell present in ``cells`` (an (x, y, z) array of cell numbers below ``n``), a
    chain of up to ``vertices`` voxel centres (nm) of that cell, along its principal axis.

    The cell's voxels are cut into that many slabs across the axis and each slab gives its
    voxel nearest to the slab's centroid: the centroids follow the middle of the cell, and
    taking a voxel of the cell itself keeps every vertex inside its segment (a centroid of a
    non-convex cell may lie outside it). Works on every ``stride``-th voxel per axis, plus
    every voxel of the cells that sampling misses, all cells at once.
    """
    sample = np.zeros(cells.shape, bool)
    sample[::stride, ::stride, ::stride] = True
    sample |= (np.bincount(cells[sample], minlength=n) == 0)[cells]
    at = np.flatnonzero(sample)
    g = cells.ravel()[at]
    p = (np.stack(np.unravel_index(at, cells.shape), axis=1) + 0.5) * np.asarray(RESOLUTION)
    count = np.bincount(g, minlength=n)
    mean = np.stack([np.bincount(g, p[:, d], n) for d in range(3)], 1)
    mean /= np.maximum(count, 1)[:, None]
    q = p - mean[g]
    cov = np.stack([np.bincount(g, q[:, i] * q[:, j], n) for i in range(3) for j in range(3)],
                   1).reshape(n, 3, 3)
    axis = np.linalg.eigh(cov)[1][:, :, -1]  # the eigenvector of the largest eigenvalue
    t = (q * axis[g]).sum(axis=1)
    lo, hi = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(lo, g, t)
    np.maximum.at(hi, g, t)
    width = np.where(hi > lo, hi - lo, 1.0)
    slab = g * vertices + np.minimum(((t - lo[g]) / width[g] * vertices).astype(np.intp),
                                     vertices - 1)
    size = np.maximum(np.bincount(slab, minlength=n * vertices), 1)[:, None]
    centre = np.stack([np.bincount(slab, p[:, d], n * vertices) for d in range(3)], 1) / size
    d2 = ((p - centre[slab]) ** 2).sum(axis=1)
    best = np.full(n * vertices, np.inf)
    np.minimum.at(best, slab, d2)
    hit = np.flatnonzero(d2 == best[slab])
    slabs, first = np.unique(slab[hit], return_index=True)  # one voxel per slab, in order
    chain = p[hit[first]]
    ends = np.searchsorted(slabs // vertices, np.arange(n + 1))
    return {c: chain[ends[c]:ends[c + 1]] for c in np.flatnonzero(count).tolist()}


def voronoi_cells(rng: np.random.Generator, shape: tuple[int, int, int], n: int,
                  step: int = 4) -> np.ndarray:
    """(x, y, z) cell numbers: each voxel takes the number of the nearest of ``n`` random
    seeds, computed on a grid ``step`` times coarser and scaled up."""
    coarse = [s // step for s in shape]
    seeds = rng.uniform(0, 1, (n, 3)) * coarse
    x, y, z = (np.arange(s, dtype=np.float32) + 0.5 for s in coarse)
    nearest = np.zeros(coarse, np.intp)
    best = np.full(coarse, np.inf, np.float32)
    for i, (sx, sy, sz) in enumerate(seeds):
        d = ((x - sx) ** 2)[:, None, None] + ((y - sy) ** 2)[None, :, None] + \
            ((z - sz) ** 2)[None, None, :]
        closer = d < best
        best[closer], nearest[closer] = d[closer], i
    for axis in range(3):
        nearest = np.repeat(nearest, step, axis=axis)
    return nearest


def previous_demo(path: str) -> list[str]:
    """The files of an earlier demo at ``path``, its info last (empty if there is none).

    Raises
    ------
    NgShardError
        ``path`` holds something the demo did not write (it is not replaced).
    """
    def foreign(why: str) -> NgShardError:
        return NgShardError(f"{path} is not a folder of `ngshard demo` ({why}); use --force to "
                            f"write the demo there anyway (replacing its info and the files "
                            f"in {', '.join(DEMO_DIRS)})")

    if not os.path.exists(path):
        return []
    found = []
    with os.scandir(path) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name == "info" and entry.is_file():
                try:
                    doc = json.loads(Path(entry.path).read_bytes())
                except ValueError:
                    doc = None
                if not (isinstance(doc, dict) and MARKER in doc):
                    raise foreign("its info is another layer's")
            elif entry.name in DEMO_DIRS and entry.is_dir():
                with os.scandir(entry.path) as inner:
                    for e in inner:
                        if not (e.is_file() and (_DEMO_FILE.fullmatch(e.name) or
                                                 _TEMP_FILE.fullmatch(e.name))):
                            raise foreign(f"it holds {os.path.join(entry.name, e.name)}")
                        found.append(e.path)
            elif entry.is_file() and _TEMP_FILE.fullmatch(entry.name):
                found.append(entry.path)
            else:
                raise foreign(f"it holds {entry.name}")
    info = os.path.join(path, "info")
    if found and not os.path.isfile(info):
        raise foreign("demo files but no info")
    return found + [info] if os.path.isfile(info) else found


def _demo_files_any(path: str) -> list[str]:
    """With --force: the files directly in the demo's folders, whatever they are, so that
    nothing stale is appended to or mixed in, and the info last."""
    folders = [os.path.join(path, d) for d in DEMO_DIRS]
    names = [os.path.join(f, n) for f in folders if os.path.isdir(f) for n in sorted(os.listdir(f))]
    return [n for n in [*names, os.path.join(path, "info")] if os.path.isfile(n)]


def make_demo(path: str | os.PathLike, shape: tuple[int, int, int] = (256, 256, 128),
              cells: int = 300, segments: int = 5000, seed: int = 0, *, force: bool = False
              ) -> None:
    """Write the sample segmentation layer at ``path`` (see the module docstring), replacing
    a previous demo there.

    Parameters
    ----------
    path
        A local folder (made if needed).
    shape, cells, segments, seed
        Volume size (voxels of 8 x 8 x 40 nm), number of Voronoi cells, number of skeletons
        (cells included), random seed.
    force
        Also write into a folder holding other things: its info and every file directly in
        its scale and skeleton folders are replaced; other files stay.

    Raises
    ------
    NgShardError
        ``path`` holds files the demo did not write, and not ``force``.
    """
    path = os.fspath(path)
    for name in _demo_files_any(path) if force else previous_demo(path):
        os.unlink(name)
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(1, 2**40, segments, dtype=np.uint64))
    chosen = rng.choice(ids, cells, replace=False)
    cell = voronoi_cells(rng, shape, cells)
    walks = walk_skeletons(rng, rng.integers(2, 200, len(ids)), shape)
    skeletons = dict(zip(ids.tolist(), walks))
    skeletons.update((int(chosen[c]), v) for c, v in cell_skeletons(cell, cells).items())

    vol = create_volume(path, dtype="uint64", shape=shape, chunk_size=(64, 64, 64),
                        encoding="compressed_segmentation", resolution=RESOLUTION,
                        sharding="auto")
    # Marked before any chunk is written, so that a rerun after an interruption replaces it;
    # "skeletons" is where Neuroglancer looks for the segments' skeletons.
    vol.info = replace(vol.info, extra={**vol.info.extra, "skeletons": "skeletons",
                                        MARKER: "sample data; `ngshard demo` replaces it"})
    write_volume_info(vol.storage, vol.info)
    with vol:
        vol[:] = chosen[cell]
    vol.add_scale(DOWNSAMPLE)

    write_skeletons(os.path.join(path, "skeletons"),
                    {k: chain(v) for k, v in skeletons.items()}, sharding=DEMO_SPEC)
