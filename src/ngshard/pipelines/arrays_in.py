"""HDF5 datasets and N5 datasets in: sources of a conversion to precomputed that read a box
of voxels as (x, y, z, channel), as a TIFF stack's does (:mod:`.tiff`), so that each task
reads only its box (HDF5 through h5py's chunked reads, N5 block by block) and no process
holds the dataset.

An HDF5 source is ``FILE.h5`` (its one dataset) or ``FILE.h5/path/in/file``; its axes are
z, y, x (3-D) or c, z, y, x (4-D) unless ``axes`` says otherwise (the C order of NumPy,
h5py and most HDF5 writers). An N5 source is a dataset's folder (holding an
``attributes.json`` with ``dimensions``): its dimensions list x first, as precomputed does;
a fourth is channels.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NotFoundError, SpecError, optional_module
from ..jsondoc import parse_json
from ..limits import DEFAULT_TASK_BYTES
from ..n5codec import N5Dataset, decode_block
from ..storage import open_storage

_H5 = (".h5", ".hdf5", ".hdf")


def _h5py():
    return optional_module("h5py", "HDF5 sources need", "hdf5")


def hdf5_parts(src: str | os.PathLike) -> tuple[str, str] | None:
    """(file, dataset path inside it, "" for its one dataset) where ``src`` names an HDF5
    file (local), else None."""
    text = os.fspath(src).removeprefix("file://")
    if "://" in text:
        return None
    parts = text.split("/")
    for i in range(len(parts), 0, -1):
        head = "/".join(parts[:i])
        if head.lower().endswith(_H5) and os.path.isfile(head):
            return head, "/".join(parts[i:])
    return None


def is_n5(src: str | os.PathLike) -> bool:
    """Whether ``src`` is a local N5 dataset's folder."""
    text = os.fspath(src).removeprefix("file://")
    path = os.path.join(text, "attributes.json")
    if "://" in text or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        doc = parse_json(f.read(), path)
    return isinstance(doc, dict) and "dimensions" in doc


@functools.lru_cache(maxsize=4)
def _h5file(path: str) -> Any:
    return _h5py().File(path, "r")


@dataclass(frozen=True)
class Hdf5Source:
    """A dataset of an HDF5 file, read a box at a time; ``axes``: its dimensions' letters."""

    path: str
    dataset: str
    axes: str

    def read(self, lo, hi) -> np.ndarray:
        """The voxels [lo, hi) as (x, y, z, channel)."""
        box = {a: slice(int(lo[i]), int(hi[i])) for i, a in enumerate("xyz")}
        index = tuple(box.get(a, slice(None)) for a in self.axes)
        data = np.asarray(_h5file(self.path)[self.dataset][index])
        order = [self.axes.index(a) for a in "xyz"] + \
            ([self.axes.index("c")] if "c" in self.axes else [])
        data = data.transpose(order)
        return data if "c" in self.axes else data[..., None]


def open_hdf5(src: str | os.PathLike, axes: str | None
              ) -> tuple[Hdf5Source, tuple[int, int, int], int, np.dtype, Any]:
    """An HDF5 dataset's source, size (x, y, z), channels, dtype and resolution (its
    ``resolution`` attribute, in the order of its axes, reordered to x, y, z) or None."""
    found = hdf5_parts(src)
    if found is None:
        raise NotFoundError(f"{os.fspath(src)}: no HDF5 file there")
    path, name = found
    f = _h5file(path)
    if not name:
        names: list[str] = []
        f.visititems(lambda n, o: names.append(n) if hasattr(o, "shape") else None)
        if len(names) != 1:
            raise SpecError(f"{path} holds {len(names)} datasets ({', '.join(names[:5])}): "
                            f"name one, as {path}/DATASET")
        name = names[0]
    if name not in f or not hasattr(f[name], "shape"):
        raise NotFoundError(f"{path}: no dataset {name!r} in it")
    dataset = f[name]
    axes = (axes or {3: "zyx", 4: "czyx"}.get(dataset.ndim, "")).lower()
    if len(axes) != dataset.ndim or sorted(axes) not in (sorted("xyz"), sorted("cxyz")):
        raise SpecError(f"{path}/{name}: shape {dataset.shape}: give its axes as x, y, z "
                        f"and maybe c (e.g. axes='zyx'), one letter per dimension")
    size = tuple(int(dataset.shape[axes.index(a)]) for a in "xyz")
    channels = int(dataset.shape[axes.index("c")]) if "c" in axes else 1
    resolution = None
    if "resolution" in dataset.attrs:
        r = np.asarray(dataset.attrs["resolution"], np.float64).reshape(-1)
        spatial = [a for a in axes if a != "c"]
        if len(r) == 3:
            resolution = tuple(float(r[spatial.index(a)]) for a in "xyz")
    return (Hdf5Source(path, name, axes), (size[0], size[1], size[2]), channels,
            np.dtype(dataset.dtype), resolution)


