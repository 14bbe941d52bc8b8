"""The format surfaces of ``tools/fuzz_surfaces.py``: per surface, a small honest dataset made
by ngshard's writers (its layout chosen by the group's generator), how one case damages one of
its files, and every read of it, by ngshard and by the peers that read that surface
(tensorstore and zarr-python for zarr arrays and precomputed volumes).

A read returns a dict of named results; each result is a value (numpy array, bytes, a number)
or raises. The driver compares ngshard's results with the peers' where both give values.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fuzz_cloudvolume import canonical_annotations, canonical_skeleton, triangles  # noqa: E402
from fuzz_mutate import mutate_bytes, pick  # noqa: E402

import ngshard  # noqa: E402
import ngshard.zarr  # noqa: E402

#: The directory beside every dataset that no read may open (an escape if one does).
OUTSIDE = "outside"
#: Names from data that point outside the dataset, planted by the JSON mutations.
ESCAPES = ["../outside/secret", "../../outside/secret", "/etc/hostname", "a/../../outside/s",
           "..", ".", "", "C:x", "..\\outside", "file:///etc/hostname", "x" * 5000]
#: Hostile JSON values.
VALUES = [None, True, False, -1, 0, 1, 3, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1,
          2**63, 2**64, -2**63 - 1, 10**30, 1e300, -1e300, 0.5, "x", "", "NaN", "Infinity",
          "-Infinity", [], {}, [1, 2], [0, 0, 0], [2**64, 1, 1], [-1, -1, -1], {"a": 1},
          "raw", "gzip", "sharded", "uint64", "float32", "little", "big"]


def json_mutation(rng, doc) -> tuple[object, str]:
    """A structural mutation of parsed JSON: a member replaced, removed, duplicated or
    added, a list cut or grown, or a name from data pointed outside."""
    paths, todo = [], [((), doc)]
    while todo:
        path, node = todo.pop()
        paths.append(path)
        items = node.items() if isinstance(node, dict) else \
            enumerate(node) if isinstance(node, list) else ()
        todo += [((*path, k), v) for k, v in items]
    path = paths[int(rng.integers(len(paths)))]
    kind = pick(rng, ["value", "value", "value", "escape", "remove", "add", "list", "deep",
                      "type", "big list"])

    def at(p):
        node = doc
        for k in p:
            node = node[k]
        return node

    if not path:
        return (pick(rng, VALUES) if kind != "deep" else _deep(rng, 3000)), "top " + kind
    parent, key = at(path[:-1]), path[-1]
    old = parent[key]
    if kind == "value":
        parent[key] = pick(rng, VALUES)
    elif kind == "escape":
        parent[key] = pick(rng, ESCAPES) if not isinstance(old, list) else \
            [pick(rng, ESCAPES)] + old[1:]
    elif kind == "remove" and isinstance(parent, dict):
        del parent[key]
    elif kind == "remove":
        parent.pop(key)
    elif kind == "add" and isinstance(parent, dict):
        parent[f"x{int(rng.integers(9))}"] = pick(rng, VALUES)
    elif kind == "list" and isinstance(old, list) and old:
        parent[key] = old[:-1] if rng.random() < 0.5 else old + old[-1:]
    elif kind == "deep":
        parent[key] = _deep(rng, int(pick(rng, [50, 101, 1500, 100_000])))
    elif kind == "type":
        parent[key] = str(old) if not isinstance(old, str) else [old]
    elif kind == "big list":
        parent[key] = [pick(rng, VALUES)] * int(pick(rng, [33, 1000, 100_000]))
    else:
        parent[key] = pick(rng, VALUES)
    return doc, kind


def _deep(rng, depth: int):
    return {"deep": depth}  # replaced by the text of ``depth`` nested lists in dump()


def dump(doc) -> bytes:
    """JSON text, with every {"deep": n} written as n nested lists (json.dumps would
    recurse)."""
    text = json.dumps(doc)
    for n in (50, 101, 1500, 3000, 100_000):
        text = text.replace(f'{{"deep": {n}}}', "[" * n + "]" * n)
    return text.encode()


def mutate_file(rng, name: str, data: bytes) -> tuple[bytes | None, str]:
    """A case's damage to one file: JSON-aware for JSON files (most of the time), bytes
    otherwise; binary files also get integer fields set to edge values."""
    if data[:1] in (b"{", b"[") and rng.random() < 0.8:
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if doc is not None:
            doc, kind = json_mutation(rng, doc)
            return dump(doc), "json " + kind
    draco = [m.start() for m in re.finditer(b"DRACO", data)][:64]
    if draco and rng.random() < 0.4:  # the method or a count of a Draco header: it decodes
        b = bytearray(data)           # to other counts, or to no points at all
        at = pick(rng, draco) + (8 if rng.random() < 0.25 else int(rng.integers(9, 40)))
        if at < len(b):
            b[at] = int(rng.integers(0, 9)) if rng.random() < 0.8 else int(rng.integers(256))
            return bytes(b), "draco count"
    if len(data) >= 8 and rng.random() < 0.4:
        b = bytearray(data)
        width = pick(rng, [4, 8])
        at = int(rng.integers(0, (len(b) - width) // width + 1)) * width
        value = pick(rng, [0, 1, 2**31, 2**32 - 1, len(b), 16 * len(b), 2**63, 2**64 - 1,
                           int(rng.integers(2**32))]) % (1 << 8 * width)
        b[at:at + width] = value.to_bytes(width, "little")
        return bytes(b), f"u{8 * width} field"
    data, kind = mutate_bytes(rng, data)
    return data, "bytes " + kind


# --- datasets --------------------------------------------------------------------------------

def _segments(rng, n: int) -> list[int]:
    ids = {int(x) for x in rng.integers(1, 2**20, n)}
    if rng.random() < 0.3:
        ids.add(2**64 - 1 - int(rng.integers(100)))
    return sorted(ids)


def _sharding(rng, encodings=("raw", "gzip")):
    return pick(rng, [None, "auto", {"@type": "neuroglancer_uint64_sharded_v1",
                                     "preshift_bits": 0, "hash": "murmurhash3_x86_128",
                                     "minishard_bits": 1, "shard_bits": 1,
                                     "minishard_index_encoding": "gzip",
                                     "data_encoding": pick(rng, encodings)}])


def make_zarr3(rng, root: Path) -> None:
    shape = tuple(int(x) for x in rng.integers(3, 13, int(rng.integers(1, 4))))
    chunks = tuple(int(x) for x in rng.integers(1, 5, len(shape)))
    dtype = pick(rng, ["uint8", "int16", "uint32", "float32", "uint64", "float64"])
    shards = tuple(c * int(rng.integers(1, 3)) for c in chunks) if rng.random() < 0.5 else None
    comp = pick(rng, [[], [{"name": "gzip", "configuration": {"level": 5}}],
                      [{"name": "zstd", "configuration": {"level": 3, "checksum": False}}],
                      [{"name": "crc32c"}]])
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, *comp]
    a = ngshard.zarr.create_array(root, shape=shape, dtype=dtype, chunks=chunks, shards=shards,
                                  codecs=codecs, fill_value=int(rng.integers(0, 3)))
    a[...] = rng.integers(0, 100, shape).astype(dtype)


def make_zarr2(rng, root: Path) -> None:
    import zarr

    shape = tuple(int(x) for x in rng.integers(3, 13, int(rng.integers(1, 4))))
    chunks = tuple(int(x) for x in rng.integers(1, 5, len(shape)))
    dtype = pick(rng, ["|u1", "<i2", ">u4", "<f4", "<u8", "<f8"])
    import numcodecs

    comp = pick(rng, [None, numcodecs.GZip(), numcodecs.Zstd(), numcodecs.Zlib()])
    a = zarr.create_array(store=str(root), shape=shape, chunks=chunks, dtype=dtype,
                          zarr_format=2, compressors=comp, fill_value=int(rng.integers(0, 3)),
                          order=pick(rng, ["C", "F"]))
    a[...] = rng.integers(0, 100, shape).astype(dtype)


def make_skeletons(rng, root: Path) -> None:
    items = {}
    for k in _segments(rng, int(rng.integers(1, 6))):
        n = int(rng.integers(1, 9))
        edges = np.stack([np.arange(n - 1), np.arange(1, n)], 1) if n > 1 else np.zeros((0, 2))
        items[k] = (rng.uniform(0, 100, (n, 3)), edges, {"radius": rng.uniform(0, 5, n)})
    ngshard.write_skeletons(root, items, sharding=_sharding(rng), durable=False,
                            vertex_attributes=[{"id": "radius", "data_type": "float32",
                                                "num_components": 1}])


def _mesh(rng):
    v = rng.uniform(0, 50, (int(rng.integers(4, 12)), 3))
    f = rng.integers(0, len(v), (int(rng.integers(1, 9)), 3))
    return v, f


def make_meshes(rng, root: Path) -> None:
    items = {k: _mesh(rng) for k in _segments(rng, int(rng.integers(1, 4)))}
    ngshard.write_meshes(root, items, sharding=_sharding(rng, ("raw",)), durable=False)


def make_legacy_meshes(rng, root: Path) -> None:
    items = {k: _mesh(rng) for k in _segments(rng, int(rng.integers(1, 4)))}
    ngshard.write_legacy_meshes(root, items, sharding=pick(rng, [None, None, "auto"]),
                                durable=False)


def make_annotations(rng, root: Path) -> None:
    kind = pick(rng, ["point", "point", "line", "axis_aligned_bounding_box", "ellipsoid"])
    n = int(rng.integers(1, 30))
    width = 3 if kind == "point" else 6
    geometry = rng.uniform(0, 64, (n, width))
    ngshard.write_annotations(
        root, kind, geometry, ids=np.arange(n) + int(rng.integers(0, 2**40)),
        properties={"score": rng.uniform(0, 1, n).astype("float32")},
        relationships={"seg": [[int(x)] for x in rng.integers(1, 5, n)]},
        sharding=pick(rng, [None, "auto"]), limit=int(rng.integers(1, 10)), durable=False)


def make_properties(rng, root: Path) -> None:
    ids = _segments(rng, int(rng.integers(1, 8)))
    ngshard.write_segment_properties(root, ids, labels=[f"l{i}" for i in ids],
                                     numbers={"n": rng.uniform(0, 9, len(ids))},
                                     tags=[["a"] if i % 2 else ["b", "a"] for i in ids],
                                     key="props")


def make_volume(rng, root: Path) -> None:
    dtype = pick(rng, ["uint8", "uint32", "uint64"])
    encoding = pick(rng, ["raw", "raw", "compressed_segmentation"]) if dtype != "uint8" else \
        pick(rng, ["raw", "jpeg", "png"])
    with ngshard.create_volume(root, dtype=dtype, shape=(12, 10, 6), chunk_size=(4, 4, 4),
                               encoding=encoding, sharding=pick(rng, [None, "auto"]),
                               layer_type="image" if dtype == "uint8" else "segmentation"
                               ) as vol:
        vol[:] = rng.integers(0, 40, (12, 10, 6, 1)).astype(dtype)


# --- reads -----------------------------------------------------------------------------------

def _box(shape) -> tuple:
    return tuple(slice(0, min(int(n), 16)) for n in shape)


def read_zarr(root: Path, keys=None) -> dict:
    a = ngshard.zarr.open_array(root)
    return {"box": a[_box(a.shape)]}


def ts_zarr(root: Path, driver: str, timeout: float) -> dict:
    import tensorstore as ts

    t = ts.open({"driver": driver, "kvstore": f"file://{root}/"}).result(timeout=timeout)
    return {"box": t[_box(t.shape)].read().result(timeout=timeout)}


def zarr_python(root: Path, timeout: float, keys=None) -> dict:
    import zarr

    a = zarr.open_array(str(root), mode="r")
    return {"box": a[_box(a.shape)]}


def read_volume(root: Path, keys=None) -> dict:
    vol = ngshard.open_volume(root).translate_to[0]  # voxel_offset may be any
    box = tuple(slice(0, min(n, m)) for n, m in zip(vol.shape, (8, 8, 4, 2)))
    return {"box": vol[box]}


def ts_volume(root: Path, timeout: float, keys=None) -> dict:
    import tensorstore as ts

    t = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{root}/"}
                ).result(timeout=timeout).translate_to[0]
    box = tuple(slice(0, min(n, m)) for n, m in zip(t.shape, (8, 8, 4, 2)))
    return {"box": t[box].read().result(timeout=timeout)}


def read_layer(root: Path, keys: list[int]) -> dict:
    """ngshard's reads of a layer: its listing, queries, and the honest dataset's ``keys``
    (the ids the peers read too) in :mod:`fuzz_cloudvolume`'s canonical form."""
    layer = ngshard.open(root)
    out: dict = {"keys": np.sort(layer.keys_array())}
    want = keys[:8]
    if isinstance(layer, ngshard.Annotations):
        out["all"] = sorted(layer.query().ids.tolist())
        out["box"] = sorted(layer.query([0, 0, 0], [20, 30, 40]).ids.tolist())
        rel = layer.related("seg", 2)
        out.update(canonical_annotations("related", rel.ids, rel.geometry))
        for k, a in layer.get_many(want).items():
            out.update(canonical_annotations(f"annotation {k}", [k], a.geometry))
    elif isinstance(layer, ngshard.Meshes):
        for k, lods in layer.get_many(want, lod="all").items():
            out[f"mesh {k}"] = triangles(lods[0].vertices, lods[0].faces)
    elif isinstance(layer, ngshard.LegacyMeshes):
        for k, m in layer.get_many(want).items():
            out[f"mesh {k}"] = triangles(m.vertices, m.faces)
    elif isinstance(layer, ngshard.Skeletons):
        for k, sk in layer.get_many(want, transform=True).items():  # as cloud-volume's
            out.update(canonical_skeleton(k, sk.vertices, sk.edges, sk.radius))
    elif isinstance(layer, ngshard.SegmentProperties):
        for k, row in layer.get_many(want).items():
            out.update({f"property {k} {name}": property_value(v) for name, v in row.items()})
    else:  # a damaged info made it another kind of layer
        out["values"] = repr(sorted(layer.get_many(want)))[:100]
    return out


