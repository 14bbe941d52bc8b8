"""``info`` and ``get`` for typed layers: skeletons, meshes, annotations, segment properties.
A layer is described by its kind and its members, then by its store (sharded or a file per
id); ``get --as`` decodes one segment as JSON, SWC, OBJ or PLY."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import NgShardError
from ..kinds import (
    LAYER_TYPES,
    MESHES,
    PROPERTIES,
    SKELETONS,
    kind_of,
    layer_kind,
    unindexed_entries,
)
from ..sharded.infofile import read_info
from ..storage import Storage
from .targets import emit, url_storage

FORMATS = {"json": ("skeleton", "mesh", "annotation", "properties"), "swc": ("skeleton",),
           "obj": ("mesh",), "ply": ("mesh",)}


def typed_layer(args: argparse.Namespace) -> tuple[Storage, dict | None, str] | None:
    """(storage, info, kind) when the URL is a typed layer (not a volume or a bare store) and
    no --spec overrides its info; None otherwise."""
    if getattr(args, "spec", None) is not None:
        return None
    storage = url_storage(args)
    storage.require_folder(missing_ok=True)  # a missing one is for the volume reader to name
    doc = read_info(storage)
    if doc is not None and kind_of(doc) not in LAYER_TYPES:
        return None
    try:
        kind = layer_kind(doc, storage)
    except NgShardError:
        return None
    return storage, doc, kind


def _open(storage: Storage) -> Any:
    from ..layers import open_layer

    return open_layer(storage)


def _store_of(layer: Any) -> Any:
    store = getattr(layer, "store", None)
    return getattr(store, "kv", None)


def _rows(layer: Any, kind: str) -> list[tuple[str, str]]:
    info = layer.info
    rows = [("layer", f"{kind} at {layer.storage.url}")]
    if kind == PROPERTIES:
        rows.append(("segments", str(len(layer.ids))))
        rows += [("property", f"{p['id']} ({p['type']}"
                  f"{', ' + p['data_type'] if 'data_type' in p else ''})")
                 for p in layer.properties]
        return rows
    if kind == SKELETONS:
        attrs = ", ".join(f"{a.id} ({a.data_type} x{a.num_components})"
                          for a in layer.vertex_attributes)
        rows.append(("attributes", attrs or "none"))
    elif kind == MESHES:
        rows.append(("quantization", f"{info.get('vertex_quantization_bits')} bits, "
                                     f"lod_scale_multiplier "
                                     f"{info.get('lod_scale_multiplier', 1)}"))
    if hasattr(layer, "describe"):
        rows += layer.describe()
    if "transform" in info:
        rows.append(("transform", " ".join(f"{x:g}" for x in info["transform"])))
    if "segment_properties" in info:
        rows.append(("properties", str(info["segment_properties"])))
    if hasattr(layer, "keys_array") and _store_of(layer) is None:
        rows.append(("segments", f"{len(layer.keys_array())} (a file per segment)"
                     if layer.storage.supports_listing else "not counted: the server gives "
                     "no directory listings (every segment still reads)"))
    return rows


def cmd_info_layer(args: argparse.Namespace, storage: Storage, kind: str) -> None:
    """Describe a typed layer, then its sharded store(s) as ``info`` does for stores."""
    from .store import _summary, describe_store

    layer = _open(storage)
    kv = _store_of(layer)
    rows = _rows(layer, kind)
    if args.json:
        doc = _summary(kv) if kv is not None else {"url": storage.url}
        doc["layer"] = {"kind": kind, "info": layer.info,
                        "rows": {name: text for name, text in rows}}
        print(json.dumps(doc, indent=1))
        return
    for name, text in rows:
        print(f"{name:<13}{text}")
    if kv is not None:
        describe_store(kv, unindexed=unindexed_entries(layer.info))


def cmd_get_layer(args: argparse.Namespace, storage: Storage, kind: str, key: int) -> None:
    """Write one segment of a typed layer: decoded (``--as``) or its stored bytes."""
    from .store import KeyNotFound

    layer = _open(storage)
    what = {SKELETONS: "skeleton", PROPERTIES: "properties"}.get(
        kind, "annotation" if "annotations" in kind else "mesh")
    fmt = "json" if kind == PROPERTIES and args.as_ is None else args.as_
    if fmt is None:
        value = layer.store.get(key) if hasattr(layer, "store") else None
        if value is None:
            raise KeyNotFound(f"key {key} is not in {storage.url}")
        emit(args, bytes(value))
        return
    if what not in FORMATS[fmt]:
        raise NgShardError(f"--as {fmt} is not for a {what} layer (it takes "
                           f"{', '.join(f for f, kinds in FORMATS.items() if what in kinds)})")
    obj = layer.get(key, lod=args.lod) if what == "mesh" else layer.get(key)
    if obj is None:
        raise KeyNotFound(f"segment {key} is not in {storage.url}")
    from ..layers import export

    if fmt == "swc":
        emit(args, export.skeleton_swc(obj).encode())
    elif fmt == "obj":
        emit(args, export.mesh_obj(obj.vertices, obj.faces, f"segment {key}").encode())
    elif fmt == "ply":
        emit(args, export.mesh_ply(obj.vertices, obj.faces, f"segment {key}"))
    else:
        doc = obj if isinstance(obj, dict) else vars(obj)
        doc = {"id": key, **{k: v for k, v in doc.items() if k != "id"}}
        emit(args, (json.dumps(export.to_jsonable(doc)) + "\n").encode())
