"""Downsampling by integer factors: the mean for images, the most frequent label for
segmentations (so labels stay labels). Pure numpy over whole blocks, no per-voxel loops."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np


def _padded(data: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """``data`` grown to whole blocks by repeating its last voxels, so edge blocks stay
    unbiased."""
    pad = [(0, -s % f) for s, f in zip(data.shape[:3], factor)] + [(0, 0)]
    return np.pad(data, pad, mode="edge")


def _blocks(data: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """(x, y, z, c) -> (X, Y, Z, c, n) with the n = prod(factor) voxels of each block last."""
    data = _padded(data, factor)
    x, y, z, c = data.shape
    fx, fy, fz = factor
    blocks = data.reshape(x // fx, fx, y // fy, fy, z // fz, fz, c)
    return blocks.transpose(0, 2, 4, 6, 1, 3, 5).reshape(x // fx, y // fy, z // fz, c, -1)


def downsample_mean(data: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """Block means, rounded for integer types."""
    means = _blocks(data, factor).mean(axis=-1)
    if data.dtype.kind in "iu":
        means = np.rint(means)
    return means.astype(data.dtype)


def downsample_mode(data: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """The most frequent value of each block (the smallest one on ties)."""
    if math.prod(factor) <= 8:
        return _mode_by_pairs(data, factor)
    blocks = np.sort(_blocks(data, factor), axis=-1)
    n = blocks.shape[-1]
    # run lengths in each sorted block: a run ends where the next value differs
    new_run = np.ones(blocks.shape, bool)
    new_run[..., 1:] = blocks[..., 1:] != blocks[..., :-1]
    run_start = np.maximum.accumulate(np.where(new_run, np.arange(n), 0), axis=-1)
    length = np.arange(n) - run_start + 1  # length of the run so far at each position
    best = np.argmax(length, axis=-1)  # first position where the longest run ends
    return np.take_along_axis(blocks, best[..., None], axis=-1)[..., 0]


def _mode_by_pairs(data: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """downsample_mode for blocks of at most 8 voxels (2x2x2 and smaller): each voxel of a
    block counts its equals among the others, one whole array of such voxels at a time, which
    for so few voxels beats sorting every block."""
    data = _padded(data, factor)
    fx, fy, fz = factor
    # contiguous copies: the comparisons below then run at memory speed
    views = [data[i::fx, j::fy, k::fz].copy(order="K") for i, j, k in itertools.product(
        range(fx), range(fy), range(fz))]
    counts = [np.ones(views[0].shape, np.uint8) for _ in views]
    for a, b in itertools.combinations(range(len(views)), 2):
        same = views[a] == views[b]
        counts[a] += same
        counts[b] += same
    best, most = views[0].copy(), counts[0]
    for view, count in zip(views[1:], counts[1:]):
        better = (count > most) | ((count == most) & (view < best))
        np.copyto(best, view, where=better)
        most = np.maximum(most, count)
    return best
