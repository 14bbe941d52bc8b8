"""Where each served layer lies in one physical space, so that layers of different sources
overlay in the viewer: the names of its dimensions (x, y, z; channels ``c^``, time ``t``),
its voxel size in nanometres, its bounds, whether its units came from the data, and the
source transform Neuroglancer needs to put it there.

Precomputed volumes and annotations carry their units (Neuroglancer reads them itself). Zarr
arrays have none: each of their axes is named x, y, z (or c, t) from ``dimension_names``
(``_ARRAY_DIMENSIONS`` in v2) or, without names, the last three are z, y, x, and the voxel
size is the one given (``ngshard view --resolution``) or 1 nm. OME-Zarr groups carry axis
names and units; a group without units is treated as a bare array.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, NamedTuple

import numpy as np

from ..errors import NgShardError
from ..kinds import VOLUME_TYPES
from ..storage import Storage
from ..zarr.handle import read_metadata
from ..zarr.ome import Multiscales, axis_roles, read_group, to_nm
from .layers import Layer

#: Neuroglancer's dimension name per axis role (``^``: a channel dimension).
_NAMES = {"x": "x", "y": "y", "z": "z", "c": "c^", "t": "t"}
#: Metres per unit of annotation dimensions (Neuroglancer's unit prefixes).
_METRES = {"m": 1.0, "mm": 1e-3, "um": 1e-6, "µm": 1e-6, "nm": 1e-9, "pm": 1e-12}


class Placement(NamedTuple):
    """A layer's place: ``resolution`` (x, y, z nm per voxel), ``lower``/``upper`` (x, y, z
    bounds in nm), ``known`` (units from the data, not assumed) and ``transform`` (the
    Neuroglancer source transform that names and scales its dimensions, None if it needs
    none)."""

    resolution: tuple[float, float, float]
    lower: tuple[float, float, float]
    upper: tuple[float, float, float]
    known: bool
    transform: dict | None = None


def place(layer: Layer, storage: Storage | None, resolution: tuple[float, ...] | None = None
          ) -> Placement | None:
    """The layer's :class:`Placement`, None where it has no extent of its own (skeletons and
    meshes alone) or its metadata cannot say (the viewer shows it as Neuroglancer does).

    Parameters
    ----------
    layer
        A layer that :func:`~ngshard.server.layers.find_layers` found.
    storage
        The served root (zarr metadata is read from it); None places precomputed layers only.
    resolution
        x, y, z nm per voxel for layers whose metadata has no units (zarr).
    """
    with contextlib.suppress(NgShardError, OSError, ValueError, KeyError, TypeError,
                             IndexError):
        if layer.format == "precomputed":
            if layer.kind in VOLUME_TYPES:
                return _precomputed(layer.info["scales"][0])
            if layer.kind == "annotations":
                return _annotations(layer.info)
            return None
        if storage is not None:
            sub = storage.child(layer.path) if layer.path else storage
            return _zarr(sub, resolution)
    return None


def _precomputed(scale: dict) -> Placement:
    res = np.asarray(scale["resolution"], float)
    lower = np.asarray(scale.get("voxel_offset", [0, 0, 0]), float) * res
    return Placement(tuple(res.tolist()), tuple(lower.tolist()),
                     tuple((lower + np.asarray(scale["size"], float) * res).tolist()), True)


def _annotations(info: dict) -> Placement | None:
    dims = info.get("dimensions") or {}
    if not all(a in dims for a in "xyz"):
        return None
    res = np.array([dims[a][0] * _METRES[dims[a][1]] * 1e9 for a in "xyz"])
    names = list(dims)
    lower = np.array([info["lower_bound"][names.index(a)] for a in "xyz"], float) * res
    upper = np.array([info["upper_bound"][names.index(a)] for a in "xyz"], float) * res
    return Placement(tuple(res.tolist()), tuple(lower.tolist()), tuple(upper.tolist()), True)


def _zarr(storage: Storage, resolution: tuple[float, ...] | None) -> Placement | None:
    ms = read_group(storage)
    if ms is None:
        meta = read_metadata(storage)
        names = meta.dimension_names
        if names is None and meta.zarr_format == 2:
            attrs = storage.read(".zattrs")
            names = json.loads(attrs).get("_ARRAY_DIMENSIONS") if attrs else None
        return _bare(meta.shape, names, resolution)
    return _ome(storage, ms, resolution)


def _given(resolution: tuple[float, ...] | None) -> np.ndarray:
    return np.asarray(resolution if resolution is not None else (1.0, 1.0, 1.0), float)


def _bare(shape: tuple[int, ...], names: Any, resolution: tuple[float, ...] | None
          ) -> Placement:
    """An array without units: axes by name (or position), the given voxel size."""
    roles = axis_roles(len(shape), names)
    res = _given(resolution)
    upper = np.array([shape[roles[a]] for a in "xyz"], float) * res
    return Placement(tuple(res.tolist()), (0.0, 0.0, 0.0), tuple(upper.tolist()), False,
                     _transform(roles, res))


def _ome(storage: Storage, ms: Multiscales, resolution: tuple[float, ...] | None
         ) -> Placement:
    roles = axis_roles(len(ms.axes), ms.axes)
    level = ms.levels[0]
    shape = read_metadata(storage.child(level.path)).shape
    known = all(ms.axes[roles[a]].unit for a in "xyz")
    if known:
        res = np.array([to_nm(level.scale[roles[a]], ms.axes[roles[a]].unit) for a in "xyz"])
        lower = np.array([to_nm(level.translation[roles[a]], ms.axes[roles[a]].unit)
                          for a in "xyz"])
    else:  # numbers without units: voxels of the given size
        res = _given(resolution)
        lower = np.array([level.translation[roles[a]] / (level.scale[roles[a]] or 1)
                          for a in "xyz"]) * res
    upper = lower + np.array([shape[roles[a]] for a in "xyz"], float) * res
    named = all(ms.axes[i].name == _NAMES[r] for r, i in roles.items() if r in "xyz")
    transform = None if known and named else _transform(roles, res)
    return Placement(tuple(res.tolist()), tuple(lower.tolist()), tuple(upper.tolist()), known,
                     transform)


def _transform(roles: dict[str, int], res: np.ndarray) -> dict:
    """A source transform naming each source dimension (in its order) after its role, the
    spatial ones ``res`` nm apart."""
    out: dict[str, list] = {}
    for i in range(len(roles)):
        role = next(r for r, j in roles.items() if j == i)
        out[_NAMES[role]] = [float(res["xyz".index(role)]) * 1e-9, "m"] if role in "xyz" \
            else [1, ""]
    return {"inputDimensions": out, "outputDimensions": out}


def unplaced_notice(names: list[str], resolution: tuple[float, ...] | None) -> str:
    """The one line saying which layers are shown at an assumed voxel size."""
    res = ",".join(f"{r:g}" for r in _given(resolution))
    return (f"no units in the metadata of {', '.join(names)}: shown at {res} nm per voxel "
            f"(x,y,z){'' if resolution else '; give --resolution X,Y,Z (nm) to set it'}")

