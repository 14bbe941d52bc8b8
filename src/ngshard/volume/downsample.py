"""Downsampling by integer factors over whole arrays, as tensorstore's
``downsample`` driver does it: blocks of ``factor`` voxels aligned to multiples of the factor
in the volume's own coordinates (voxel_offset included), a block cut by the data's edge
reduced over the voxels it has.

Methods: ``mean`` (images; integers rounded half to even), ``mode`` (segmentations: the most
frequent value, the smallest on ties), ``min``, ``max``, ``stride`` (a block's first voxel);
``sparse`` mode (igneous' ``--sparse``): zero, the background, wins a block only when the block
holds nothing else, so one-voxel neurites survive.

Integer means of up to 32 bits run compiled (``_mean.c``: one pass, 4-5x numpy's strided
views; they were a fifth of an image pyramid task), and so do integer modes of blocks up to
64 voxels (``_mode.c``: they were half of a segmentation pyramid task); the rest in numpy
(whose modes are the compiled ones' oracle in the tests). tinybrain (igneous'
kernels) is not used: its integer means truncate where tensorstore rounds half to even (a
third of the voxels differ by one) and its mode breaks ties otherwise; its sparse mode is the
oracle of this one in the tests.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from .._kernels import block_mean, block_mode
from ..errors import SpecError

METHODS = ("mean", "mode", "min", "max", "stride")
#: The largest block (voxels) whose integer modes run compiled (``_mode.c``).
MODE_BLOCK = 64


def check_method(method: str, sparse: bool = False) -> str:
    """``method`` if it is one of :data:`METHODS` (``sparse`` only with mode)."""
    if method not in METHODS:
        raise SpecError(f"downsampling method must be one of {', '.join(METHODS)}, not "
                        f"{method!r}")
    if sparse and method != "mode":
        raise SpecError(f"sparse=True is a kind of mode (for segmentations), not of {method}")
    return method


def downsample(data: np.ndarray, factor: Sequence[int], method: str = "mean", *,
               origin: Sequence[int] | np.ndarray = (0, 0, 0), sparse: bool = False
               ) -> np.ndarray:
    """``data`` (x, y, z, channel) reduced by ``factor`` with ``method``.

    Parameters
    ----------
    origin
        The coordinates of ``data[0, 0, 0]``: blocks start at multiples of ``factor``, so
        the result's first voxel is the block holding ``origin`` (``origin // factor``) and
        its last the one holding the last voxel; blocks cut short are reduced over the
        voxels there.

    Returns
    -------
    numpy.ndarray
        Of ``data``'s dtype.
    """
    check_method(method, sparse)
    factor = tuple(int(f) for f in factor)
    if factor == (1, 1, 1):
        return data
    # each axis: a first block cut by the origin, whole blocks, a last block cut by the end;
    # every combination is a box of equal blocks, reduced at once
    parts = []
    for n, f, o in zip(data.shape[:3], factor, origin):
        head = min(n, (-int(o)) % f)
        body = (n - head) // f * f
        tail = n - head - body
        pieces, at, out = [], 0, 0
        for length, block in ((head, head), (body, f), (tail, tail)):
            if length:
                pieces.append((slice(at, at + length), block, slice(out, out + length // block)))
                at, out = at + length, out + length // block
        parts.append(pieces)
    shape = tuple(p[-1][2].stop for p in parts) + data.shape[3:]
    if all(len(p) == 1 for p in parts):  # whole blocks only: the reduction is the result
        (sx, bx, _), (sy, by, _), (sz, bz, _) = (p[0] for p in parts)
        return np.asfortranarray(_reduce(data[sx, sy, sz], (bx, by, bz), method, sparse))
    result = np.empty(shape, data.dtype, order="F")
    for (sx, bx, ox), (sy, by, oy), (sz, bz, oz) in itertools.product(*parts):
        result[ox, oy, oz] = _reduce(data[sx, sy, sz], (bx, by, bz), method, sparse)
    return result


def _reduce(data: np.ndarray, block: tuple[int, int, int], method: str, sparse: bool
            ) -> np.ndarray:
    """``data`` (whole blocks of shape ``block``) reduced block by block."""
    views = [data[i::block[0], j::block[1], k::block[2]] for i, j, k in
             itertools.product(*(range(b) for b in block))]
    if len(views) == 1:
        return views[0]
    if method == "stride":
        return views[0]
    if method == "min":
        return np.minimum.reduce(views)
    if method == "max":
        return np.maximum.reduce(views)
    if method == "mean":
        if data.dtype.kind in "iu" and data.dtype.itemsize <= 4:
            return _compiled(block_mean, data, block)
        return _mean(views, data.dtype)
    if data.dtype.kind in "iu" and len(views) <= MODE_BLOCK:
        return _compiled(block_mode, data, block, sparse)
    return _mode(views, sparse)


def _compiled(kernel, data: np.ndarray, block: tuple[int, int, int], *flags) -> np.ndarray:
    """A block reduction by one compiled pass: integer means rounded half to even
    (``_mean.c``), or modes (``_mode.c``)."""
    whole = data.reshape(data.shape[:3] + (-1,)) if data.ndim != 4 else data
    out = np.empty(tuple(n // b for n, b in zip(whole.shape, block)) + whole.shape[3:],
                   data.dtype, order="F")
    kernel(whole, block, out, *flags)
    return out.reshape(out.shape[:3] + data.shape[3:])


def _mean(views: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    n = len(views)
    if dtype.kind not in "iu":  # summed in the data's type, in C order, as tensorstore does
        acc = np.zeros(views[0].shape, dtype)
        for v in views:
            acc += v
        return (acc / n).astype(dtype)
    if dtype.itemsize == 8:  # sums could pass 2**64: quotients and remainders apart
        return _mean_wide(views, dtype)
    wide = np.int64 if dtype.kind == "i" else np.uint16 if dtype.itemsize == 1 and n <= 256 \
        else np.uint64
    acc = views[0].astype(wide)
    for v in views[1:]:
        np.add(acc, v, out=acc)
    return _round_half_even(acc, n).astype(dtype)


def _round_half_even(acc: np.ndarray, n: int) -> np.ndarray:
    """``acc / n`` rounded half to even, in integers: a sum q * n + r gains n/2 - 1 + (q odd),
    which carries into the quotient exactly when r > n/2, or r = n/2 and q is odd."""
    if n % 2:  # no ties
        acc += n // 2
        return acc // n
    if n & (n - 1) == 0:  # a power of two: shifts
        shift = n.bit_length() - 1
        acc += (acc >> shift) & 1
        acc += n // 2 - 1
        return acc >> shift
    acc += (acc // n) & 1
    acc += n // 2 - 1
    return acc // n


def _mean_wide(views: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Means of 64-bit integers without overflow: quotients and remainders summed apart."""
    n = len(views)
    wide = np.int64 if dtype.kind == "i" else np.uint64
    q = np.zeros(views[0].shape, wide)
    r = np.zeros(views[0].shape, np.int64)
    for v in views:
        vq, vr = np.divmod(v, n)
        q += vq.astype(wide)
        r += vr.astype(np.int64)
    rq, rr = np.divmod(r, n)
    q += rq.astype(wide)
    # the remainder's share rounds the sum half to even
    q += ((2 * rr > n) | ((2 * rr == n) & (q % 2 == 1))).astype(wide)
    return q.astype(dtype)