@dataclass(frozen=True)
class N5Source:
    """An N5 dataset (the folder ``path``), read a box at a time, block by block."""

    path: str
    attributes: dict

    def read(self, lo, hi) -> np.ndarray:
        """The voxels [lo, hi) as (x, y, z, channel); missing blocks are zeros."""
        meta = N5Dataset(self.attributes, self.path)
        nd = len(meta.shape)
        lo_n = np.r_[np.asarray(lo[:3], np.int64), 0][:nd]
        hi_n = np.r_[np.asarray(hi[:3], np.int64), meta.shape[-1]][:nd]
        block = np.asarray(meta.block, np.int64)
        first, last = lo_n // block, (hi_n - 1) // block
        grid = np.stack(np.meshgrid(*[np.arange(a, b + 1) for a, b in zip(first, last)],
                                    indexing="ij"), -1).reshape(-1, nd)
        names = ["/".join(map(str, g)) for g in grid.tolist()]
        out = np.zeros(tuple((hi_n - lo_n).tolist()), meta.dtype)
        storage = open_storage(self.path)
        for g, name, data in zip(grid, names, storage.read_many(names)):
            if data is None:
                continue  # N5 leaves blocks of nothing but the fill value out
            values = decode_block(data, meta, storage.path(name))
            start = g * block
            a = np.maximum(start, lo_n)
            b = np.minimum(start + values.shape, hi_n)
            if (b <= a).any():
                continue
            out[tuple(map(slice, a - lo_n, b - lo_n))] = \
                values[tuple(map(slice, a - start, b - start))]
        return out if nd == 4 else out[..., None]


def open_n5(src: str | os.PathLike
            ) -> tuple[N5Source, tuple[int, int, int], int, np.dtype, Any]:
    """An N5 dataset's source, size (x, y, z), channels, dtype and resolution (its
    ``resolution`` or ``pixelResolution`` attribute, x first) or None."""
    path = os.path.abspath(os.fspath(src).removeprefix("file://"))
    where = os.path.join(path, "attributes.json")
    with open(where, "rb") as f:
        doc = parse_json(f.read(), where)
    meta = N5Dataset(doc, where)
    if len(meta.shape) not in (3, 4):
        raise SpecError(f"{where}: {len(meta.shape)} dimensions: an N5 source needs x, y, z "
                        f"and maybe channels")
    resolution = doc.get("resolution")
    if isinstance(doc.get("pixelResolution"), dict):
        resolution = doc["pixelResolution"].get("dimensions")
    if not (isinstance(resolution, list) and len(resolution) >= 3 and
            all(isinstance(r, (int, float)) and r > 0 for r in resolution[:3])):
        resolution = None
    return (N5Source(path, doc), (meta.shape[0], meta.shape[1], meta.shape[2]),
            meta.shape[3] if len(meta.shape) == 4 else 1, meta.dtype,
            None if resolution is None else tuple(float(r) for r in resolution[:3]))


def to_precomputed_plan(src: str, dst: str, opened: tuple, identity: list, *,
                        chunk_size=None, encoding=None, sharding: Any = "auto",
                        resolution=None, downsample: bool | int = False,
                        task_bytes: int = DEFAULT_TASK_BYTES):
    """The plan of the conversion of a source read by boxes (a TIFF stack, an HDF5 or N5
    dataset: ``opened`` is what its ``open_*`` returns, ``identity`` what names it in the
    job) to a sharded precomputed layer with its pyramid (see :func:`ngshard.convert`)."""
    from ..volume.factors import pyramid_factors
    from ..volume.grid import ChunkGrid
    from ..volume.info import DATA_TYPES, Scale, VolumeInfo, chunk_nbytes
    from ..volume.layers import scale_key
    from ..volume.vectors import xyz
    from .downsample import plan_pyramid
    from .layout import _sharding
    from .plan import TaskList, precomputed_tasks
    from .runner import volume_plan

    source, size, channels, dtype, found = opened
    if dtype.name not in DATA_TYPES:
        raise SpecError(f"{src}: data type {dtype} has no precomputed equivalent "
                        f"({', '.join(DATA_TYPES)})")
    resolution = tuple(float(r) for r in (resolution or found or (1, 1, 1)))
    chunk = xyz(int(c) for c in chunk_size) if chunk_size else (64, 64, 64)
    labels = dtype.name in ("uint32", "uint64")
    encoding = encoding or ("compressed_segmentation" if labels else "raw")
    chunk_bytes = chunk_nbytes(chunk, channels, dtype)
    scale = Scale(key=scale_key(resolution), size=size, chunk_size=chunk,
                  resolution=resolution, encoding=encoding,
                  sharding=_sharding(sharding, size, chunk, chunk_bytes, encoding, task_bytes),
                  compressed_segmentation_block_size=(8, 8, 8)
                  if encoding == "compressed_segmentation" else None)
    layer_type = "segmentation" if labels or encoding == "compressed_segmentation" \
        else "image"
    info = VolumeInfo(layer_type, dtype.name, channels, (scale,))
    stages: list[list[TaskList]] = [[precomputed_tasks(
        dst, scale.key, ChunkGrid(size, chunk), scale.sharding, source, chunk_bytes,
        task_bytes)]]
    steps = None if downsample is True else int(downsample)
    factors = pyramid_factors(size, resolution, chunk, steps) if downsample else []
    if factors:
        pyramid, levels = plan_pyramid(dst, info, scale, factors, sparse=False,
                                       method="mode" if layer_type == "segmentation"
                                       else "mean", sharded=scale.sharding is not None,
                                       task_bytes=task_bytes, write_info=False)
        stages += pyramid.stages
        for level in levels:
            info = info.with_scale(level)
    job = {"from": src, "to": dst, "files": identity, "info": info.to_json()}
    return volume_plan(dst, info, stages, job, [(dst, None)])
