"""OME-Zarr multiscales metadata (NGFF 0.4 and 0.5): which array axis is x, y, z, the channels
(or time), the voxel size in nanometres and each level's offset, so a conversion to
precomputed knows what it is converting.

Parsing is pure (:func:`parse_multiscales`, :func:`axis_roles`, :func:`to_nm`);
:func:`read_group` reads a group's metadata from storage and opens its levels. Where the
metadata is silent (a bare array), the last three axes are z, y, x and a fourth from the end
holds the channels; an ``axes`` string ("zyx", "czyx", "xyzc", "tczyx") overrides either.
:func:`multiscales_05` writes the metadata of a precomputed layer as an OME-Zarr 0.5 group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import NotFoundError, SpecError
from ..jsondoc import Doc, parse_json
from ..storage import Location, StorageOptions, open_storage
from ..storage.names import check_name

#: Nanometres per unit, for the UDUNITS-2 length units the NGFF spec allows.
_NM_PER_UNIT = {
    "angstrom": 0.1, "attometer": 1e-9, "centimeter": 1e7, "decimeter": 1e8,
    "exameter": 1e27, "femtometer": 1e-6, "foot": 3.048e8, "gigameter": 1e18,
    "hectometer": 1e11, "inch": 2.54e7, "kilometer": 1e12, "megameter": 1e15, "meter": 1e9,
    "micrometer": 1e3, "mile": 1.609344e12, "millimeter": 1e6, "nanometer": 1.0,
    "parsec": 3.0856775814913673e25, "petameter": 1e24, "picometer": 1e-3,
    "terameter": 1e21, "yard": 9.144e8, "yoctometer": 1e-15, "yottameter": 1e33,
    "zeptometer": 1e-12, "zettameter": 1e30,
    # spellings seen in the wild
    "um": 1e3, "µm": 1e3, "micron": 1e3, "nm": 1.0, "mm": 1e6, "m": 1e9,
}
ROLES = "xyzct"
_ROLE_NAMES = {"x": "x", "y": "y", "z": "z", "c": "c", "ch": "c", "channel": "c",
               "channels": "c", "t": "t", "time": "t"}


@dataclass(frozen=True)
class Axis:
    name: str
    type: str | None = None  # "space", "channel", "time" or custom
    unit: str | None = None


@dataclass(frozen=True)
class Level:
    """One resolution level: its array's path in the group, and its transform (per axis, in
    the axes' units: the voxel size and the position of voxel 0)."""

    path: str
    scale: tuple[float, ...]
    translation: tuple[float, ...]


@dataclass(frozen=True)
class Multiscales:
    version: str
    axes: tuple[Axis, ...]
    levels: tuple[Level, ...]  # finest first, as the spec orders them
    name: str | None = None


def to_nm(value: float, unit: str | None, where: str = "") -> float:
    """A length in ``unit`` in nanometres; no unit: the value as it is (taken as nm)."""
    if unit is None or unit == "":
        return float(value)
    factor = _NM_PER_UNIT.get(unit.lower())
    if factor is None:
        raise SpecError(f"{where}: unknown length unit {unit!r} (known: "
                        f"{', '.join(sorted(_NM_PER_UNIT))})")
    return float(f"{float(value) * factor:.12g}")  # 0.008 um is 8 nm, not 8.000000000000002


def _transforms(items: Any, ndim: int, where: str) -> tuple[list[float], list[float]]:
    """The (scale, translation) of a coordinateTransformations list (identity where absent)."""
    scale, translation = [1.0] * ndim, [0.0] * ndim
    if items is None:
        return scale, translation
    if not isinstance(items, list):
        raise SpecError(f"{where}: coordinateTransformations must be a list")
    for t in items:
        kind = t.get("type") if isinstance(t, dict) else None
        if kind == "identity":
            continue
        if kind not in ("scale", "translation"):
            raise SpecError(f"{where}: unsupported coordinate transformation {t!r}")
        if "path" in t:
            raise SpecError(f"{where}: transformations stored in a file ({t['path']!r}) are "
                            f"not supported")
        values = t.get(kind)
        if not isinstance(values, list) or len(values) != ndim or \
                not all(isinstance(v, (int, float)) and not isinstance(v, bool) and
                        math.isfinite(v) for v in values):
            raise SpecError(f"{where}: {kind} must be {ndim} finite numbers, got {values!r}")
        if kind == "scale":
            scale = [a * b for a, b in zip(scale, values)]
        else:  # a translation applies after the scales before it
            translation = [a + b for a, b in zip(translation, values)]
    return scale, translation


def _axes(doc: Any, where: str) -> tuple[Axis, ...]:
    if not isinstance(doc, list) or not doc:
        raise SpecError(f"{where}: axes must be a non-empty list")
    axes = []
    for a in doc:
        if isinstance(a, str):  # 0.3: names only
            axes.append(Axis(a))
        elif isinstance(a, dict) and isinstance(a.get("name"), str):
            axes.append(Axis(a["name"], a.get("type"), a.get("unit")))
        else:
            raise SpecError(f"{where}: each axis must have a name, got {a!r}")
    if len({a.name for a in axes}) != len(axes):
        raise SpecError(f"{where}: axis names must be unique")
    return tuple(axes)


