"""Transfers of segment layers, as tasks of the one runner (:mod:`.runner`: any executor,
resume records): one task per output shard (a batch of segments where the output is a file
per segment), each reading its segments from the source in batches and writing its shard
whole, memory bounded by one shard.

Skeletons and multi-resolution meshes are carried as their encoded bytes; legacy meshes are
re-encoded, their fragments joined (their format is lossless: float32 vertices), either as
legacy meshes or (``multires``) as ``neuroglancer_multilod_draco`` meshes, welded and given
coarser levels of detail by the simplification meshing uses
(:func:`.meshing.levels_of_detail`, zmesh)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import MissingDependencyError, NotFoundError, SpecError
from ..kinds import LEGACY_MESHES, MESHES, SKELETONS, kind_of
from ..layers import open_layer
from ..layers.info import transform_json
from ..layers.mesh_codec import encode_legacy
from ..layers.mesh_writer import encode_mesh, store_legacy, store_meshes
from ..layers.sharding import resolve_sharding
from ..layers.store import write_segments
from ..limits import MESH_BATCH
from ..sharded.infofile import read_info, write_info
from ..sharded.shard_writer import Laid, write_shard
from ..sharded.spec import ShardingSpec
from ..storage import open_storage
from .phases import Step
from .plan import listed
from .runner import Plan

#: segments per task where the output is a file per segment
UNSHARDED_TASK = 16 * MESH_BATCH


@dataclass(frozen=True)
class SegmentCopy:
    """What every task of a segment transfer does: read ``kind`` from ``src``, write
    ``out`` (a kind) to ``dst`` with ``spec`` (JSON; None: a file per segment); legacy to
    multi-resolution meshes get ``lods`` levels, each ``reduction`` times simpler, vertices
    quantized to ``bits``."""

    src: str
    dst: str
    kind: str
    out: str
    spec: dict | None
    lods: int = 1
    reduction: int = 4
    bits: int = 16


def segment_plan(src: str, dst: str, *, sharding: Any = "auto", multires: bool = False,
                 lods: int | None = None) -> Plan:
    """The plan of a transfer of the skeleton or mesh layer ``src`` to ``dst`` (see
    :func:`ngshard.transfer`)."""
    doc = read_info(open_storage(src))
    if doc is None:
        raise NotFoundError(f"{src}: no info file: not a precomputed layer")
    kind = str(kind_of(doc))
    if multires and kind != LEGACY_MESHES:
        raise SpecError(f"{src} is a {kind} layer: multires applies to legacy meshes only")
    out = MESHES if multires else kind
    if lods is None:
        lods = 3 if multires and _have_zmesh() else 1
    if not 1 <= int(lods) <= 8 or (lods > 1 and not multires):
        raise SpecError(f"lods must be 1 to 8, and only with multires; got {lods}")
    if lods > 1 and not _have_zmesh():
        raise MissingDependencyError("levels of detail need zmesh: pip install "
                                     "'ngshard[meshing]' (or lods=1)")
    layer = open_layer(src)
    ids = np.sort(layer.keys_array())
    sample = layer.store.get_many(ids[:64]) if len(ids) else {}
    mean = sum(map(len, sample.values())) / len(sample) if sample else None
    spec = resolve_sharding(None if sharding in (None, "none") else sharding, len(ids), mean,
                            data_encoding="raw" if out == MESHES else "gzip")
    if spec is not None and out == MESHES and spec.data_encoding != "raw":
        raise SpecError("mesh shards need data_encoding raw (fragments are read by range)")
    copy = SegmentCopy(src, dst, kind, out, None if spec is None else spec.to_json(),
                       int(lods))
    groups: list[tuple[str, int | None, np.ndarray]]
    if spec is not None:
        shards = spec.locate(ids)[0]
        order = np.argsort(shards, kind="stable")
        cuts = np.flatnonzero(np.diff(shards[order])) + 1
        groups = [(spec.shard_filename(int(shards[g[0]])), int(shards[g[0]]), ids[g])
                  for g in np.split(order, cuts) if len(g)]
    else:
        groups = [(str(int(ids[i])), None, ids[i:i + UNSHARDED_TASK])
                  for i in range(0, len(ids), UNSHARDED_TASK)]
    steps = [Step(f"segments/{name}", copy_segments, (copy, shard, keys))
             for name, shard, keys in groups]
    # legacy meshes are read in model coordinates (their transform applied) and written so
    info = {k: v for k, v in doc.items()
            if k != "sharding" and (k != "transform" or kind != LEGACY_MESHES)}
    if multires:
        info = {"@type": MESHES, "vertex_quantization_bits": copy.bits,
                "transform": transform_json(None), "lod_scale_multiplier": 1.0}
    if spec is not None:
        info["sharding"] = spec.to_json()
    storage = open_storage(dst)
    job = {"from": src, "to": dst, "kind": kind, "info": info, "lods": copy.lods,
           "count": len(ids), "command": f"ngshard transfer {src} {dst}"}
    return Plan(json.loads(json.dumps(job)), dst, lambda empty: None, [listed(steps)],
                probes=[(src, "info"), (dst, None)],
                finish=lambda: write_info(storage, info))  # the info last


def _have_zmesh() -> bool:
    try:
        import zmesh  # noqa: F401
    except ImportError:
        return False
    return True


def copy_segments(copy: SegmentCopy, shard: int | None, ids: np.ndarray) -> dict:
    """The task: the segments ``ids`` (those of shard ``shard``) read from ``copy.src`` and
    written to ``copy.dst``, the shard whole."""
    layer = open_layer(copy.src)
    storage = open_storage(copy.dst)
    spec = None if copy.spec is None else ShardingSpec.from_json(copy.spec)
    keys: list[int] = []
    values: list = []
    before: list = []  # a multi-resolution mesh's fragment data, before its manifest
    count = written = 0
    for i in range(0, len(ids), MESH_BATCH):
        batch = ids[i:i + MESH_BATCH]
        if copy.kind == MESHES:
            found = layer.encoded_many(batch)  # {id: (fragment data, manifest)}
            got = [(k, found[k][1], found[k][0]) for k in sorted(found)]
        elif copy.kind == SKELETONS:
            found = layer.store.get_many(batch)
            got = [(k, found[k], b"") for k in sorted(found)]
        else:  # (id, value, bytes before it) each
            meshes = layer.get_many(batch)
            got = [(k, *_legacy(meshes[k], copy)) for k in sorted(meshes)]
        count += len(got)
        written += sum(len(v) + len(b) for _, v, b in got)
        if spec is None:
            _files(storage, copy.out, got)
            continue
        keys += [k for k, _, _ in got]
        values += [v for _, v, _ in got]
        before += [b for _, _, b in got]
    if spec is not None and copy.out == MESHES:
        parts = [p for b, v in zip(before, values) for p in (b, v)]
        write_shard(storage, spec, shard or 0, np.array(keys, np.uint64),
                    Laid(np.array([len(v) for v in values], np.uint64), parts,
                         np.array([len(b) for b in before], np.uint64)))
    elif spec is not None:
        write_shard(storage, spec, shard or 0, np.array(keys, np.uint64), values,
                    encoded=False)
    return {"chunks": count, "bytes": written}


def _legacy(mesh: Any, copy: SegmentCopy) -> tuple[bytes, bytes]:
    """A legacy mesh (its fragments joined) as the value written: a legacy fragment, or a
    multi-resolution mesh's (manifest, fragment data)."""
    if copy.out != MESHES:
        return encode_legacy(mesh.vertices, mesh.faces), b""
    from .meshing import levels_of_detail, lod_levels, weld

    vertices, faces = weld(np.asarray(mesh.vertices, np.float32), mesh.faces)
    levels: list = [(vertices, faces)]
    if copy.lods > 1 and len(faces):
        # the levels' errors in nm from the mesh's median edge, as ngshard mesh's from its
        # voxel
        edges = np.linalg.norm(vertices[faces] - vertices[np.roll(faces, 1, axis=1)], axis=2)
        levels += levels_of_detail(vertices, faces, lod_levels(
            copy.lods, copy.reduction, float(np.median(edges))))[1:]
    manifest, blobs = encode_mesh([(np.asarray(v, np.float64), f) for v, f in levels],
                                  copy.bits)
    return manifest.to_bytes(), b"".join(blobs)


def _files(storage: Any, kind: str, got: list) -> None:
    """Segments written a file (or two) each."""
    if kind == MESHES:
        store_meshes(storage, None, [[(k, b, v) for k, v, b in got]])
    elif kind == SKELETONS:
        write_segments(storage, None, [(k, v) for k, v, _ in got])
    else:
        store_legacy(storage, None, [(k, v) for k, v, _ in got])
