"""Downsampling factors of a pyramid: neuroglancer's near-isotropic rule (its python package's
``downsample_scales.compute_near_isotropic_downsampling_scales``, which igneous follows): each
level halves the axis of the finest voxel, and with it every other axis whose voxel comes
nearer the new size by halving. 4x4x40 nm electron microscopy thus goes 2x2x1 until the
voxel is near isotropic (8, 16, 32 nm), then 2x2x2; an isotropic volume goes 2x2x2."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import SpecError
from .vectors import xyz

Factor = tuple[int, int, int]


def near_isotropic_factors(resolution: Sequence[float], levels: int) -> list[Factor]:
    """The factor of each of ``levels`` successive levels (each relative to the one before).

    Parameters
    ----------
    resolution
        The finest level's voxel size (x, y, z), any unit.
    levels
        How many coarser levels.

    Returns
    -------
    list of (fx, fy, fz)
        Each 1 or 2.

    Raises
    ------
    SpecError
        A voxel size that is not positive.
    """
    voxel = np.asarray(resolution, float)
    if voxel.shape != (3,) or not (voxel > 0).all():
        raise SpecError(f"a voxel size must be 3 positive numbers, got {tuple(resolution)}")
    out = []
    for _ in range(levels):
        finest = int(np.argmin(voxel))
        target = voxel[finest] * 2
        step = [2 if d == finest or abs(voxel[d] - target) > abs(voxel[d] * 2 - target)
                else 1 for d in range(3)]
        out.append((step[0], step[1], step[2]))
        voxel = voxel * step
    return out


def pyramid_factors(size: Sequence[int], resolution: Sequence[float],
                    chunk_size: Sequence[int], levels: int | None = None,
                    factor: Sequence[int] | None = None) -> list[Factor]:
    """The factors of a pyramid's levels: ``factor`` every level when given, else the
    near-isotropic rule; ``levels`` of them, or (None) until the coarsest level fits in one
    chunk. Past one voxel along an axis, its factor becomes 1 (a level never grows).

    Raises
    ------
    SpecError
        A factor that is not 3 positive integers, or a negative ``levels``.
    """
    fixed: Factor = (1, 1, 1)
    if factor is not None:
        given = tuple(int(f) for f in factor)
        if len(given) != 3 or min(given) < 1:
            raise SpecError(f"a downsampling factor must be 3 positive integers, got "
                            f"{tuple(factor)}")
        fixed = (given[0], given[1], given[2])
    if levels is not None and int(levels) < 0:
        raise SpecError(f"levels must be >= 0, got {levels}")
    cap = 32 if levels is None else int(levels)
    rule = near_isotropic_factors(resolution, cap) if factor is None else [fixed] * cap
    now = [int(n) for n in size]
    out: list[Factor] = []
    for f in rule:
        if levels is None and all(n <= c for n, c in zip(now, chunk_size)):
            break
        step = xyz(k if n > 1 else 1 for k, n in zip(f, now))
        if step == (1, 1, 1):
            break
        out.append(step)
        now = [-(-n // k) for n, k in zip(now, step)]
    return out
