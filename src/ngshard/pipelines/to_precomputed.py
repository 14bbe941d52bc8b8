"""Filling one box of a precomputed scale's chunk grid from a source: read the voxels a slab
at a time, encode each chunk (chunks all zero, the format's fill value, are left out), and
write the box's shard whole and atomically (never reading it back), or its chunk files.
"""

from __future__ import annotations

import numpy as np

from ..compression import encode
from ..limits import SLAB_BYTES
from ..sharded.shard_writer import write_shard
from ..threads import pmap
from ..volume.encodings import encode_chunk
from ..volume.handle import ScaleHandle
from .plan import Task
from .sources import as_dtype, open_scale


def store_chunks(task: Task, positions: np.ndarray, blobs: list) -> dict:
    """Store a task's encoded chunks (scale-encoded, not data-encoded yet)."""
    return write_chunks(open_scale(task.url, task.scale), task.shard, positions, blobs)


def write_chunks(handle: ScaleHandle, shard: int | None, positions: np.ndarray, blobs: list,
                 gzipped: list | None = None) -> dict:
    """Write encoded chunks (scale-encoded, not data-encoded yet) of ``handle``'s scale: as
    chunk files, or as shard number ``shard`` whole (all of its chunks). ``gzipped``: each
    chunk's gzip stream where one is at hand (None elsewhere), written as it is where the
    data encoding is gzip."""
    spec, storage = handle.scale.sharding, handle.chunk_storage
    if spec is None:
        storage.write_many(list(zip(handle.grid.chunk_names(positions), blobs)))
        return {"chunks": len(blobs), "bytes": sum(map(len, blobs))}
    if spec.data_encoding != "raw":
        carried = gzipped if gzipped is not None and spec.data_encoding == "gzip" else \
            [None] * len(blobs)
        blobs = pmap(lambda i: encode(blobs[i], spec.data_encoding) if carried[i] is None
                     else carried[i], range(len(blobs)), min_items=2)
    keys = handle.grid.morton(positions) if len(positions) else np.zeros(0, np.uint64)
    if shard is None:  # (every task of a sharded scale has its shard)
        raise ValueError(f"{storage.url}: chunks of a sharded scale go a whole shard at a time")
    return {"chunks": len(blobs), "bytes": write_shard(storage, spec, shard, keys, blobs)}


def fill(task: Task) -> dict:
    """Run a (decoding) precomputed task: the chunks of its box from its source."""
    handle = open_scale(task.url, task.scale)
    grid, scale, dtype = handle.grid, handle.scale, handle.dtype
    where = f"{handle.storage.path(scale.key)} ({task.name})"

    def encoded(data: np.ndarray, lo: np.ndarray, positions: np.ndarray):
        starts, stops = grid.bounds(positions)
        views = [data[a[0]:b[0], a[1]:b[1], a[2]:b[2]] for a, b in
                 zip((starts - lo).tolist(), (stops - lo).tolist())]
        keep = np.array([v.any() for v in views], bool)
        views = [v for v, k in zip(views, keep) if k]
        blobs = pmap(lambda v: encode_chunk(v, scale.encoding,
                                            block_size=scale.compressed_segmentation_block_size),
                     views, min_items=2)
        return positions[keep], blobs

    found_pos, found = [], []
    if task.positions is not None:  # chunks scattered over the grid: one at a time
        for pos in task.positions:
            lo, hi = grid.bounds(pos[None])
            data = as_dtype(task.source.read(lo[0], hi[0]), dtype, where)
            p, b = encoded(data, lo[0], pos[None])
            found_pos.append(p)
            found += b
    else:
        lo, hi = np.array(task.lo), np.array(task.hi)
        cs = np.array(grid.chunk_size)
        layer = int(np.prod((hi - lo)[:2] * cs[:2])) * int(cs[2]) * \
            handle.info.num_channels * dtype.itemsize
        step = max(1, SLAB_BYTES // max(1, layer))
        for z in range(lo[2], hi[2], step):
            a, b = np.array([lo[0], lo[1], z]), np.array([hi[0], hi[1], min(z + step, hi[2])])
            v_lo = a * cs
            v_hi = np.minimum(b * cs, scale.size)
            positions = grid.positions_in(v_lo, v_hi)
            data = as_dtype(task.source.read(v_lo, v_hi), dtype, where)
            p, blobs = encoded(data, v_lo, positions)
            found_pos.append(p)
            found += blobs
            del data
    positions = np.concatenate(found_pos) if found_pos else np.zeros((0, 3), np.int64)
    return store_chunks(task, positions, found)
