"""The compressed_segmentation chunk encoding: uint32/uint64 labels <-> bytes.

Layout (neuroglancer's spec): per channel a uint32 offset (in words, from the start) of that
channel's data; per channel and block (x fastest) a 2-word header: table offset (24 bits), bits
per value (8 bits), value offset (24 bits, as tensorstore reads it); offsets are in words from
the channel start, and a channel's data runs to the end of the buffer. Values are packed LSB
first over the whole block (x fastest), also past the volume's edge.

Encoding is numpy, vectorized over all blocks of a channel, so it runs on many threads at once
(the C++ ``compressed_segmentation`` package holds the GIL). It writes the bytes the reference
encoder writes, up to the order of the sections: identical tables are stored once.

Decoding goes through the C++ package, which checks nothing: out-of-range offsets, bit widths
or table indices make it read outside the buffer (segfaults or silently wrong labels), and it
mis-decodes valid 32-bit blocks. Every channel is therefore validated first, with tensorstore's
rules, and blocks the package cannot decode safely go through a numpy decoder.
"""

from __future__ import annotations

import math
import threading

import compressed_segmentation as _cpp
import numpy as np

from ..errors import CorruptDataError, SpecError

__all__ = ["decode", "encode"]

_VALID_BITS = np.zeros(256, bool)
_VALID_BITS[[0, 1, 2, 4, 8, 16, 32]] = True
_MASKS = np.array([(1 << b) - 1 for b in range(33)], np.uint64)
_SLAB = 1 << 20  # voxels per step of the numpy decoder
# bits per index by the bit length of (distinct values - 1)
_BITS = np.array([0, 1, 2, 4, 4, 8, 8, 8, 8] + [16] * 8 + [32] * 16, np.int64)
_SCRATCH_MAX = 16 << 20  # bytes of one reused per-thread buffer
_local = threading.local()


