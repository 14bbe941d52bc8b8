"""The fast path of zarr -> precomputed: a zarr (c,) z, y, x array in C order holds each
chunk's voxels x fastest, then y, z and the channels, which is exactly a precomputed raw
chunk (Fortran order over x, y, z, channel). When the inner chunk is the precomputed chunk
reversed and the chunk bytes are raw, gzip or zstd, an interior chunk's bytes go into the
precomputed shard as they are: a gzip stream becomes a ``data_encoding: gzip`` value without
being inflated. Only what must change is touched: edge chunks (zarr pads them, precomputed
clips them) are decoded, cut and re-encoded, and a chunk whose compression differs from the
shard's data encoding (zstd always does) is inflated and deflated, never transposed or
assembled into an array.

What is carried is checked as a reader will read it: a gzip stream is inflated once (by
libdeflate, which checks that it ends, its CRC and its length) and the output dropped, which
still costs a fraction of deflating it again. A damaged chunk stops the conversion, naming
the chunk; a stream a precomputed reader would not take (several gzip members) is re-encoded.
"""

from __future__ import annotations

import math

import numpy as np

from ..compression import decode, encode, gzip_decompress, zstd_decompress
from ..errors import CorruptDataError, SpecError
from ..staged.stored import Where
from ..threads import pmap
from ..volume.info import Scale
from ..zarr.handle import ArrayHandle
from .plan import Task
from .sources import ZarrSource, open_scale, open_zarr
from .to_precomputed import write_shard


def eligible(array: ArrayHandle, roles: dict[str, int], scale: Scale, dtype: np.dtype
             ) -> bool:
    """Whether the chunks of ``array`` (axes per ``roles``) can be carried into ``scale``
    (a sharded raw scale of ``dtype``) as bytes."""
    if scale.sharding is None or scale.encoding != "raw" or "t" in roles:
        return False
    meta = array.meta
    order = [roles[a] for a in ("c", "z", "y", "x") if a in roles]
    if order != list(range(len(meta.shape))):  # (c,) z, y, x
        return False
    if "c" in roles and meta.chunks[0] != meta.shape[0]:
        return False
    if tuple(meta.chunks[-3:][::-1]) != tuple(scale.chunk_size):
        return False
    fill = np.asarray(meta.fill_value if meta.fill_value is not None else 0)
    if fill.size != 1 or fill.item() != 0:
        return False
    token = array.store.encoding.split()
    if len(token) != 3 or token[0] not in _INFLATE or token[1] != "C":
        return False
    stored = np.dtype(token[2])
    return stored == dtype and stored.byteorder != ">"


_INFLATE = {"raw": lambda blob, where, limit: blob, "gzip": gzip_decompress,
            "zstd": zstd_decompress}


def _carries(blob, compression: str, expected: int, where: Where) -> bool:
    """Whether ``blob`` is, as it is, a precomputed value of ``expected`` bytes in the
    ``compression`` data encoding (a gzip stream that decodes, alone, to that many bytes)."""
    if compression == "raw":
        return len(blob) == expected
    try:
        return len(decode(blob, compression, where, expected)) == expected
    except CorruptDataError:
        return False  # decoded again below, where the damage is named


def fill_fast(task: Task) -> dict:
    """Run a fast-path task: the chunks of the box [lo, hi) (or the scattered positions) of
    a sharded raw scale carried from the zarr array of ``task.source``."""
    source: ZarrSource = task.source
    scale = open_scale(task.url, task.scale)
    grid, spec, dtype = scale.grid, scale.scale.sharding, scale.dtype
    if spec is None:
        raise SpecError(f"{task.url}: scale {task.scale} is unsharded: no fast path to it")
    chunks = open_zarr(source.url).store
    compression = chunks.encoding.split()[0]
    inflate = _INFLATE[compression]
    channels = scale.info.num_channels
    cs = np.array(grid.chunk_size)
    whole = (*grid.chunk_size, channels)
    expected = math.prod(whole) * dtype.itemsize
    positions = task.positions if task.positions is not None else \
        grid.positions_in(np.multiply(task.lo, cs), np.multiply(task.hi, cs))  # a box
    zpos = positions[:, ::-1]
    if "c" in source.role:
        zpos = np.pad(zpos, ((0, 0), (1, 0)))
    blobs = chunks.get(zpos)
    starts, stops = grid.bounds(positions)
    extents = (stops - starts).tolist()
    interior = (stops - starts == cs).all(axis=1).tolist()

    def carry(i: int):
        blob = blobs[i]
        if blob is None:
            return None
        where = Where(chunks, zpos[i])  # named only in a message
        if interior[i] and compression == spec.data_encoding and \
                _carries(blob, compression, expected, where):
            return blob
        raw = inflate(blob, where, expected)
        if len(raw) != expected:
            raise CorruptDataError(f"{where}: decodes to {len(raw)} bytes, not {expected}")
        if not interior[i]:
            ex, ey, ez = extents[i]
            cut = np.frombuffer(raw, dtype).reshape(whole, order="F")[:ex, :ey, :ez]
            if not cut.any():
                return None
            raw = cut.tobytes(order="F")
        return encode(raw, spec.data_encoding)

    stored = pmap(carry, range(len(blobs)), min_items=2)
    keep = [i for i, b in enumerate(stored) if b is not None]
    keys = grid.morton(positions[keep]) if keep else np.zeros(0, np.uint64)
    written = write_shard(scale.chunk_storage, spec, task.whole_shard(), keys,
                          [stored[i] for i in keep])
    return {"chunks": len(keep), "bytes": written}