def parse_multiscales(attrs: dict, where: str = "attributes") -> Multiscales | None:
    """The first multiscale image described by a group's attributes (``ome.multiscales`` of
    0.5, ``multiscales`` of 0.4 and earlier), None if there is none. The dataset-level
    transformations are folded into each level's."""
    ome = attrs.get("ome") if isinstance(attrs, dict) else None
    if isinstance(ome, dict) and "multiscales" in ome:
        version, items = str(ome.get("version", "0.5")), ome["multiscales"]
    elif isinstance(attrs, dict) and "multiscales" in attrs:
        items, version = attrs["multiscales"], None
    else:
        return None
    if not isinstance(items, list) or not items or not isinstance(items[0], dict):
        raise SpecError(f"{where}: multiscales must be a non-empty list of objects")
    ms = items[0]
    version = version or str(ms.get("version", "0.4"))
    axes = _axes(ms.get("axes", ["t", "c", "z", "y", "x"]), f"{where}: multiscales[0]")
    n = len(axes)
    g_scale, g_trans = _transforms(ms.get("coordinateTransformations"), n,
                                   f"{where}: multiscales[0]")
    datasets = ms.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise SpecError(f"{where}: multiscales[0].datasets must be a non-empty list")
    levels = []
    for i, d in enumerate(datasets):
        here = f"{where}: multiscales[0].datasets[{i}]"
        if not isinstance(d, dict) or not isinstance(d.get("path"), str):
            raise SpecError(f"{here}: must have a path")
        path = check_name(d["path"], here, "dataset path", folder=True)
        scale, trans = _transforms(d.get("coordinateTransformations"), n, here)
        levels.append(Level(path, tuple(s * g for s, g in zip(scale, g_scale)),
                            tuple(t * g + h for t, g, h in zip(trans, g_scale, g_trans))))
    name = ms.get("name") if isinstance(ms.get("name"), str) else None
    return Multiscales(version, axes, tuple(levels), name)


def axis_roles(ndim: int, names: Any = None, override: str | None = None,
               where: str = "") -> dict[str, int]:
    """Which array axis is x, y, z, c (channels) and t (time): {role: axis}; x, y and z are
    always there. ``names``: the axes' names (OME axes or zarr dimension_names; an OME axis of
    type channel or time counts as c or t), ``override`` a string of one role letter per axis.
    Without either, the last three axes are z, y, x and a fourth from the end is c."""
    if override is not None:
        letters = override.lower()
        if len(letters) != ndim or set(letters) - set(ROLES) or \
                len(set(letters)) != ndim or not set("xyz") <= set(letters):
            raise SpecError(f"{where}: axes {override!r} must name each of the {ndim} axes "
                            f"once with x, y, z (and c for channels, t for time), e.g. "
                            f"{'czyx' if ndim == 4 else 'zyx' if ndim == 3 else 'tczyx'!r}")
        return {r: i for i, r in enumerate(letters)}
    if names is not None:
        found = [_role(a if isinstance(a, Axis) else Axis(str(a or ""))) for a in names]
        roles = {r: i for i, r in enumerate(found) if r is not None}
        if None not in found and len(roles) == ndim and set("xyz") <= set(roles):
            return roles
    if ndim == 3:
        return {"z": 0, "y": 1, "x": 2}
    if ndim == 4:
        return {"c": 0, "z": 1, "y": 2, "x": 3}
    raise SpecError(f"{where}: cannot tell which of the {ndim} axes are x, y, z "
                    f"(name them, or give axes=, e.g. 'tczyx')")


def _role(axis: Axis) -> str | None:
    if axis.type in ("channel", "time"):
        return axis.type[0]
    return _ROLE_NAMES.get(axis.name.lower())


def read_group(url: Location,
               storage_options: StorageOptions | None = None) -> Multiscales | None:
    """The multiscales metadata of the zarr group at ``url`` (v3 ``zarr.json`` or v2
    ``.zattrs``), None if ``url`` is an array.

    Raises
    ------
    NotFoundError
        Neither a zarr group nor a zarr array there.
    SpecError
        Metadata that is not valid JSON or not valid multiscales, or a group without
        multiscales (name one of its arrays instead).
    """
    storage = open_storage(url, storage_options=storage_options)
    raw = storage.read("zarr.json")
    if raw is not None:
        doc = _json(raw, storage.path("zarr.json"))
        if doc.get("node_type") == "array":
            return None
        attrs, where = doc.get("attributes", {}), storage.path("zarr.json")
    elif storage.read(".zarray") is not None:
        return None
    else:
        raw = storage.read(".zattrs")
        if raw is None and storage.read(".zgroup") is None:
            raise NotFoundError(f"{storage.url}: no zarr.json, .zarray or .zgroup: not a zarr "
                                f"array or group")
        attrs, where = (_json(raw, storage.path(".zattrs")) if raw else {}), \
            storage.path(".zattrs")
    found = parse_multiscales(attrs, where)
    if found is None:
        raise SpecError(f"{storage.url}: a zarr group without OME multiscales metadata: "
                        f"give one of its arrays")
    return found


def _json(raw: bytes, where: str) -> dict:
    return Doc(parse_json(raw, where), where).value


def multiscales_05(levels: Sequence[tuple[str, Sequence[float], Sequence[float]]],
                   channels: bool, name: str | None = None) -> dict:
    """The ``attributes`` of an OME-Zarr 0.5 group of (path, (x, y, z) resolution in nm,
    (x, y, z) offset in nm) levels whose arrays are (c,) z, y, x."""
    axes = ([{"name": "c", "type": "channel"}] if channels else []) + [
        {"name": a, "type": "space", "unit": "nanometer"} for a in "zyx"]
    lead = [1.0] if channels else []
    datasets = [{"path": path, "coordinateTransformations": [
        {"type": "scale", "scale": lead + [float(r) for r in res[::-1]]},
        {"type": "translation", "translation": [0.0] * len(lead) + [float(o) for o in
                                                                   off[::-1]]}]}
        for path, res, off in levels]
    ms: dict = {"axes": axes, "datasets": datasets}
    if name:
        ms["name"] = name
    return {"ome": {"version": "0.5", "multiscales": [ms]}}