def _scratch(slot: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized array in a buffer this thread reuses from chunk to chunk: fresh memory
    for every large temporary costs a page fault per 4 KiB, a third of the encoding time."""
    n = math.prod(shape) * np.dtype(dtype).itemsize
    if n > _SCRATCH_MAX:
        return np.empty(shape, dtype)
    buf = getattr(_local, slot, None)
    if buf is None or len(buf) < n:
        buf = np.empty(max(n, 1 << 20), np.uint8)
        setattr(_local, slot, buf)
    return buf[:n].view(dtype).reshape(shape)


def encode(array: np.ndarray, bs: tuple[int, int, int]) -> bytes:
    """Encode an (x, y, z, channels) uint32 or uint64 array with block size ``bs``."""
    array = np.asarray(array, array.dtype.newbyteorder("="))
    channels = [_encode_channel(array[..., ch], bs) for ch in range(array.shape[3])]
    sizes = np.array([len(w) for w in channels], np.int64)
    offsets = len(channels) + np.cumsum(sizes) - sizes
    if offsets[-1] + sizes[-1] >= 2**32:
        raise SpecError("compressed_segmentation chunk too large (channel offsets over 32 bits)")
    return b"".join([offsets.astype("<u4").tobytes(), *(w.tobytes() for w in channels)])


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenated ranges [start, start + count)."""
    total = int(counts.sum())
    ends = np.cumsum(counts)
    return np.arange(total) + np.repeat(starts - (ends - counts), counts)


def _pack(idx: np.ndarray, b: int) -> np.ndarray:
    """(n, voxels) indices below 2**b -> (n, words) uint32, packed LSB first."""
    n, bv = idx.shape
    per = 32 // b
    nw = -(-bv * b // 32)
    if nw * per != bv:
        idx = np.pad(idx, ((0, 0), (0, nw * per - bv)))
    if b == 32:
        return idx.astype("<u4")
    if b == 16:
        return idx.astype("<u2").view("<u4")
    i8 = idx.astype(np.uint8)
    if b == 1:
        return np.packbits(i8, axis=1, bitorder="little").view("<u4")
    if b == 2:
        i8 = i8[:, 0::2] | (i8[:, 1::2] << 2)
    if b <= 4:
        i8 = i8[:, 0::2] | (i8[:, 1::2] << 4)
    return np.ascontiguousarray(i8).view("<u4")


def _unique_rows(sub: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each row (block): its values sorted, the first-of-each-value mask over them, each
    voxel's index among the row's distinct values, and the number of distinct values."""
    m, bv = sub.shape
    pbits = max(1, (bv - 1).bit_length())
    if sub.dtype.itemsize * 8 + pbits <= 64 or int(sub.max()) < (1 << (64 - pbits)):
        # value and position in one key: a plain (SIMD) sort instead of a 3x slower argsort
        key = np.left_shift(sub, np.uint64(pbits), dtype=np.uint64,
                            out=_scratch("key", sub.shape, np.uint64))
        key |= np.arange(bv, dtype=np.uint64)
        key.sort(axis=1)
        order = np.bitwise_and(key, np.uint64((1 << pbits) - 1),
                               out=_scratch("order", sub.shape, np.uint64)).view(np.int64)
        key >>= np.uint64(pbits)
        s = key.astype(sub.dtype, copy=False)
    else:
        order = np.argsort(sub, axis=1)
        s = np.take_along_axis(sub, order, axis=1)
    new = _scratch("new", (m, bv), bool)
    new[:, 0] = True
    np.not_equal(s[:, 1:], s[:, :-1], out=new[:, 1:])
    rdt = np.uint16 if bv <= 1 << 16 else np.uint32
    rank = np.cumsum(new, axis=1, dtype=rdt, out=_scratch("rank", (m, bv), rdt))
    rank -= rdt(1)
    order += (np.arange(m) * bv)[:, None]
    inv = _scratch("inv", (m * bv,), rdt)
    inv[order.ravel()] = rank.ravel()
    return s, new, inv.reshape(m, bv), rank[:, -1].astype(np.int64) + 1


def _encode_channel(vol: np.ndarray, bs: tuple[int, int, int]) -> np.ndarray:
    """One (x, y, z) channel -> its words: block headers, packed indices, then tables."""
    xyz = vol.shape
    grid = [-(-v // b) for v, b in zip(xyz, bs)]
    pad = [(0, g * b - v) for v, g, b in zip(xyz, grid, bs)]
    if any(p[1] for p in pad):
        vol = np.pad(vol, pad, mode="edge")
    bx, by, bz = bs
    gx, gy, gz = grid
    nb, bv = gx * gy * gz, bx * by * bz
    if nb == 0:
        return np.zeros(0, "<u4")
    # Rows of blocks in header order (x fastest). Within a row, voxels in the memory order of
    # the input, so the gathering copy reads runs: z fastest for C order. The order of voxels
    # does not change a block's table; its indices are put in x-fastest order when packed.
    z_fastest = abs(vol.strides[2]) < abs(vol.strides[0])
    inner = (bx, by, bz) if z_fastest else (bz, by, bx)
    blocks = _scratch("blocks", (gz, gy, gx, *inner), vol.dtype)
    if z_fastest:
        np.copyto(blocks, vol.reshape(gx, bx, gy, by, gz, bz).transpose(4, 2, 0, 1, 3, 5))
    else:
        np.copyto(blocks, vol.T.reshape(gz, bz, gy, by, gx, bx).transpose(0, 2, 4, 1, 3, 5))
    blocks = blocks.reshape(nb, bv)
    entry = blocks.dtype.itemsize // 4
    lo = blocks.min(axis=1)
    mixed = np.flatnonzero(lo != blocks.max(axis=1))
    counts = np.ones(nb, np.int64)
    if len(mixed):  # blocks of one value need no sorting
        sub = blocks if len(mixed) == nb else \
            np.take(blocks, mixed, axis=0, out=_scratch("mixed", (len(mixed), bv), blocks.dtype))
        s, new, inv, counts[mixed] = _unique_rows(sub)
    tstart = np.cumsum(counts) - counts
    tables = np.empty(int(tstart[-1] + counts[-1]), blocks.dtype)
    tables[tstart] = lo
    if len(mixed) == nb:
        tables = s[new]
    elif len(mixed):
        tables[_ranges(tstart[mixed], counts[mixed])] = s[new]
    # a table equal to an earlier one is stored once: candidates by hash, confirmed by value
    t64 = tables.astype(np.uint64)
    h = np.add.reduceat(t64 * (t64 | np.uint64(1)), tstart) ^ np.add.reduceat(t64, tstart)
    h ^= counts.astype(np.uint64) << np.uint64(40)
    _, first, which = np.unique(h, return_index=True, return_inverse=True)
    cand = first[which.ravel()]
    rep = np.arange(nb)
    dup = np.flatnonzero((cand != rep) & (counts == counts[cand]))
    if len(dup):
        n = counts[dup]
        diff = tables[_ranges(tstart[dup], n)] != tables[_ranges(tstart[cand[dup]], n)]
        same = ~np.logical_or.reduceat(diff, np.cumsum(n) - n)
        rep[dup[same]] = cand[dup[same]]
    bits = _BITS[np.minimum(np.frexp((counts - 1).astype(np.float64))[1], 32)]
    nwords = (bv * bits + 31) // 32
    voff = 2 * nb + np.cumsum(nwords) - nwords
    vend = 2 * nb + int(nwords.sum())
    own = rep == np.arange(nb)
    tw = np.where(own, counts * entry, 0)
    toff = (vend + np.cumsum(tw) - tw)[rep]
    total = vend + int(tw.sum())
    if total >= 1 << 24:
        raise SpecError(f"compressed_segmentation cannot encode this {vol.dtype.name} chunk "
                        f"with block size {bs}: {total} words overflow its 24-bit offsets")
    words = np.empty(total, "<u4")
    words[0:2 * nb:2] = toff.astype(np.uint32) | (bits.astype(np.uint32) << 24)
    words[1:2 * nb:2] = voff.astype(np.uint32)
    if len(mixed):
        mixed_bits = bits[mixed]
        for b in np.flatnonzero(np.bincount(mixed_bits)).tolist():
            sel = np.flatnonzero(mixed_bits == b)
            idx = inv if len(sel) == len(inv) else inv[sel]
            if z_fastest:
                idx = idx.reshape(-1, bx, by, bz).transpose(0, 3, 2, 1).reshape(len(sel), bv)
            packed = _pack(idx, b)
            first_w = voff[mixed[sel]]
            if (first_w[-1] - first_w[0]) == packed.shape[1] * (len(sel) - 1):  # one run
                words[first_w[0]:first_w[0] + packed.size] = packed.ravel()
            else:
                words[_ranges(first_w, np.full(len(sel), packed.shape[1]))] = packed.ravel()
    owners = np.flatnonzero(own)
    words[vend:].view(blocks.dtype.newbyteorder("<"))[:] = \
        tables[_ranges(tstart[owners], counts[owners])]
    return words


def decode(data: bytes | memoryview, shape: tuple[int, ...], dt: np.dtype,
           bs: tuple[int, int, int]) -> np.ndarray:
    """An (x, y, z, channels) array of ``dt`` from a chunk; CorruptDataError on bad bytes."""
    if len(data) % 4:
        raise CorruptDataError(f"compressed_segmentation chunk of {len(data)} bytes, not whole "
                               f"words")
    words = np.frombuffer(data, "<u4")
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
    chans = [_decode_channel(data, words, int(s), xyz, bs, dt, ch) for ch, s in enumerate(offsets)]
    if c == 1:
        return chans[0][..., None]
    out = np.empty(shape, dt, order="F")
    for ch, a in enumerate(chans):
        out[..., ch] = a
    return out


def _decode_channel(data: bytes, words: np.ndarray, start: int, xyz: tuple[int, ...],
                  bs: tuple[int, int, int], dt: np.dtype, ch: int) -> np.ndarray:
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
    # blocks whose table may be shorter than 2**bits: their indices must be checked
    risky = np.nonzero((bits > 0) & (table_size < (np.int64(1) << bits)))[0]
    volume = xyz[0] * xyz[1] * xyz[2]
    if ((bits == 32).any() or (hdr[:, 1] >> 24).any()
            or risky.size * bv > 8 * volume + 4096):
        # the package mis-decodes 32-bit blocks and reads all 32 bits of the value offset
        return _decode_numpy(words, start, xyz, bs, grid, table, bits, values, table_size, dt, ch)
    if risky.size:
        _check_indices(words, start, xyz, bs, grid, bits, values, table_size, risky, ch)
    # the package decodes channel 0 of a buffer whose first word is that channel's offset
    buf = data if start == 1 and type(data) is bytes else b"\1\0\0\0" + bytes(data[4 * start:])
    return _cpp.decompress(buf, tuple(xyz), dt, bs, order="F")


def _unpack(words: np.ndarray, first: np.ndarray, b: int, count: int) -> np.ndarray:
    """Indices [k, count] packed ``b`` bits each, LSB first, from word ``first[k]`` on."""
    nw = (count * b + 31) // 32
    w = words[first[:, None] + np.arange(nw)]
    if b == 32:
        return w
    shifts = np.arange(32 // b, dtype=np.uint32) * np.uint32(b)
    idx = (w[:, :, None] >> shifts) & np.uint32((1 << b) - 1)
    return idx.reshape(len(first), -1)[:, :count]


def _check_indices(words, start, xyz, bs, grid, bits, values, table_size, blocks, ch) -> None:
    """Raise unless every index inside the volume of these blocks is within its table."""
    bx, by, bz = bs
    bv = bx * by * bz
    lin = np.arange(bv)
    lx, ly, lz = lin % bx, lin // bx % by, lin // (bx * by)
    # extent of each block inside the volume
    ex = np.minimum(bx, xyz[0] - blocks % grid[0] * bx)
    ey = np.minimum(by, xyz[1] - blocks // grid[0] % grid[1] * by)
    ez = np.minimum(bz, xyz[2] - blocks // (grid[0] * grid[1]) * bz)
    for b in np.unique(bits[blocks]).tolist():
        sel = bits[blocks] == b
        blk = blocks[sel]
        idx = _unpack(words, start + values[blk], b, bv)
        inside = (lx < ex[sel, None]) & (ly < ey[sel, None]) & (lz < ez[sel, None])
        over = np.where(inside, idx, 0).max(axis=1) >= table_size[blk]
        if over.any():
            i = int(blk[np.argmax(over)])
            raise CorruptDataError(f"compressed_segmentation channel {ch}: block {i} indexes "
                                   f"past its table of {table_size[i]} entries")


def _decode_numpy(words, start, xyz, bs, grid, table, bits, values, table_size, dt, ch):
    """Decode one validated channel voxel by voxel in numpy, checking every table index."""
    x, y, z = xyz
    bx, by, bz = bs
    entry = dt.itemsize // 4
    xs, ys = np.arange(x)[:, None, None], np.arange(y)[None, :, None]
    bxy = xs // bx + grid[0] * (ys // by)
    lxy = xs % bx + bx * (ys % by)
    out = np.empty(xyz, dt, order="F")
    step = max(1, _SLAB // (x * y))
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