def spec_properties(root: Path, timeout: float, keys: list[int]) -> dict:
    """Segment properties decoded from the spec (neuroglancer's segment_properties.md), not by
    ngshard: the inline ``ids`` (base-10 strings) and each property's ``values`` (or
    ``tags``' indices into its ``tags``), for ``keys``."""
    info = json.loads((root / "info").read_text())
    assert info["@type"] == "neuroglancer_segment_properties"
    inline = info["inline"]
    rows = {int(i): n for n, i in enumerate(inline["ids"])}
    out = {}
    for k in keys[:8]:
        if k not in rows:
            continue
        for prop in inline["properties"]:
            v = prop["values"][rows[k]]
            if prop["type"] == "tags":
                v = [prop["tags"][t] for t in v]
            elif prop["type"] == "number":
                v = np.dtype(prop["data_type"]).type(v)
            out[f"property {k} {prop['id']}"] = property_value(v)
    return out


def property_value(v) -> np.ndarray:
    """A segment property's value as both sides compare it: numbers as float64, text and
    tags as strings."""
    if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
        return np.asarray(v, np.float64)
    return np.asarray(v, str)


def cloud_volume(surface: str):
    """The peer that asks the worker's cloud-volume child (see fuzz_surfaces.worker)."""
    def read(root: Path, timeout: float, keys: list[int]) -> dict:
        return CLOUD_VOLUME[0].read(surface, root, keys, timeout)

    return read


#: The worker's one cloud-volume child (fuzz_cloudvolume.CloudVolumePeer), set by the worker.
CLOUD_VOLUME: list = []


SURFACES = {  # name: (make, ngshard's read, peers)
    "zarr3": (make_zarr3, read_zarr, {"tensorstore": lambda r, t, k: ts_zarr(r, "zarr3", t),
                                      "zarr-python": zarr_python}),
    "zarr2": (make_zarr2, read_zarr, {"tensorstore": lambda r, t, k: ts_zarr(r, "zarr", t),
                                      "zarr-python": zarr_python}),
    "volume": (make_volume, read_volume, {"tensorstore": ts_volume}),
    "skeletons": (make_skeletons, read_layer, {"cloud-volume": cloud_volume("skeletons")}),
    "meshes": (make_meshes, read_layer, {"cloud-volume": cloud_volume("meshes")}),
    "legacy meshes": (make_legacy_meshes, read_layer,
                      {"cloud-volume": cloud_volume("legacy meshes")}),
    "annotations": (make_annotations, read_layer, {"cloud-volume": cloud_volume("annotations")}),
    "segment properties": (make_properties, read_layer, {"spec decoding": spec_properties}),
}
