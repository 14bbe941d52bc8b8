"""Running a pyramid task: read the source box once, reduce it level after level in memory,
and write each level's shards (or chunk files) of the box whole."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..recycle import Scratch
from ..threads import bounded_map, pmap
from ..volume.downsample import downsample
from ..volume.encodings import encode_chunk
from ..volume.handle import ScaleHandle
from .pyramid import PyramidTask
from .sources import open_planned_scale, voxels
from .to_precomputed import write_chunks

#: Each worker thread's source box: read into the same memory task after task (a task ends
#: with its writes, so nothing of the last box is in use when the next is read)
SOURCE_BOXES = Scratch()


def fill_pyramid(task: PyramidTask) -> dict:
    """Make every level of ``task``'s box; returns ``chunks`` and ``bytes`` written. Each
    level is written (encoded, compressed, fsynced) on a job thread while the next ones
    are reduced from it: the writes' waits on the disk overlap the reductions, and each
    other. The levels held meanwhile are at most a third of the source box, which is let go
    once the first is made."""
    source = open_planned_scale(task.url, task.info, task.source)
    box = tuple(slice(a, b) for a, b in zip(task.lo, task.hi))

    def levels() -> Iterator[tuple]:
        data = voxels(source).read(box, into=SOURCE_BOXES.array)
        origin = np.asarray(task.lo) + np.asarray(source.scale.voxel_offset)
        for key, factor, shape, units in zip(task.levels, task.factors, task.unit_shapes,
                                             task.units):
            data = downsample(data, factor, task.method, origin=origin, sparse=task.sparse)
            origin = origin // np.asarray(factor)
            if len(units):
                yield key, np.asarray(shape), units, data, origin

    def write(level: tuple) -> dict:
        key, shape, units, data, origin = level
        return _write_level(open_planned_scale(task.url, task.info, key), shape, units, data,
                            origin)

    stats = {"chunks": 0, "bytes": 0}
    for written in bounded_map(write, levels(), in_flight=max(1, len(task.levels))):
        stats["chunks"] += written["chunks"]
        stats["bytes"] += written["bytes"]
    return stats


def _write_level(handle: ScaleHandle, unit: np.ndarray, units: np.ndarray, data: np.ndarray,
                 origin: np.ndarray) -> dict:
    """Encode and write the shards (or boxes of chunk files) ``units``, each a box of
    ``unit`` chunks, of a level from ``data``, whose first voxel is at absolute ``origin``:
    shard by shard, or every chunk file in one batch."""
    grid, scale = handle.grid, handle.scale
    at = origin - np.asarray(scale.voxel_offset)  # data's first voxel, 0-based in the grid
    groups = [units] if scale.sharding is None else [u[None] for u in units]
    stats = {"chunks": 0, "bytes": 0}
    for group in groups:
        positions = np.concatenate([_box_positions(u * unit, np.minimum((u + 1) * unit,
                                                                          grid.shape))
                                    for u in group])
        starts, stops = grid.bounds(positions)
        views = [data[a[0]:b[0], a[1]:b[1], a[2]:b[2]] for a, b in
                 zip((starts - at).tolist(), (stops - at).tolist())]
        # a chunk of nothing but zeros is not written; one whose first voxel is set (most
        # are) is known to hold something without a pass over all of it
        keep = np.array([bool(v[0, 0, 0].any()) or bool(v.any()) for v in views], bool)
        blobs = pmap(lambda v: encode_chunk(
            v, scale.encoding, block_size=scale.compressed_segmentation_block_size),
            [v for v, k in zip(views, keep) if k], min_items=2)
        shard = None if scale.sharding is None else \
            int(grid.shard_of(positions[:1], scale.sharding)[0][0])
        written = write_chunks(handle, shard, positions[keep], blobs)
        stats["chunks"] += written["chunks"]
        stats["bytes"] += written["bytes"]
    return stats


def _box_positions(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The (n, 3) grid positions of the box [lo, hi)."""
    return np.stack(np.meshgrid(*[np.arange(a, b) for a, b in zip(lo, hi)], indexing="ij"),
                    axis=-1).reshape(-1, 3)