def _mode(views: list[np.ndarray], sparse: bool) -> np.ndarray:
    """The mode of blocks: a block whose voxels are all equal (most of a segmentation's)
    is its value; the others alone are gathered and counted."""
    best = views[0].copy(order="K")
    mixed = np.zeros(best.shape, bool)
    for v in views[1:]:
        mixed |= best != v
    if mixed.any():
        picked = [v[mixed] for v in views]
        best[mixed] = _mode_counted(picked, sparse) if len(views) <= 16 else \
            _mode_sorted(picked, sparse)
    return best


def _mode_counted(views: list[np.ndarray], sparse: bool) -> np.ndarray:
    """The mode of blocks of at most 16 voxels: each voxel counts its equals among the
    others, a whole array of such voxels at a time (for so few voxels this beats sorting
    every block)."""
    counts = [np.ones(views[0].shape, np.uint8) for _ in views]
    for a, b in itertools.combinations(range(len(views)), 2):
        same = views[a] == views[b]
        counts[a] += same
        counts[b] += same
    if sparse:  # background counts for nothing: any label beats it
        for v, c in zip(views, counts):
            c[v == 0] = 0
    best, most = views[0].copy(), counts[0]
    for view, count in zip(views[1:], counts[1:]):
        better = (count > most) | ((count == most) & (view < best))
        np.copyto(best, view, where=better)
        most = np.maximum(most, count)
    return best


def _mode_sorted(views: list[np.ndarray], sparse: bool) -> np.ndarray:
    """The mode of larger blocks: each block sorted, its longest run found."""
    blocks = np.sort(np.stack(views, axis=-1), axis=-1)
    n = blocks.shape[-1]
    new_run = np.ones(blocks.shape, bool)
    new_run[..., 1:] = blocks[..., 1:] != blocks[..., :-1]
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(n), 0), axis=-1)
    length = np.arange(n) - run_start + 1  # length of the run so far at each position
    if sparse:
        length[blocks == 0] = 0
    best = np.argmax(length, axis=-1)  # the first position where a longest run ends
    return np.take_along_axis(blocks, best[..., None], axis=-1)[..., 0]


def downsample_mean(data: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """Block means from ``data[0, 0, 0]`` (integers rounded half to even)."""
    return downsample(data, factor, "mean")


def downsample_mode(data: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """The most frequent value of each block from ``data[0, 0, 0]`` (the smallest on ties)."""
    return downsample(data, factor, "mode")
