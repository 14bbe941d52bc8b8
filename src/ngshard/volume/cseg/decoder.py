"""compressed_segmentation decoding: bytes -> (x, y, z, channels) labels, every block header
validated first with tensorstore's rules (the layout is in the package docstring)."""

from __future__ import annotations

import math

import numpy as np

from ...errors import CorruptDataError
from ...limits import CSEG_SLAB_VOXELS
from ...types import Blob
from .scratch import scratch

_VALID_BITS = np.zeros(256, bool)
_VALID_BITS[[0, 1, 2, 4, 8, 16, 32]] = True
_MASKS = np.array([(1 << b) - 1 for b in range(33)], np.uint64)


def decode(data: Blob, shape: tuple[int, ...], dt: np.dtype,
           bs: tuple[int, int, int], *, reuse: bool = False) -> np.ndarray:
    """An (x, y, z, channels) array of ``dt`` from a chunk; CorruptDataError on bad bytes.

    ``reuse``: the result may live in a buffer this thread reuses on its next decode, for
    callers that copy it out at once (saves the page faults of a fresh array).
    """
    if len(data) % 4:
        raise CorruptDataError(f"compressed_segmentation chunk of {len(data)} bytes, not whole "
                               f"words")
    words = np.frombuffer(data, "<u4")
    if not words.flags.aligned:  # a chunk at any byte offset of a shard
        words = words.copy()
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
    """Validate one channel's block headers as tensorstore does, then decode it."""
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
    if nblocks * bv > 8 * math.prod(xyz) + 4096:  # blocks mostly past the edge (hostile)
        return _decode_voxels(words, start, xyz, bs, grid, table, bits, values, table_size,
                              dt, ch)
    return _decode_blocks(words, start, xyz, bs, grid, table, bits, values, table_size, dt, ch,
                          reuse)


