"""The compressed_segmentation chunk encoding: uint32/uint64 labels <-> bytes.

Layout (neuroglancer's spec): per channel a uint32 offset (in words, from the start) of that
channel's data; per channel and block (x fastest) a 2-word header: table offset (24 bits), bits
per value (8 bits), value offset (24 bits, as tensorstore reads it); offsets are in words from
the channel start, and a channel's data runs to the end of the buffer. Values are packed LSB
first over the whole block (x fastest), also past the volume's edge.

Both directions are numpy, vectorized over all blocks of a channel, so they run on every
thread at once. The C++ ``compressed_segmentation`` package (the tests' reference) is not used:
it holds the GIL, checks nothing (out-of-range offsets, bit widths or table indices make it
read outside the buffer: segfaults or silently wrong labels) and mis-decodes valid 32-bit
blocks. The encoder writes as many bytes as the reference encoder (identical tables are stored
once); the decoder first validates every header with tensorstore's rules.
"""

from __future__ import annotations

import math
import threading

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
_POSITIONS = np.zeros(0, np.uint64)


def _scratch(slot: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized array in a buffer this thread reuses from chunk to chunk: fresh memory
    for every large temporary costs a page fault per 4 KiB, a third of the encoding time.
    Only for temporaries: nothing returned may live in one."""
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
    i8 = idx.astype(np.uint8)
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
    key = _scratch("key", sub.shape, np.uint64)
    offset = int(hi.max()) >= 1 << (64 - pbits)  # values that fit need no offset
    if offset:
        np.subtract(sub, lo[:, None], dtype=np.uint64, out=key)
        key <<= np.uint64(pbits)
    else:
        np.left_shift(sub, np.uint64(pbits), dtype=np.uint64, out=key)
    key |= _positions(m * bv).reshape(m, bv) if flat else _positions(bv)
    key.sort(axis=1)
    order = np.bitwise_and(key, np.uint64((1 << pbits) - 1),
                           out=_scratch("order", sub.shape, np.uint64)).view(np.int64)
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
    new = _scratch("new", (m, bv), bool)
    new[:, 0] = True
    np.not_equal(s[:, 1:], s[:, :-1], out=new[:, 1:])
    rdt = np.uint16 if bv <= 1 << 16 else np.uint32
    rank = _scratch("rank", (m, bv), rdt)
    rank[:, 0] = 0
    np.cumsum(new[:, 1:], axis=1, dtype=rdt, out=rank[:, 1:])
    inv = _scratch("inv", (m * bv,), rdt)
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
            box = _scratch("box", vol.shape, vol.dtype)
        else:
            box = _scratch("box", vol.shape[::-1], vol.dtype).T
        np.copyto(box, vol)
        vol = box
    inner = (bx, by, bz) if z_fastest else (bz, by, bx)
    blocks = _scratch("blocks", (gz, gy, gx, *inner), vol.dtype)
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
            np.take(blocks, mixed, axis=0, out=_scratch("mixed", (len(mixed), bv), blocks.dtype))
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


def decode(data: bytes | memoryview, shape: tuple[int, ...], dt: np.dtype,
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
    idx = _scratch("idx", (nb, bv), idt)  # reused buffers: see _scratch
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
    ordered = _scratch("ordered", (gz, bz, gy, by, gx, bx), idt)
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
        at = np.add(ordered, first, dtype=np.int64, out=_scratch("at", ordered.shape, np.int64))
        labels = _scratch("labels", (at.size,), dt) if reuse else np.empty(at.size, dt)
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


