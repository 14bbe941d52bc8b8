"""``ngshard info`` of a zarr array or OME-Zarr group: what it holds and how it is stored,
so the URL one would convert or serve can be checked first."""

from __future__ import annotations

import argparse
import json

from ..storage import Storage

_METADATA = ("zarr.json", ".zarray", ".zattrs", ".zgroup")


def is_zarr(storage: Storage) -> bool:
    """Whether zarr metadata (v3, or v2) lies at the root of ``storage``."""
    return any(storage.stat(name) is not None for name in _METADATA)


def _array_doc(storage: Storage) -> dict:
    """What the metadata of the array at ``storage`` says (its handle: nothing else read)."""
    from ..zarr import ArrayHandle

    meta = ArrayHandle.open(storage).meta
    fill = meta.fill_value.item() if hasattr(meta.fill_value, "item") else meta.fill_value
    return {"zarr_format": meta.zarr_format, "dtype": str(meta.dtype), "shape": meta.shape,
            "dimension_names": meta.dimension_names, "chunks": meta.chunks,
            "shards": meta.chunk_shape if meta.sharding else None,
            "codecs": [c["name"] for c in meta.chunk_codecs.to_json()],
            "fill_value": fill if isinstance(fill, (int, float, bool)) else str(fill)}


def _array_rows(doc: dict) -> list[tuple[str, str]]:
    rows = [("array", f"zarr v{doc['zarr_format']}, {doc['dtype']}, shape {doc['shape']}")]
    if doc["dimension_names"]:
        rows.append(("dimensions", ", ".join(str(n) for n in doc["dimension_names"])))
    rows += [("chunks", f"{doc['chunks']}" + (f" in shards of {doc['shards']}"
                                                if doc["shards"] else " (unsharded)")),
             ("codecs", " -> ".join(doc["codecs"]) or "none"),
             ("fill value", str(doc["fill_value"]))]
    return rows


def cmd_info_zarr(args: argparse.Namespace, storage: Storage) -> None:
    """Describe the zarr array, or every level of the OME-Zarr group, at ``storage``."""
    from ..zarr.ome import read_group

    group = read_group(storage)
    if group is None:
        doc = _array_doc(storage)
        if args.json:
            print(json.dumps({"url": storage.url, **doc}, indent=1))
            return
        print(f"{'zarr':<13}{storage.url}")
        for name, value in _array_rows(doc):
            print(f"{name:<13}{value}")
        return
    axes = ", ".join(f"{a.name} ({a.type or '?'}{', ' + a.unit if a.unit else ''})"
                     for a in group.axes)
    levels = [(level, _array_doc(storage.child(level.path)))
              for level in group.levels]
    if args.json:
        print(json.dumps({"url": storage.url, "ome": group.version, "axes": axes, "levels": [
            {"path": lv.path, "scale": lv.scale, "translation": lv.translation, **doc}
            for lv, doc in levels]}, indent=1))
        return
    print(f"{'ome-zarr':<13}{storage.url} (version {group.version}"
          f"{', ' + group.name if group.name else ''})")
    print(f"{'axes':<13}{axes}")
    for level, doc in levels:
        print(f"level {level.path:<7}scale {level.scale}, translation {level.translation}")
        for name, value in _array_rows(doc):
            print(f"  {name:<11}{value}")
