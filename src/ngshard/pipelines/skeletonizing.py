"""``ngshard.skeletonize``: TEASAR skeletons of a segmentation's labels (kimimaro), in two
phases of tasks (:mod:`.phases`).

Box tasks tile the segmentation into boxes sharing a plane of voxels (:mod:`.boxes`) and
skeletonize each with kimimaro's ``fix_borders``: where a label crosses the shared plane, both
boxes put a vertex at the same place on it, so the pieces of a skeleton meet at identical
vertices. A shard task joins every segment's pieces by merging those vertices (nothing else
of the segment is needed: its memory is that of its skeleton's vertices, never its voxels)
and writes the shard, with each vertex's radius and kimimaro's vertex types as attributes.
"""

from __future__ import annotations

import os
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._arrays import unique
from ..errors import SpecError, optional_module, require_module
from ..kinds import SKELETONS
from ..layers.info import link_layer, transform_json
from ..layers.skeleton_codec import VertexAttribute, decode_skeleton, encode_skeletons
from ..sharded.infofile import write_info
from ..sharded.shard_writer import write_shard
from ..sharded.spec import ShardingSpec
from ..storage import open_storage
from .boxes import Box, Region, box_size, boxes, open_region
from .fragments import encode_bundle, read_pieces
from .phases import Job, Step, bundles, destination_of, ids_doc, run_job, shard_spec

#: The vertex attributes of the skeletons made here: the radius (nm) and kimimaro's vertex
#: type (its SWC code), both float32: Neuroglancer draws no skeleton with an attribute of
#: another type ("Data type not supported by WebGL: UINT8").
ATTRIBUTES = (VertexAttribute("radius", "float32", 1),
              VertexAttribute("vertex_types", "float32", 1))
#: kimimaro's TEASAR parameters and their defaults (kimimaro's own; distances in nm).
TEASAR = {"scale": 1.5, "const": 300.0, "pdrf_scale": 100000.0, "pdrf_exponent": 4,
          "soma_acceptance_threshold": 3500.0, "soma_detection_threshold": 750.0,
          "soma_invalidation_const": 300.0, "soma_invalidation_scale": 2.0}


@dataclass(frozen=True)
class SkeletonOptions:
    """kimimaro's ``teasar_params`` (as sorted pairs) and ``dust_threshold`` (voxels, per
    box), ``fix_branching``, ``fill_holes``."""

    teasar: tuple
    dust: int
    fix_branching: bool
    fill_holes: bool


def _kimimaro():
    return optional_module("kimimaro", "skeletonizing needs", "meshing")


def forge_skeletons(dst: str, region: Region, box: Box, options: SkeletonOptions,
                    ids: np.ndarray | None) -> dict:
    """The box task: skeletonize every label of ``box``, write its bundle."""
    kimimaro = _kimimaro()
    labels = region.read(box.lo, box.hi, ids)
    skeletons = kimimaro.skeletonize(
        labels, teasar_params=dict(options.teasar), anisotropy=region.resolution,
        dust_threshold=options.dust, fix_borders=True, fix_branching=options.fix_branching,
        fill_holes=options.fill_holes, progress=False, parallel=1)
    del labels
    shift = region.corner_nm(box.lo)
    found = np.array(sorted(k for k, s in skeletons.items() if len(s.vertices)), np.uint64)
    items = []
    for label in found.tolist():
        s = skeletons[label]
        items.append((label, s.vertices.astype(np.float64) + shift, s.edges,
                      {"radius": s.radii, "vertex_types": s.vertex_types}))
    parts = encode_bundle(found, encode_skeletons(items, ATTRIBUTES))
    bundles(dst).write(box.name, parts)
    return {"labels": len(found), "bytes": sum(map(len, parts))}


