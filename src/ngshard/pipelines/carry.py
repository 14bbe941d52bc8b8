"""The fast path of a precomputed -> precomputed transfer: when the destination scale has the
source's chunk grid (chunk size, and an origin a whole number of chunks away) and encoding,
a chunk's encoded bytes are carried over as they are, never decoded; a sharded
``data_encoding`` is undone on reading and redone on writing, except that a gzip stream (a
``.gz`` chunk file of one, or a chunk of a gzip-encoded shard) goes into a gzip-encoded shard as
it is stored (checked: it inflates whole, to its CRC; compressing again costs 3-4 times the
inflating). Only chunks cut by a bounding box are decoded,
cut and encoded again. Raw chunks are checked to have their size, so a damaged one stops
the transfer rather than being copied.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import CorruptDataError
from ..threads import pmap
from .plan import Task
from .sources import PrecomputedSource, open_scale
from .to_precomputed import write_chunks


def fill_carried(task: Task) -> dict:
    """Run a carrying task: the chunks of its box (or its scattered positions) copied from
    the source scale as encoded bytes."""
    source: PrecomputedSource = task.source
    dst, src = open_scale(task.url, task.scale), open_scale(source.url, source.scale)
    grid, cs = dst.grid, np.asarray(dst.grid.chunk_size)
    if task.positions is not None:
        positions = task.positions
    else:
        positions = grid.positions_in(np.multiply(task.lo, cs), np.multiply(task.hi, cs))
    shift = np.asarray(source.shift)
    src_positions = positions + shift // cs
    sharding = dst.scale.sharding
    if sharding is not None and sharding.data_encoding == "gzip":  # gzip streams carried
        blobs, gzipped = src.store.get_gzip(src_positions)
    else:
        blobs, gzipped = src.store.get(src_positions), [None] * len(src_positions)
    starts, stops = grid.bounds(positions)
    src_starts, src_stops = src.grid.bounds(src_positions)
    extents = (stops - starts).tolist()
    src_extents = (src_stops - src_starts).tolist()
    voxel = dst.info.num_channels * dst.dtype.itemsize
    raw = dst.scale.encoding == "raw"

    def carry(i: int):
        blob = blobs[i]
        if blob is None:
            return None
        if extents[i] == src_extents[i]:
            if raw and len(blob) != math.prod(extents[i]) * voxel:
                raise CorruptDataError(f"{src.store.where(src_positions[i].tolist())}: "
                                       f"{len(blob)} bytes, not a raw chunk of "
                                       f"{extents[i]} voxels")
            return blob
        where = src.store.where(src_positions[i].tolist())
        data = src.codec.decode(blob, (*src_extents[i], dst.info.num_channels), where)
        ex, ey, ez = extents[i]
        return dst.codec.encode(np.asarray(data)[:ex, :ey, :ez])

    carried = pmap(carry, range(len(blobs)), min_items=2)
    keep = [i for i, b in enumerate(carried) if b is not None]
    # a gzip stream goes as stored only with its chunk whole (not cut by the box)
    streams = [gzipped[i] if carried[i] is blobs[i] else None for i in keep]
    return write_chunks(dst, task.shard, positions[keep], [carried[i] for i in keep], streams)