def _decode_blocks(words, start, xyz, bs, grid, table, bits, values, table_size, dt, ch,
                   reuse):
    """Decode one validated channel: unpack the indices of all blocks of a bit width at once,
    put them in output order (cheap: 1 or 2 bytes each), then fetch every label in one gather
    from the table words."""
    bx, by, bz = bs
    gx, gy, gz = grid
    nb, bv = gx * gy * gz, bx * by * bz
    idt = np.dtype(f"u{max(1, int(bits.max()) // 8)}")
    idx = scratch("idx", (nb, bv), idt)  # reused buffers: see _scratch
    idx[bits == 0] = 0
    for b in np.flatnonzero(np.bincount(bits)[1:]).tolist():
        b += 1
        blk = np.flatnonzero(bits == b)
        got = _unpack(words, start + values[blk], b, bv)
        if (got.max(axis=1) >= table_size[blk]).any():
            # only voxels past the volume's edge may point anywhere
            over = got >= table_size[blk, None]
            _check_inside(over, blk, xyz, bs, grid, table_size, ch)
            got = np.where(over, 0, got)
        idx[blk] = got
    # voxel (x, y, z) of the F-ordered output is element (z, y, x) of this C-ordered array
    ordered = scratch("ordered", (gz, bz, gy, by, gx, bx), idt)
    np.copyto(ordered, idx.reshape(gz, gy, gx, bz, by, bx).transpose(0, 3, 1, 4, 2, 5))
    first = start + table  # word of each block's table
    entry = dt.itemsize // 4
    if entry == 1:
        source = words
    elif (first % 2 == first[0] % 2).all():  # uint64 entries all at even (or all at odd) words
        odd = int(first[0] % 2)
        source = words[odd:odd + (len(words) - odd) // 2 * 2].view("<u8")
        if not source.flags.aligned:  # unaligned gathers are several times slower than a copy
            source = source.copy()
        first = (first - odd) // 2
    else:
        source = None
    # each block's first table word, repeated over its voxels of one z plane: the additions
    # below then run in long rows
    first = np.repeat(np.repeat(first.reshape(gz, gy, 1, gx), bx, axis=3), by, axis=2)
    first = first.reshape(gz, 1, gy * by * gx * bx)
    ordered = ordered.reshape(gz, bz, gy * by * gx * bx)
    if source is not None:
        at = np.add(ordered, first, dtype=np.int64, out=scratch("at", ordered.shape, np.int64))
        labels = scratch("labels", (at.size,), dt) if reuse else np.empty(at.size, dt)
        np.take(source, at.ravel(), out=labels, mode="clip")  # the indices were checked
    else:
        at = np.add(np.multiply(ordered, 2, dtype=np.int64), first).ravel()
        labels = words[at].astype(dt) | (words[at + 1].astype(dt) << dt.type(32))
    return labels.reshape(gz * bz, gy * by, gx * bx).T[:xyz[0], :xyz[1], :xyz[2]]


def _unpack(words: np.ndarray, first: np.ndarray, b: int, count: int) -> np.ndarray:
    """Indices [k, count] packed ``b`` bits each, LSB first, from word ``first[k]`` on."""
    nw = (count * b + 31) // 32
    if len(first) and (np.diff(first) == nw).all():  # consecutive blocks: one slice
        w = words[first[0]:first[0] + nw * len(first)].reshape(len(first), nw)
    else:
        w = words[first[:, None] + np.arange(nw)]
    if b >= 8:
        return w.view(f"<u{b // 8}")[:, :count]
    shifts = np.arange(32 // b, dtype=np.uint32) * np.uint32(b)
    idx = (w[:, :, None] >> shifts) & np.uint32((1 << b) - 1)
    return idx.reshape(len(first), -1)[:, :count]


def _check_inside(over: np.ndarray, blk: np.ndarray, xyz, bs, grid, table_size, ch) -> None:
    """Raise if an index past its block's table (``over``: blocks x voxels) lies inside the
    volume; those past the edge are padding, and any value there is valid."""
    bx, by, bz = bs
    lin = np.arange(bx * by * bz)
    lx, ly, lz = lin % bx, lin // bx % by, lin // (bx * by)
    ex = np.minimum(bx, xyz[0] - blk % grid[0] * bx)  # the block's extent inside the volume
    ey = np.minimum(by, xyz[1] - blk // grid[0] % grid[1] * by)
    ez = np.minimum(bz, xyz[2] - blk // (grid[0] * grid[1]) * bz)
    inside = (lx < ex[:, None]) & (ly < ey[:, None]) & (lz < ez[:, None])
    bad = (over & inside).any(axis=1)
    if bad.any():
        i = int(blk[np.argmax(bad)])
        raise CorruptDataError(f"compressed_segmentation channel {ch}: block {i} indexes past "
                               f"its table of {table_size[i]} entries")


def _decode_voxels(words, start, xyz, bs, grid, table, bits, values, table_size, dt, ch):
    """Decode one validated channel voxel by voxel, for blocks far larger than the chunk."""
    x, y, z = xyz
    bx, by, bz = bs
    entry = dt.itemsize // 4
    xs, ys = np.arange(x)[:, None, None], np.arange(y)[None, :, None]
    bxy = xs // bx + grid[0] * (ys // by)
    lxy = xs % bx + bx * (ys % by)
    out = np.empty(xyz, dt, order="F")
    step = max(1, CSEG_SLAB_VOXELS // (x * y))
    for z0 in range(0, z, step):
        zs = np.arange(z0, min(z, z0 + step))[None, None, :]
        blk = bxy + grid[0] * grid[1] * (zs // bz)
        b = bits[blk]
        pos = (lxy + bx * by * (zs % bz)) * b  # bit position in the block (0 if no bits)
        word = np.where(b > 0, start + values[blk] + (pos >> 5), 0)
        idx = ((words[word].astype(np.uint64) >> (pos & 31).astype(np.uint64))
               & _MASKS[b]).astype(np.int64)
        if (idx >= table_size[blk]).any():
            raise CorruptDataError(f"compressed_segmentation channel {ch}: an index past its table")
        at = start + table[blk] + idx * entry
        label = words[at].astype(dt)
        if entry == 2:
            label |= words[at + 1].astype(dt) << dt.type(32)
        out[:, :, z0:z0 + zs.shape[2]] = label
    return out
