"""compressed_segmentation decoding: bytes -> (x, y, z, channels) labels, every block header
validated first with tensorstore's rules (numpy, over all blocks at once), then decoded by the
compiled kernel (``_cseg.c``), which checks every index it reads against its table (the
layout is in the package docstring)."""

from __future__ import annotations

import numpy as np

from ..._arrays import streams
from ..._kernels import cseg_decode
from ...errors import CorruptDataError
from ...types import Blob
from .scratch import scratch

_VALID_BITS = np.zeros(256, bool)
_VALID_BITS[[0, 1, 2, 4, 8, 16, 32]] = True


def decode(data: Blob, shape: tuple[int, ...], dt: np.dtype,
           bs: tuple[int, int, int], *, reuse: bool = False,
           out: np.ndarray | None = None) -> np.ndarray:
    """An (x, y, z, channels) array of ``dt`` from a chunk; CorruptDataError on bad bytes.

    ``reuse``: the result may live in a buffer this thread reuses on its next decode, for
    callers that copy it out at once (saves the page faults of a fresh array). ``out``: a
    writable array of ``shape`` and ``dt``, of any strides (a slice of the caller's result,
    say), decoded into and returned: no copy afterwards. On bad bytes it may hold part of
    the chunk.
    """
    if len(data) % 4:
        raise CorruptDataError(f"compressed_segmentation chunk of {len(data)} bytes, not whole "
                               f"words")
    words = np.frombuffer(data, "<u4")  # at any byte offset of a shard: the kernel copes
    xyz, c = shape[:3], shape[3]
    if words.size < c:
        raise CorruptDataError(f"compressed_segmentation chunk of {len(data)} bytes cannot hold "
                               f"{c} channel offsets")
    offsets = words[:c].astype(np.int64)
    if (offsets > words.size).any():
        raise CorruptDataError(f"compressed_segmentation channel offsets {offsets.tolist()} "
                               f"past the end ({words.size} words)")
    if out is not None and (out.shape != tuple(shape) or out.dtype != dt):
        raise ValueError(f"cannot decode a {tuple(shape)} {dt.name} chunk into a "
                         f"{out.shape} {out.dtype.name} array")
    if min(shape) == 0:
        return np.zeros(shape, dt, order="F") if out is None else out
    if out is None and c == 1:
        channel = scratch("labels", xyz[::-1], dt).T if reuse else np.empty(xyz, dt, order="F")
        return _decode_channel(words, int(offsets[0]), bs, 0, channel)[..., None]
    stream = out is not None and streams(out)  # a chunk of a large result
    if out is None:
        out = np.empty(shape, dt, order="F")
    for ch, start in enumerate(offsets.tolist()):
        _decode_channel(words, start, bs, ch, out[..., ch], stream)
    return out


def _decode_channel(words: np.ndarray, start: int, bs: tuple[int, int, int], ch: int,
                    out: np.ndarray, stream: bool = False) -> np.ndarray:
    """Validate one channel's block headers as tensorstore does, then decode it into ``out``
    ((x, y, z), any strides); the voxels past the volume's edge are not decoded (their
    indices may point anywhere)."""
    xyz, dt = out.shape, out.dtype
    n = words.size - start  # the channel's words: from its offset to the end of the buffer
    grid = [-(-v // b) for v, b in zip(xyz, bs)]
    nblocks = grid[0] * grid[1] * grid[2]
    if 2 * nblocks > n:
        raise CorruptDataError(f"compressed_segmentation channel {ch}: {n} words cannot hold "
                               f"{nblocks} block headers")
    hdr = words[start:start + 2 * nblocks].reshape(nblocks, 2)
    table = (hdr[:, 0] & 0xFFFFFF).astype(np.int64)
    bits = (hdr[:, 0] >> 24).astype(np.int64)
    values = (hdr[:, 1] & 0xFFFFFF).astype(np.int64)
    bad = ~_VALID_BITS[bits]
    bv = bs[0] * bs[1] * bs[2]
    need = np.array([min((bv * b + 31) // 32, n + 1) for b in range(33)], np.int64)
    bad |= (table > n) | (values + need[np.minimum(bits, 32)] > n)
    entry = dt.itemsize // 4
    table_size = (n - table) // entry
    bad |= (bits == 0) & (table_size == 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise CorruptDataError(f"compressed_segmentation channel {ch}: bad header of block {i} "
                               f"(table offset {table[i]}, {bits[i]} bits, values at {values[i]}; "
                               f"channel has {n} words)")
    block = cseg_decode(words, start, bs, entry, out, stream)
    if block >= 0:  # only voxels past the volume's edge may point anywhere
        raise CorruptDataError(f"compressed_segmentation channel {ch}: block {block} indexes "
                               f"past its table of {table_size[block]} entries")
    return out
