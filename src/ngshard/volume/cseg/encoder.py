"""compressed_segmentation encoding: (x, y, z, channels) labels -> bytes, numpy over all blocks
of a channel at once (the layout is in the package docstring)."""

from __future__ import annotations

import numpy as np

from ...errors import SpecError
from .scratch import scratch

# bits per index by the bit length of (distinct values - 1)
_BITS = np.array([0, 1, 2, 4, 4, 8, 8, 8, 8] + [16] * 8 + [32] * 16, np.int64)
_POSITIONS = np.zeros(0, np.uint64)


def encode(array: np.ndarray, bs: tuple[int, int, int]) -> bytes:
    """Encode an (x, y, z, channels) uint32 or uint64 array with block size ``bs``."""
    array = np.asarray(array, array.dtype.newbyteorder("="))
    if array.shape[3] == 1:  # the common case, in one buffer
        words = _encode_channel(array[..., 0], bs, lead=1)
        words[0] = 1
        return words.tobytes()
    channels = [_encode_channel(array[..., ch], bs) for ch in range(array.shape[3])]
    sizes = np.array([len(w) for w in channels], np.int64)
    offsets = len(channels) + np.cumsum(sizes) - sizes
    if offsets[-1] + sizes[-1] >= 2**32:
        raise SpecError("compressed_segmentation chunk too large (channel offsets over 32 bits)")
    return b"".join([offsets.astype("<u4").tobytes(), *(w.tobytes() for w in channels)])


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a well-spread 64-bit hash of each value."""
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


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
    i8: np.ndarray = idx.astype(np.uint8)
    if b == 1:
        return np.packbits(i8, axis=1, bitorder="little").view("<u4")
    if b == 2:
        i8 = i8[:, 0::2] | (i8[:, 1::2] << 2)
    if b <= 4:
        i8 = i8[:, 0::2] | (i8[:, 1::2] << 4)
    return np.ascontiguousarray(i8).view("<u4")


def _positions(n: int) -> np.ndarray:
    """arange(n) as uint64, from a cache shared by all threads (read only)."""
    global _POSITIONS
    positions = _POSITIONS  # another thread may replace it meanwhile: use one
    if len(positions) < n:
        positions = np.arange(max(n, 2 * len(positions)), dtype=np.uint64)
        positions.flags.writeable = False
        _POSITIONS = positions
    return positions[:n]


def _sort_by_key(sub: np.ndarray, lo: np.ndarray, hi: np.ndarray, pbits: int, flat: bool
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted, and where each value came from (its index in the flattened ``sub`` if
    ``flat``, else in its row), for rows spanning < 2**(64 - pbits)."""
    m, bv = sub.shape
    key = scratch("key", sub.shape, np.uint64)
    offset = int(hi.max()) >= 1 << (64 - pbits)  # values that fit need no offset
    if offset:
        np.subtract(sub, lo[:, None], dtype=np.uint64, out=key)
        key <<= np.uint64(pbits)
    else:
        np.left_shift(sub, np.uint64(pbits), dtype=np.uint64, out=key)
    key |= _positions(m * bv).reshape(m, bv) if flat else _positions(bv)
    key.sort(axis=1)
    order = np.bitwise_and(key, np.uint64((1 << pbits) - 1),
                           out=scratch("order", sub.shape, np.uint64)).view(np.int64)
    key >>= np.uint64(pbits)
    if offset:
        key += lo.astype(np.uint64)[:, None]
    return key.astype(sub.dtype, copy=False), order


