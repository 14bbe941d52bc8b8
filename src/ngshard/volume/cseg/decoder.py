"""compressed_segmentation decoding: bytes -> (x, y, z, channels) labels, every block header
validated first with tensorstore's rules (numpy, over all blocks at once), then decoded by the
compiled kernel (``_cseg.c``), which checks every index it reads against its table (the
layout is in the package docstring)."""

from __future__ import annotations

import numpy as np

from ..._kernels import cseg_decode
from ...errors import CorruptDataError
from ...types import Blob
from .scratch import scratch

_VALID_BITS = np.zeros(256, bool)
_VALID_BITS[[0, 1, 2, 4, 8, 16, 32]] = True


def decode(data: Blob, shape: tuple[int, ...], dt: np.dtype,
           bs: tuple[int, int, int], *, reuse: bool = False) -> np.ndarray:
    """An (x, y, z, channels) array of ``dt`` from a chunk; CorruptDataError on bad bytes.

    ``reuse``: the result may live in a buffer this thread reuses on its next decode, for
    callers that copy it out at once (saves the page faults of a fresh array).
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
    if min(shape) == 0:
        return np.zeros(shape, dt, order="F")
    if c == 1:
        return _decode_channel(words, int(offsets[0]), xyz, bs, dt, 0, reuse)[..., None]
    out = np.empty(shape, dt, order="F")
    for ch, start in enumerate(offsets.tolist()):
        out[..., ch] = _decode_channel(words, start, xyz, bs, dt, ch, True)
    return out


def _decode_channel(words: np.ndarray, start: int, xyz: tuple[int, ...],
                    bs: tuple[int, int, int], dt: np.dtype, ch: int, reuse: bool
                    ) -> np.ndarray:
    """Validate one channel's block headers as tensorstore does, then decode it; the voxels
    past the volume's edge are not decoded (their indices may point anywhere)."""
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
    out = scratch("labels", xyz[::-1], dt).T if reuse else np.empty(xyz, dt, order="F")
    block = cseg_decode(words, start, xyz, bs, entry, out.T)  # .T: C-contiguous, same memory
    if block >= 0:  # only voxels past the volume's edge may point anywhere
        raise CorruptDataError(f"compressed_segmentation channel {ch}: block {block} indexes "
                               f"past its table of {table_size[block]} entries")
    return out