def join_skeletons(pieces: list, tolerance: float) -> tuple:
    """One segment's skeleton from its pieces of every box: vertices closer than
    ``tolerance`` (nm, per axis on a grid) are one vertex (the first piece's attributes),
    duplicate edges and loops of one vertex are dropped."""
    decoded = [decode_skeleton(p, ATTRIBUTES, "bundle piece") for p in pieces]
    offsets = np.cumsum([0] + [len(v) for v, _, _ in decoded[:-1]])
    vertices = np.concatenate([v for v, _, _ in decoded])
    edges = np.concatenate([e.astype(np.int64) + o for (_, e, _), o in zip(decoded, offsets)])
    attrs = {a.id: np.concatenate([d[2][a.id] for d in decoded]) for a in ATTRIBUTES}
    grid = np.round(vertices.astype(np.float64) / tolerance).astype(np.int64)
    _, first, inverse = np.unique(grid, axis=0, return_index=True, return_inverse=True)
    keep = np.sort(first)  # the merged vertices in order of first appearance
    renumber = np.empty(len(first), np.int64)
    renumber[np.argsort(first)] = np.arange(len(first))
    new = renumber[inverse.reshape(-1)]
    e = np.sort(new[edges], axis=1)
    e = np.unique(e[e[:, 0] != e[:, 1]], axis=0)
    return vertices[keep], e, {k: v[keep] for k, v in attrs.items()}


def postprocess(vertices: np.ndarray, edges: np.ndarray, attrs: dict, dust: float,
                tick: float) -> tuple:
    """kimimaro's postprocessing of a joined skeleton: loops (made where two boxes' paths
    meet on their shared plane) removed, components closer than their radii joined, pieces
    of less than ``dust`` nm and branches of less than ``tick`` nm dropped."""
    import osteoid

    kimimaro = _kimimaro()
    s = osteoid.Skeleton(vertices, edges, radii=attrs["radius"],
                         vertex_types=attrs["vertex_types"].astype(np.uint8),
                         space="physical")
    s = kimimaro.postprocess(s, dust_threshold=dust, tick_threshold=tick)
    return s.vertices, s.edges, {"radius": s.radii, "vertex_types": s.vertex_types}


def merge_skeletons(dst: str, spec_json: dict, shard: int, requests: list,
                    tolerance: float, dust: float, tick: float) -> dict:
    """The shard task: every piece of the shard's segments joined, the shard written."""
    spec = ShardingSpec.from_json(spec_json)
    got = read_pieces(bundles(dst), [(name, ranges) for name, _, ranges in requests])
    keys = np.concatenate([k for _, k, _ in requests])
    flat = [p for chunks in got for p in chunks]
    order = np.argsort(keys, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(keys[order])) + 1)
    items = []
    for g in groups:
        vertices, edges, attrs = join_skeletons([flat[i] for i in g.tolist()], tolerance)
        joined = postprocess(vertices, edges, attrs, dust, tick)
        if len(joined[0]):
            items.append((int(keys[g[0]]), *joined))
    segments = np.array([k for k, *_ in items], np.uint64)
    values = encode_skeletons(items, ATTRIBUTES)
    written = write_shard(open_storage(dst), spec, shard, segments, values, encoded=False)
    return {"segments": len(segments), "bytes": written}


