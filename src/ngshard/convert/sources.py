"""What a conversion task reads: a box of voxels, always as an (x, y, z, channel) array,
whether it comes from a zarr array in its own axis order, a precomputed scale, or a finer
precomputed scale downsampled on the fly.

Sources are small picklable values (URLs and axis roles), so a task can travel to another
process or a Dask worker; each process opens an array once (``_open_*``, cached).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..types import VolumeMode


@functools.lru_cache(maxsize=32)
def open_zarr(url: str):
    """The zarr array at ``url``, opened once per process."""
    from ..zarr import open_array

    return open_array(url)


@functools.lru_cache(maxsize=32)
def open_scale(url: str, scale: str, mode: VolumeMode = "r"):
    """A precomputed scale, opened once per process (mode "r")."""
    from ..volume import open_volume

    return open_volume(url, scale, mode)


@dataclass(frozen=True)
class ZarrSource:
    """A zarr array; ``roles`` says which of its axes is x, y, z, c (channels) and t (time,
    of one point)."""

    url: str
    roles: tuple[tuple[str, int], ...]
    magnification = 1  # source voxels read per voxel returned

    @property
    def role(self) -> dict[str, int]:
        return dict(self.roles)

    def read(self, lo, hi) -> np.ndarray:
        array = open_zarr(self.url)
        role = self.role
        index: list = [slice(None)] * array.ndim
        for d, axis in enumerate("xyz"):
            index[role[axis]] = slice(int(lo[d]), int(hi[d]))
        if "t" in role:
            index[role["t"]] = 0
        data = array[tuple(index)]
        kept = [r for r, _ in sorted(role.items(), key=lambda item: item[1]) if r != "t"]
        data = data.transpose([kept.index(r) for r in "xyzc" if r in kept])
        return data if "c" in role else data[..., None]


@dataclass(frozen=True)
class PrecomputedSource:
    """One scale (by key) of a precomputed volume; boxes are 0-based (from voxel_offset), as
    the chunk grid and a zarr array count."""

    url: str
    scale: str
    magnification = 1

    def read(self, lo, hi) -> np.ndarray:
        return open_scale(self.url, self.scale).translate_to[0].read_box(lo, hi)


@dataclass(frozen=True)
class DownsampledSource:
    """A precomputed scale ``factor`` times coarser than ``fine``: the mean of each block for
    images, its most frequent value for segmentations."""

    fine: PrecomputedSource
    factor: tuple[int, int, int]
    segmentation: bool

    @property
    def magnification(self) -> int:
        """Source voxels read per voxel returned."""
        return self.factor[0] * self.factor[1] * self.factor[2]

    def read(self, lo, hi) -> np.ndarray:
        from ..volume.downsample import downsample_mean, downsample_mode

        f = np.asarray(self.factor)
        size = np.asarray(open_scale(self.fine.url, self.fine.scale).scale.size)
        data = self.fine.read(np.asarray(lo) * f, np.minimum(np.asarray(hi) * f, size))
        reduce = downsample_mode if self.segmentation else downsample_mean
        return reduce(data, self.factor)


def as_dtype(data: np.ndarray, dtype: np.dtype, where: str) -> np.ndarray:
    """``data`` in the destination's dtype, refusing values it cannot hold (a negative label
    of an int64 array) rather than wrapping them."""
    if data.dtype == dtype:
        return data
    if data.dtype.kind == "i" and dtype.kind == "u" and data.size and data.min() < 0:
        raise SpecError(f"{where}: negative value {data.min()} cannot be stored as {dtype}")
    return data.astype(dtype)