def _unique_rows(sub: np.ndarray, lo: np.ndarray, hi: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each row (block) of ``sub``, whose least and greatest values are ``lo`` and ``hi``:
    its values sorted, the first-of-each-value mask over them, each voxel's index among the
    row's distinct values, and the number of distinct values."""
    m, bv = sub.shape
    # Value (less the row's least) and position in one key: a plain (SIMD) sort then gives the
    # order, 3x faster than an argsort. The position is the voxel's index in the whole array
    # where the values leave room for it, else in its row; rows whose values span too much
    # for even that take the argsort.
    span = (hi - lo).astype(np.uint64)
    flat_bits = max(1, (m * bv - 1).bit_length())
    if int(span.max()) < 1 << (64 - flat_bits):
        s, order = _sort_by_key(sub, lo, hi, flat_bits, flat=True)
    else:
        pbits = max(1, (bv - 1).bit_length())
        keyed = span < np.uint64(1 << (64 - pbits))
        if keyed.all():
            s, order = _sort_by_key(sub, lo, hi, pbits, flat=False)
        else:
            s = np.empty_like(sub)
            order = np.empty((m, bv), np.int64)
            rows = np.flatnonzero(keyed)
            if len(rows):
                s[rows], order[rows] = _sort_by_key(sub[rows], lo[rows], hi[rows], pbits,
                                                    flat=False)
            rows = np.flatnonzero(~keyed)
            order[rows] = np.argsort(sub[rows], axis=1)
            s[rows] = np.take_along_axis(sub[rows], order[rows], axis=1)
        order += (np.arange(m) * bv)[:, None]
    new = scratch("new", (m, bv), bool)
    new[:, 0] = True
    np.not_equal(s[:, 1:], s[:, :-1], out=new[:, 1:])
    rdt = np.uint16 if bv <= 1 << 16 else np.uint32
    rank = scratch("rank", (m, bv), rdt)
    rank[:, 0] = 0
    np.cumsum(new[:, 1:], axis=1, dtype=rdt, out=rank[:, 1:])
    inv = scratch("inv", (m * bv,), rdt)
    inv[order.ravel()] = rank.ravel()
    return s, new, inv.reshape(m, bv), rank[:, -1].astype(np.int64) + 1


def _blocks(vol: np.ndarray, bs: tuple[int, int, int], grid: list[int]
            ) -> tuple[np.ndarray, bool]:
    """(blocks, z_fastest): one row per block, in header order (x fastest). Within a row the
    voxels lie in the memory order of the input (z fastest for C order, x fastest otherwise),
    so the gathering copy reads runs; that order does not change a block's table, and its
    indices are put back in x-fastest order when packed."""
    (bx, by, bz), (gx, gy, gz) = bs, grid
    z_fastest = abs(vol.strides[2]) < abs(vol.strides[0])
    if not (vol.flags.c_contiguous or vol.flags.f_contiguous):
        # a box of a larger array: copy it whole first, in its own memory order (few pages
        # touched at a time), then regroup it in cache
        if z_fastest:
            box = scratch("box", vol.shape, vol.dtype)
        else:
            box = scratch("box", vol.shape[::-1], vol.dtype).T
        np.copyto(box, vol)
        vol = box
    inner = (bx, by, bz) if z_fastest else (bz, by, bx)
    blocks = scratch("blocks", (gz, gy, gx, *inner), vol.dtype)
    if z_fastest:
        np.copyto(blocks, vol.reshape(gx, bx, gy, by, gz, bz).transpose(4, 2, 0, 1, 3, 5))
    else:
        np.copyto(blocks, vol.T.reshape(gz, bz, gy, by, gx, bx).transpose(0, 2, 4, 1, 3, 5))
    return blocks.reshape(gx * gy * gz, bx * by * bz), z_fastest


def _first_equal_tables(tables: np.ndarray, tstart: np.ndarray, counts: np.ndarray
                        ) -> np.ndarray:
    """For each block, the first block with an equal table (itself if none), so that equal
    tables are stored once: candidates by hash, confirmed by value."""
    h = np.add.reduceat(_mix(tables), tstart) ^ _mix(counts)
    _, first, which = np.unique(h, return_index=True, return_inverse=True)
    cand = first[which.ravel()]
    rep = np.arange(len(counts))
    dup = np.flatnonzero((cand != rep) & (counts == counts[cand]))
    if len(dup):
        n = counts[dup]
        diff = tables[_ranges(tstart[dup], n)] != tables[_ranges(tstart[cand[dup]], n)]
        same = ~np.logical_or.reduceat(diff, np.cumsum(n) - n)
        rep[dup[same]] = cand[dup[same]]
    return rep


def _encode_channel(vol: np.ndarray, bs: tuple[int, int, int], lead: int = 0) -> np.ndarray:
    """One (x, y, z) channel -> ``lead`` words left for the caller, then the channel's: block
    headers, packed indices, tables."""
    xyz = vol.shape
    grid = [-(-v // b) for v, b in zip(xyz, bs)]
    pad = [(0, g * b - v) for v, g, b in zip(xyz, grid, bs)]
    if any(p[1] for p in pad):
        vol = np.pad(vol, pad, mode="edge")
    bx, by, bz = bs
    gx, gy, gz = grid
    nb, bv = gx * gy * gz, bx * by * bz
    if nb == 0:
        return np.zeros(lead, "<u4")
    blocks, z_fastest = _blocks(vol, bs, grid)
    entry = blocks.dtype.itemsize // 4
    lo, hi = blocks.min(axis=1), blocks.max(axis=1)
    mixed = np.flatnonzero(lo != hi)
    counts = np.ones(nb, np.int64)
    if len(mixed):  # blocks of one value need no sorting
        sub = blocks if len(mixed) == nb else \
            np.take(blocks, mixed, axis=0, out=scratch("mixed", (len(mixed), bv), blocks.dtype))
        s, new, inv, counts[mixed] = _unique_rows(sub, lo[mixed], hi[mixed])
    tstart = np.cumsum(counts) - counts
    if len(mixed) == nb:
        tables = s[new]
    else:
        tables = np.empty(int(tstart[-1] + counts[-1]), blocks.dtype)
        tables[tstart] = lo
        if len(mixed):
            tables[_ranges(tstart[mixed], counts[mixed])] = s[new]
    rep = _first_equal_tables(tables, tstart, counts)
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
    out = np.empty(lead + total, "<u4")
    words = out[lead:]
    words[0:2 * nb:2] = toff.astype(np.uint32) | (bits.astype(np.uint32) << 24)
    words[1:2 * nb:2] = voff.astype(np.uint32)
    if len(mixed):
        mixed_bits = bits[mixed]
        for b in np.flatnonzero(np.bincount(mixed_bits)).tolist():
            sel = np.flatnonzero(mixed_bits == b)
            idx = inv if len(sel) == len(inv) else inv[sel]
            if z_fastest:  # a view: its copy happens below
                idx = idx.reshape(-1, bx, by, bz).transpose(0, 3, 2, 1)
            first_w, nw = voff[mixed[sel]], -(-bv * b // 32)
            run = (first_w[-1] - first_w[0]) == nw * (len(sel) - 1)
            if run and b >= 8 and (bv * b) % 32 == 0:  # whole bytes: cast straight into place
                target = words[first_w[0]:first_w[0] + nw * len(sel)].view(f"<u{b // 8}")
                np.copyto(target.reshape(idx.shape), idx, casting="unsafe")
                continue
            packed = _pack(idx.reshape(len(sel), bv), b)
            if run:
                words[first_w[0]:first_w[0] + packed.size] = packed.ravel()
            else:
                words[_ranges(first_w, np.full(len(sel), nw))] = packed.ravel()
    owners = np.flatnonzero(own)
    words[vend:].view(blocks.dtype.newbyteorder("<"))[:] = \
        tables[_ranges(tstart[owners], counts[owners])]
    return out
