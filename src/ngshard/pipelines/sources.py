"""What a conversion task reads: a box of voxels, always as an (x, y, z, channel) array,
whether it comes from a zarr array in its own axis order or a precomputed scale.

Sources are small picklable values (URLs and axis roles), so a task can travel to another
process or a Dask worker; each process opens an array's handle once (``open_*``, cached), and
reads boxes of it through a staged array over the handle's chunk store and codec (``voxels``),
never a Volume or ZarrArray.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

import numpy as np

from ..errors import SpecError
from ..staged import StagedChangesArray
from ..staged.stored import StoredChunks
from ..storage import open_storage
from ..volume.handle import ScaleHandle
from ..volume.info import VolumeInfo
from ..zarr.handle import ArrayHandle


@functools.lru_cache(maxsize=32)
def open_zarr(url: str) -> ArrayHandle:
    """The handle of the zarr array at ``url``, opened once per process."""
    return ArrayHandle.open(url)


@functools.lru_cache(maxsize=32)
def open_scale(url: str, scale: str) -> ScaleHandle:
    """The handle of a precomputed scale, opened once per process for reading."""
    return ScaleHandle.open(url, scale)


@functools.lru_cache(maxsize=32)
def open_planned_scale(url: str, info: str, scale: str) -> ScaleHandle:
    """A scale of the info ``info`` (JSON text) of the layer at ``url``: a job's levels that
    the stored info names only once they are all made; opened once per process."""
    return ScaleHandle(open_storage(url), VolumeInfo.from_json(json.loads(info)), scale, "r")


@functools.lru_cache(maxsize=32)
def voxels(handle: ScaleHandle | ArrayHandle) -> StagedChangesArray:
    """Numpy indexing (0-based) over the chunks of ``handle``, for reading boxes (absent
    chunks read as the fill value); cached with the handle."""
    return StagedChangesArray(StoredChunks(handle.store, handle.codec, handle))


def forget_opened() -> None:
    """Close what this process holds open (the arrays of another job may have changed)."""
    for cached in (open_zarr, open_scale, open_planned_scale, voxels):
        cached.cache_clear()


@dataclass(frozen=True)
class ZarrSource:
    """A zarr array; ``roles`` says which of its axes is x, y, z, c (channels) and t (time,
    of one point)."""

    url: str
    roles: tuple[tuple[str, int], ...]

    @property
    def role(self) -> dict[str, int]:
        return dict(self.roles)

    def read(self, lo, hi) -> np.ndarray:
        array = voxels(open_zarr(self.url))
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
    the chunk grid and a zarr array count, moved by ``shift`` (where the box a task fills
    begins in this scale: a transfer cut to a bounding box)."""

    url: str
    scale: str
    shift: tuple[int, int, int] = (0, 0, 0)

    def read(self, lo, hi) -> np.ndarray:
        box = tuple(slice(int(a) + s, int(b) + s) for a, b, s in zip(lo, hi, self.shift))
        return voxels(open_scale(self.url, self.scale))[box]


def as_dtype(data: np.ndarray, dtype: np.dtype, where: str) -> np.ndarray:
    """``data`` in the destination's dtype, refusing values it cannot hold (a negative label
    of an int64 array) rather than wrapping them."""
    if data.dtype == dtype:
        return data
    if data.dtype.kind == "i" and dtype.kind == "u" and data.size and data.min() < 0:
        raise SpecError(f"{where}: negative value {data.min()} cannot be stored as {dtype}")
    return data.astype(dtype)
