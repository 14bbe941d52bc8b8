"""The Neuroglancer layers under a served root, found by their ``info`` files: volumes (image
or segmentation by the info's ``type``), skeleton, mesh and annotation layers, segment
properties, and bare sharded stores (which no viewer opens, but which are worth naming); and
zarr arrays and OME-Zarr multiscale groups (v3 ``zarr.json`` or v2 ``.zarray``/``.zattrs``),
which Neuroglancer reads itself, shards and all, through the server's byte ranges.

The search is bounded: it stops descending at a layer (a volume's scale folders can hold
millions of chunk files), goes at most :data:`LAYER_SEARCH_DEPTH` folders down and looks
into at most :data:`MAX_FOLDERS` folders, so serving a bucket starts at once.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from ..errors import SpecError
from ..jsondoc import parse_json
from ..kinds import (
    ANNOTATIONS,
    IMAGE,
    LEGACY_MESHES,
    MESHES,
    PROPERTIES,
    SEGMENTATION,
    SKELETONS,
    STORE,
    VOLUME,
    VOLUME_TYPES,
    is_segmentation,
    kind_of,
    parse_info,
)
from ..limits import LAYER_SEARCH_DEPTH, MAX_FOLDERS, MAX_INFO_BYTES
from .files import File, Files

#: What each layer kind is served as (volumes: image or segmentation, by their type).
_SERVED = {SKELETONS: "skeletons", MESHES: "mesh", LEGACY_MESHES: "mesh",
           ANNOTATIONS: "annotations", PROPERTIES: "segment_properties", STORE: "sharded"}


class Layer(NamedTuple):
    """A layer found under the root: ``path`` relative to it ("" for the root itself),
    ``kind`` (image, segmentation, skeletons, mesh, annotations, segment_properties or
    sharded), its ``info`` (for zarr, the array's or group's metadata), for a volume the
    folders of the skeletons, mesh and segment properties its info attaches (relative to the
    root), and its ``format``: precomputed or zarr."""

    path: str
    kind: str
    info: dict
    attached: dict[str, str]
    format: str = "precomputed"

    def source(self, base_url: str) -> str | None:
        """The Neuroglancer data source, None for what Neuroglancer cannot open."""
        if self.kind == _SERVED[STORE]:
            return None
        url = f"{base_url.rstrip('/')}/{self.path}" if self.path else base_url.rstrip("/")
        return f"{self.format}://{url}"


def read_small(files: Files, name: str, limit: int = MAX_INFO_BYTES
               ) -> bytes | None:
    """A whole file of at most ``limit`` bytes, None if absent, not a file, or larger."""
    found = files.open(name)
    if not isinstance(found, File):
        return None
    try:
        return None if found.size > limit else found.read(0, found.size)
    finally:
        found.close()


def classify(info: dict) -> str | None:
    """What a layer an info describes is served as, None if it is no layer."""
    kind = kind_of(info)
    if kind == VOLUME:
        if not isinstance(info.get("scales"), list):
            return None
        return SEGMENTATION if is_segmentation(info) else IMAGE
    if kind is None or (kind == STORE and not isinstance(info.get("sharding"), dict)):
        return None
    return _SERVED.get(kind)


# Label images: integers that Neuroglancer should colour by segment rather than by intensity.
_LABEL_DTYPES = {"uint32", "uint64", "int64", "<u4", "<u8", "<i8", "|u4", "|u8"}


def _json_object(files: Files, name: str) -> dict | None:
    """The JSON object in the small file ``name``, None if absent or not one."""
    raw = read_small(files, name)
    try:
        found = parse_json(raw, name) if raw is not None else None
    except SpecError:
        return None
    return found if isinstance(found, dict) else None


def _zarr_layer(files: Files, path: str) -> Layer | None:
    """The zarr array or OME-Zarr multiscale group at ``path``, None if there is none (a
    plain group is searched further, like a folder)."""
    def meta(name: str) -> dict | None:
        return _json_object(files, f"{path}/{name}" if path else name)

    v3 = meta("zarr.json")
    if v3 is not None:
        attrs = v3.get("attributes") or {}
        ome: dict = attrs["ome"] if isinstance(attrs.get("ome"), dict) else attrs
        if v3.get("node_type") == "array" or (v3.get("node_type") == "group" and
                                              ome.get("multiscales")):
            return _zarr_kind(files, path, v3, ome, "zarr.json")
        return None
    v2 = meta(".zarray")
    if v2 is not None:
        return _zarr_kind(files, path, v2, {}, ".zarray")
    attrs = meta(".zattrs") or {}
    return _zarr_kind(files, path, {}, attrs, ".zarray") if attrs.get("multiscales") else None


def _zarr_kind(files: Files, path: str, metadata: dict, ome: dict,
               array_file: str) -> Layer:
    """A segmentation layer for OME label images (``image-label`` in their metadata) and
    label-like integer types (of the first level of a multiscale group), an image layer
    otherwise."""
    dtype = metadata.get("data_type", metadata.get("dtype"))
    multiscales = ome.get("multiscales")
    if multiscales and isinstance(multiscales, list) and isinstance(multiscales[0], dict):
        first = (multiscales[0].get("datasets") or [{}])[0].get("path")
        if isinstance(first, str):
            level = _json_object(files, f"{path}/{first}/{array_file}" if path else
                                 f"{first}/{array_file}") or {}
            dtype = level.get("data_type", level.get("dtype"))
    kind = SEGMENTATION if "image-label" in ome or dtype in _LABEL_DTYPES else IMAGE
    return Layer(path, kind, metadata, {}, "zarr")


def _attached(path: str, info: dict) -> dict[str, str]:
    """The sub-layers a volume's info points at, relative to the root: relative paths
    (``../meshes`` too, as Neuroglancer resolves them) that stay inside it."""
    found = {}
    for key in ("skeletons", "mesh", "segment_properties"):
        value = info.get(key)
        if not isinstance(value, str) or not value or "://" in value or \
                value.startswith("/"):
            continue
        parts = path.split("/") if path else []
        for part in value.strip("/").split("/"):
            if part == "..":
                if not parts:
                    break  # outside the root
                parts.pop()
            elif part not in ("", "."):
                parts.append(part)
        else:
            found[key] = "/".join(parts)
    return found


def find_layers(files: Files) -> list[Layer]:
    """The layers under the root, breadth first (see the module docstring).

    Parameters
    ----------
    files
        The served files.

    Returns
    -------
    list of Layer
        In the order found; sub-layers that a volume's info attaches (skeletons, mesh,
        segment properties) are not listed on their own. Folders whose info is not valid
        JSON, or describes no layer, are searched further like folders without one.
    """
    layers: list[Layer] = []
    todo: deque[tuple[str, int]] = deque([("", 0)])
    visited = 0
    while todo and visited < MAX_FOLDERS:
        path, depth = todo.popleft()
        visited += 1
        raw = read_small(files, f"{path}/info" if path else "info")
        kind, info = None, None
        if raw is not None:
            try:
                info = parse_info(raw, path or "info")
                kind = classify(info)
            except SpecError:
                kind = None
        if kind is not None and info is not None:
            layers.append(Layer(path, kind, info, _attached(path, info) if kind in
                                VOLUME_TYPES else {}))
            continue
        found = _zarr_layer(files, path)
        if found is not None:
            layers.append(found)
            continue
        if depth < LAYER_SEARCH_DEPTH:
            for name, is_dir in files.listdir(path) or []:
                if is_dir:
                    todo.append((f"{path}/{name}" if path else name, depth + 1))
    attached = {p for layer in layers for p in layer.attached.values()}
    return [layer for layer in layers if layer.path not in attached]
