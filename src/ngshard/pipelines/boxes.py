"""Task boxes over a segmentation: the region a job covers (a scale of a precomputed layer or
a zarr array, optionally a bounding box of it), its tiling into boxes that overlap by one
voxel, and a box's labels read with zeros outside the region.

Neighbouring boxes share one plane of voxels, so what each box makes of its labels meets its
neighbour's on that plane: marching cubes over the cells between voxel centres (the cells of
a box and of its neighbour partition the region), TEASAR skeletons whose border targets lie
on the shared plane (kimimaro's ``fix_borders``). Meshes tile a frame padded by one zero voxel
on every side, so that surfaces touching the region's edge are closed there.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SpecError
from ..storage import open_storage
from ..volume.vectors import xyz
from .sources import PrecomputedSource, ZarrSource, as_dtype, open_scale


@dataclass(frozen=True)
class Region:
    """What a job segments: ``source`` voxels [lo, hi) (0-based source coordinates, x, y,
    z), placed in the world by ``offset`` (the absolute voxel of source voxel 0, a
    precomputed scale's voxel_offset) and ``resolution`` (nm per voxel)."""

    source: Any
    lo: tuple[int, int, int]
    hi: tuple[int, int, int]
    offset: tuple[int, int, int]
    resolution: tuple[float, float, float]
    where: str  # for messages

    @property
    def shape(self) -> np.ndarray:
        return np.subtract(self.hi, self.lo)

    def corner_nm(self, at: Any) -> np.ndarray:
        """Where the centre of region voxel ``at`` (relative to ``lo``, may be -1) lies, in
        nm: voxel i of a layer spans [i, i + 1), as Neuroglancer draws it."""
        return (np.asarray(at, np.float64) + np.add(self.lo, self.offset) + 0.5) * \
            np.asarray(self.resolution, np.float64)

    def read(self, lo: Any, hi: Any, ids: np.ndarray | None = None) -> np.ndarray:
        """Labels of region voxels [lo, hi) (relative to ``lo`` of the region; they may lie
        one voxel outside it) as a uint64 (x, y, z) array, zero outside the region (and
        where a label is not one of ``ids``, when given)."""
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        out = np.zeros(tuple((hi - lo).tolist()), np.uint64, order="F")
        a, b = np.maximum(lo, 0), np.minimum(hi, self.shape)
        if (b > a).all():
            data = self.source.read(a + self.lo, b + self.lo)
            if data.shape[3] != 1:
                raise SpecError(f"{self.where}: a segmentation has one channel, not "
                                f"{data.shape[3]}")
            if data.dtype.kind not in "ui":
                raise SpecError(f"{self.where}: labels must be integers, not {data.dtype}")
            out[tuple(slice(int(x), int(y)) for x, y in zip(a - lo, b - lo))] = \
                as_dtype(data[..., 0], np.dtype(np.uint64), self.where)
        if ids is not None:
            out[~np.isin(out, ids)] = 0
        return out


@dataclass(frozen=True)
class Box:
    """One task's box: region voxels [lo, hi) (relative to the region's ``lo``), its place
    ``index`` in the tiling and a ``name`` unique in the job."""

    name: str
    index: tuple[int, int, int]
    lo: tuple[int, int, int]
    hi: tuple[int, int, int]


def tiles(n: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) of the boxes of ``size`` cells tiling ``n`` voxels along one axis: box
    k holds voxels [k size, (k + 1) size + 1), one voxel shared with the next, clipped; a
    last box of one cell joins the one before (the padded frame of meshes has one cell
    more than its region: a region of whole boxes is not given a box of a sliver)."""
    count = max(1, math.ceil((n - 1) / size))
    if count > 1 and n - 1 == (count - 1) * size + 1:
        count -= 1
    return [(k * size, min((k + 1) * size + 1, n) if k < count - 1 else n)
            for k in range(count)]


def boxes(shape: Any, size: Any, start: int = 0) -> list[Box]:
    """The boxes tiling a region of ``shape`` voxels (see :func:`tiles`), in a frame whose
    first voxel is region voxel ``start`` (-1 for the padded frame of meshes)."""
    axes = [tiles(int(n), int(s)) for n, s in zip(shape, size)]
    out = []
    for index in itertools.product(*(range(len(a)) for a in axes)):
        lo = tuple(axes[d][i][0] + start for d, i in enumerate(index))
        hi = tuple(axes[d][i][1] + start for d, i in enumerate(index))
        out.append(Box("_".join(map(str, index)), xyz(index), xyz(lo), xyz(hi)))
    return out


def box_size(value: Any) -> tuple[int, int, int]:
    """A box size argument (one integer or three) as (x, y, z)."""
    size = xyz(int(v) for v in np.broadcast_to(np.asarray(value), (3,)))
    if min(size) < 1:
        raise SpecError(f"box sizes must be positive, got {value!r}")
    return size


def open_region(seg: str | os.PathLike, scale: int | str = 0, bbox: Any = None,
                axes: str | None = None) -> tuple[Region, Any]:
    """The region of a segmentation to process, and its precomputed ScaleHandle (None for
    zarr). ``bbox`` is (x0, y0, z0, x1, y1, z1) in the layer's voxel coordinates of that
    scale (voxel_offset included), clipped to the volume.

    Raises
    ------
    SpecError
        A bad scale or bounding box, or a source that is not an integer volume.
    NotFoundError
        Nothing at ``seg``.
    """
    from ..layers.dispatch import existing_source
    from .layout import _zarr_levels, is_precomputed

    storage, source = existing_source(seg)
    url = source.url
    if source.family == "precomputed" or (source.format is None and is_precomputed(url)):
        handle = open_scale(url, scale if isinstance(scale, str) else _scale_key(url, scale))
        sc = handle.scale
        src: Any = PrecomputedSource(url, sc.key)
        size, offset, res = sc.size, sc.voxel_offset, sc.resolution
        if handle.info.num_channels != 1:
            raise SpecError(f"{url}: a segmentation has one channel, not "
                            f"{handle.info.num_channels}")
        dtype = handle.dtype
    else:
        levels = _zarr_levels(url, axes)
        if not isinstance(scale, int) or not 0 <= scale < len(levels):
            raise SpecError(f"{url}: scale must be an index below {len(levels)}, got "
                            f"{scale!r}")
        level, handle = levels[scale], None
        src = ZarrSource(level.url, tuple(sorted(level.roles.items())))
        from .sources import open_zarr

        meta = open_zarr(level.url).meta
        size = tuple(meta.shape[level.roles[a]] for a in "xyz")
        offset, res, dtype = level.offset, level.resolution, np.dtype(meta.dtype)
        if "c" in level.roles and meta.shape[level.roles["c"]] != 1:
            raise SpecError(f"{url}: a segmentation has one channel")
    if dtype.kind not in "ui":
        raise SpecError(f"{url}: labels must be integers, not {dtype}")
    lo, hi = np.zeros(3, np.int64), np.asarray(size, np.int64)
    if bbox is not None:
        box = np.asarray(bbox, np.int64).reshape(-1)
        if box.size != 6:
            raise SpecError(f"bbox must be six integers x0,y0,z0,x1,y1,z1, got {bbox!r}")
        lo = np.clip(box[:3] - offset, 0, hi)
        hi = np.clip(box[3:] - offset, 0, hi)
        if not (hi > lo).all():
            raise SpecError(f"bbox {list(box)} holds no voxel of {url} (its voxels are "
                            f"{list(offset)} to {list(np.add(offset, size))})")
    region = Region(src, xyz(lo.tolist()), xyz(hi.tolist()), xyz(map(int, offset)),
                    xyz(map(float, res)), url)
    return region, handle


def _scale_key(url: str, scale: int) -> str:
    from ..volume.handle import read_volume_info

    return read_volume_info(open_storage(url)).scale(scale).key