def skeletonize(seg: str | os.PathLike, dst: str | os.PathLike | None = None, *,
                scale: int | str = 0, bbox: Any = None, ids: Any = None, box: Any = 256,
                teasar: dict | None = None, dust_threshold: int = 0,
                cable_dust: float = 0.0, tick_threshold: float = 0.0,
                fix_branching: bool = True, fill_holes: bool = False,
                sharding: None | str | dict = "auto", executor: Executor | None = None,
                workers: int | None = None, progress: bool = True, resume: bool = True,
                overwrite: bool = False, axes: str | None = None) -> dict[str, int]:
    """Make the skeletons of a segmentation's labels (kimimaro's TEASAR): a sharded
    ``neuroglancer_skeletons`` layer with per-vertex ``radius`` (nm) and ``vertex_types``,
    named in the segmentation's info as its ``skeletons``.

    Parameters
    ----------
    seg
        A precomputed segmentation, or a zarr array or OME-Zarr group of labels (then
        ``dst`` is needed).
    dst
        Where the skeleton layer goes (default ``<seg>/skeletons``); a folder inside
        ``seg`` is named in its info.
    scale, bbox, ids, axes
        As for :func:`ngshard.mesh`: the scale, the voxels (x0, y0, z0, x1, y1, z1) and the
        labels skeletonized, a zarr source's axes.
    box
        Voxels per task box edge (one integer or three): a worker holds a box's labels and
        kimimaro's distance transforms of it.
    teasar
        kimimaro ``teasar_params`` overriding its defaults (scale 1.5, const 300 nm, ...).
    dust_threshold
        Pieces of fewer voxels within a box are dropped (kimimaro's, per box; 0 keeps
        everything, so a segment is not cut where it only grazes a box).
    cable_dust, tick_threshold
        After joining (kimimaro's ``postprocess``, which also removes loops and joins
        close components): components of less cable (nm) are dropped, and branches
        shorter than ``tick_threshold`` (nm) pruned.
    fix_branching, fill_holes
        kimimaro's options.
    sharding
        "auto" (murmurhash shards sized by the skeletons found) or a spec.
    executor, workers, progress, resume, overwrite
        As for :func:`ngshard.convert`.

    Returns
    -------
    dict
        As :func:`ngshard.mesh` returns.

    Raises
    ------
    NotFoundError, SpecError
        A missing segmentation, one that is not integer labels, a bad option.
    MissingDependencyError
        kimimaro is not installed (``pip install 'ngshard[meshing]'``).
    ExistsError
        ``dst`` holds a layer, and not ``overwrite``.
    """
    require_module("kimimaro", "skeletonizing needs", "meshing")  # imported where the tasks run
    params = {**TEASAR, **(teasar or {})}
    unknown = set(params) - set(TEASAR)
    if unknown:
        raise SpecError(f"unknown TEASAR parameters {sorted(unknown)}; known: "
                        f"{sorted(TEASAR)}")
    region, handle = open_region(seg, scale, bbox, axes)
    size = box_size(box)
    options = SkeletonOptions(tuple(sorted(params.items())),
                              int(dust_threshold), bool(fix_branching), bool(fill_holes))
    dst, link = destination_of(seg, dst, handle, "skeletons")
    wanted = None if ids is None else unique(np.asarray(ids, np.uint64))
    forge = [Step(f"box/{b.name}", forge_skeletons, (dst, region, b, options, wanted))
             for b in boxes(region.shape, size)]
    tolerance = float(min(region.resolution)) / 100

    def merge(spec: ShardingSpec, shard: int, requests: list) -> Step:
        return Step(f"shard/{spec.shard_filename(shard)}", merge_skeletons,
                    (dst, spec.to_json(), shard, requests, tolerance, float(cable_dust),
                     float(tick_threshold)))

    def finish(spec: ShardingSpec, count: int) -> None:
        info = {"@type": SKELETONS, "transform": transform_json(None),
                "vertex_attributes": [a.to_json() for a in ATTRIBUTES],
                "sharding": spec.to_json()}
        write_info(open_storage(dst), info)
        if link is not None:
            link_layer(open_storage(handle.storage.url), "skeletons", link)

    doc = {"job": "skeletonize", "from": region.where, "to": dst, "scale": scale,
           "region": [region.lo, region.hi], "box": size, "ids": ids_doc(wanted),
           "options": [list(options.teasar), options.dust, options.fix_branching,
                       options.fill_holes, float(cable_dust), float(tick_threshold)],
           "sharding": sharding}
    stats = run_job(Job("skeletonizing", dst, doc, forge, merge,
                        lambda count, mean: shard_spec(sharding, count, mean),
                        finish, preload=("kimimaro",)),
                    executor=executor, workers=workers, progress=progress, resume=resume,
                    overwrite=overwrite)
    return {**stats, "attached": int(link is not None)}
