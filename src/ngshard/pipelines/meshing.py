"""``ngshard.mesh``: multi-resolution meshes of a segmentation's labels, in two phases of
tasks (:mod:`.phases`).

Box tasks tile the segmentation (padded by one zero voxel, so that surfaces touching its edge
are closed) into boxes sharing a plane of voxels (:mod:`.boxes`); zmesh runs marching cubes
over each, the cells of neighbouring boxes meeting on the shared plane, where their vertices
coincide: a segment's mesh is closed across boxes. Each box is an octree node of the coarsest
level of detail: each label's mesh there is simplified by zmesh once per coarser level, cut
into that level's nodes (one grid for every box: its origin the padded frame's corner) and
encoded with Draco in the box task. The shard tasks then only gather a segment's fragments
from every box, sort them into one manifest and write the shard: no worker ever holds a
segment's whole full-resolution mesh, whatever its size.

``legacy=True`` writes single-resolution ``neuroglancer_legacy_mesh`` segments instead (each
segment's box meshes joined, duplicate vertices merged: a shard task then holds whole
meshes).
"""

from __future__ import annotations

import os
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._arrays import unique
from ..errors import SpecError, optional_module, require_module
from ..kinds import LEGACY_MESHES, MESHES
from ..layers.info import link_layer, transform_json
from ..layers.mesh_codec import Manifest, decode_legacy, encode_legacy
from ..layers.mesh_octree import zorder
from ..layers.mesh_writer import encode_mesh
from ..sharded.infofile import write_info
from ..sharded.shard_writer import Laid, write_shard
from ..sharded.spec import ShardingSpec
from ..storage import open_storage
from .boxes import Box, Region, box_size, boxes, open_region
from .fragments import encode_bundle, read_pieces
from .phases import Job, Step, bundles, destination_of, ids_doc, run_job, shard_spec


@dataclass(frozen=True)
class MeshOptions:
    """How each box is meshed: ``lods`` levels of detail on an octree of LOD 0 nodes of
    ``node`` nm from ``origin`` (nm), LOD 0 simplified ``simplify`` times (vertices moving
    at most ``max_error`` nm; 1: not simplified), each coarser level ``reduction`` times
    more than the one below; ``bits`` of vertex quantization; legacy single-resolution
    meshes."""

    origin: tuple[float, float, float]
    node: tuple[float, float, float]
    lods: int
    reduction: int
    bits: int
    legacy: bool
    simplify: int = 1
    max_error: float = 0.0

    def levels(self, voxel: float) -> list[tuple[int, float]]:
        """The levels of :func:`lod_levels` of these options; ``voxel`` is the largest edge
        of a voxel (nm)."""
        return lod_levels(1 if self.legacy else self.lods, self.reduction, voxel,
                          self.simplify, self.max_error)


def lod_levels(lods: int, reduction: int, unit: float, simplify: int = 1,
               max_error: float = 0.0) -> list[tuple[int, float]]:
    """(reduction factor, max error) of each of ``lods`` levels of detail, each simplified
    from the full mesh: LOD 0 ``simplify`` times (moving vertices at most ``max_error``),
    level k ``reduction**k`` times more, its vertices moving at most ``unit * 2**(k - 1)``
    (or twice the error of the level below) — the levels of every multi-resolution mesh
    ngshard makes, from labels or from a legacy mesh."""
    return [(simplify, max_error)] + [
        (simplify * reduction ** k, max(max_error * 2 ** k, unit * 2 ** (k - 1)))
        for k in range(1, lods)]


def _zmesh():
    return optional_module("zmesh", "meshing needs", "meshing")


#: Mesher.simplify packs coordinates in 21 bits a axis, one of them for half units: a mesh
#: spanning more goes in coarser units.
_SIMPLIFIER_SPAN = 2**19


def _simplified(mesher: Any, mesh: Any, reduction: int, max_error: float) -> Any:
    """zmesh's simplification of ``mesh`` (its units those of ``max_error``); the mesh itself
    where there is too little to simplify, or where what comes back is not a mesh of its
    vertices. ``Mesher((1, 1, 1)).simplify`` gives its simplifier the coordinates twice over,
    as ``Mesher.get`` gives it marching cubes' (in half voxels times the resolution: twice
    the nm), and the error divided by the resolution's norm, sqrt(3), and rounded down: it
    gets the error times sqrt(3), so the simplifier sees ``max_error`` itself, as from
    ``Mesher.get`` (to the whole unit nearest to it)."""
    if len(mesh.faces) < 16 or reduction <= 1:
        return mesh
    out = mesher.simplify(mesh, reduction_factor=reduction,
                          max_error=(round(max_error) + 0.5) * np.sqrt(3),
                          compute_normals=False)
    if not len(out.faces) or int(out.faces.max()) >= len(out.vertices) or \
            not np.isfinite(out.vertices).all():
        return mesh
    return out


def levels_of_detail(vertices: np.ndarray, faces: np.ndarray,
                     levels: list[tuple[int, float]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """A mesh (``vertices`` in nm) simplified to each of ``levels`` (see :func:`lod_levels`),
    each from the mesh itself (zmesh's simplifier can loop forever on a mesh it simplified
    already), by the rule of :func:`label_levels`: zmesh's simplifier sees the mesh as
    ``Mesher.get`` gives it a label's, and ``max_error`` in nm as ``Mesher.get`` takes it.
    A mesh spanning more than 2**19 nm (the simplifier's range) goes in coarser units, its
    errors with it. Returns (vertices in nm, faces) of each level."""
    zmesh = _zmesh()
    vertices = np.asarray(vertices, np.float64)
    shift = vertices.min(axis=0) if len(vertices) else np.zeros(3)
    unit = max(1.0, float((vertices.max(axis=0) - shift).max()) / _SIMPLIFIER_SPAN
               if len(vertices) else 1.0)
    full = zmesh.Mesh(((vertices - shift) / unit).astype(np.float32),
                      np.asarray(faces, np.uint32), None)
    mesher = zmesh.Mesher((1, 1, 1))
    out = []
    for reduction, max_error in levels:
        mesh = _simplified(mesher, full, reduction, max_error / unit)
        out.append((vertices, faces) if mesh is full else
                   (np.asarray(mesh.vertices, np.float64) * unit + shift, mesh.faces))
    return out


def label_levels(mesher: Any, label: int, levels: list[tuple[int, float]]) -> list:
    """The mesh of ``label`` (meshed by ``mesher``) at each of ``levels``, each simplified
    by zmesh from the label's marching-cubes triangles (``Mesher.get``, as igneous' forge
    does: ``max_error`` in nm of the mesher's resolution; ``Mesher.simplify``, which
    :func:`levels_of_detail` needs for meshes without their labels, packs the triangles in
    Python first)."""
    full, out = None, []
    for reduction, max_error in levels:
        if reduction > 1:
            mesh = mesher.get(label, normals=False, reduction_factor=reduction,
                              max_error=max_error)
            if len(mesh.faces) and int(mesh.faces.max()) < len(mesh.vertices) and \
                    np.isfinite(mesh.vertices).all():
                out.append(mesh)
                continue
        if full is None:
            full = mesher.get(label, normals=False, reduction_factor=0, max_error=0)
        out.append(full)
    return out


def weld(vertices: np.ndarray, faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mesh with its duplicate vertices merged (meshes of neighbouring boxes, and legacy
    fragments, meet at identical vertices)."""
    merged, inverse = np.unique(vertices, axis=0, return_inverse=True)
    return merged, inverse.reshape(-1)[np.asarray(faces, np.int64)]


def forge_meshes(dst: str, region: Region, box: Box, options: MeshOptions,
                 ids: np.ndarray | None) -> dict:
    """The box task: mesh every label of ``box``, write its bundle."""
    zmesh = _zmesh()
    labels = region.read(box.lo, box.hi, ids)
    res = np.asarray(region.resolution, np.float64)
    mesher = zmesh.Mesher(tuple(res))
    mesher.mesh(labels, close=False)  # the region's edge is closed by the padding
    del labels
    shift = region.corner_nm(box.lo)
    found = np.array(sorted(mesher.ids()), np.uint64)
    found = found[found != 0]
    pieces = []
    levels = options.levels(float(res.max()))
    for label in found.tolist():
        lods = label_levels(mesher, int(label), levels)
        shifted = [(m.vertices.astype(np.float64) + shift, m.faces) for m in lods]
        mesher.erase(label)
        if options.legacy:
            pieces.append(encode_legacy(*shifted[0]))
            continue
        manifest, blobs = encode_mesh(shifted, options.bits, options.node,
                                      grid_origin=options.origin)
        head = manifest.to_bytes()
        pieces.append(b"".join([np.array([len(head)], "<u4").tobytes(), head, *blobs]))
    mesher.clear()
    parts = encode_bundle(found, pieces)
    bundles(dst).write(box.name, parts)
    return {"labels": len(found), "bytes": sum(map(len, parts))}


def join_multires(pieces: list) -> tuple[bytes, list]:
    """One segment's manifest and fragment data (parts) from its pieces of every box: the
    fragments of each level of detail in Z-curve order of their node positions."""
    manifests, datas = [], []
    for p in pieces:
        p = memoryview(p)
        n = int(np.frombuffer(p, "<u4", 1)[0])
        manifests.append(Manifest.from_bytes(p[4:4 + n], "bundle piece"))
        datas.append(p[4 + n:])
    first = manifests[0]
    lods = first.num_lods
    positions, sizes, parts = [], [], []
    for lod in range(lods):
        pos = np.concatenate([m.fragment_positions[lod] for m in manifests])
        size = np.concatenate([m.fragment_sizes[lod] for m in manifests]).astype(np.int64)
        begins = np.concatenate([m.lod_range(lod)[0] + np.cumsum(m.fragment_sizes[lod],
                                                                 dtype=np.int64)
                                 - m.fragment_sizes[lod] for m in manifests])
        owner = np.repeat(np.arange(len(manifests)), [len(m.fragment_sizes[lod])
                                                      for m in manifests])
        order = np.argsort(zorder(pos), kind="stable")
        positions.append(pos[order])
        sizes.append(size[order].astype(np.uint32))
        parts += [datas[o][b:b + s] for o, b, s in
                  zip(owner[order].tolist(), begins[order].tolist(), size[order].tolist())]
    scales = np.maximum.accumulate(np.max([m.lod_scales for m in manifests], axis=0))
    manifest = Manifest(first.chunk_shape, first.grid_origin, scales,
                        np.zeros((lods, 3)), positions, sizes)
    return manifest.to_bytes(), parts


def join_legacy(pieces: list) -> bytes:
    """One segment's legacy fragment from its box meshes, duplicate vertices merged (the
    boxes' meshes meet at identical vertices)."""
    meshes = [decode_legacy(p, "bundle piece") for p in pieces]
    offsets = np.cumsum([0] + [len(v) for v, _ in meshes[:-1]])
    vertices = np.concatenate([v for v, _ in meshes])
    faces = np.concatenate([f.astype(np.int64) + o for (_, f), o in zip(meshes, offsets)])
    return encode_legacy(*weld(vertices, faces))


def merge_meshes(dst: str, spec_json: dict, shard: int, requests: list, legacy: bool
                 ) -> dict:
    """The shard task: every piece of the shard's segments joined, the shard written."""
    spec = ShardingSpec.from_json(spec_json)
    got = read_pieces(bundles(dst), [(name, ranges) for name, _, ranges in requests])
    keys = np.concatenate([k for _, k, _ in requests])
    flat = [p for chunks in got for p in chunks]
    order = np.argsort(keys, kind="stable")  # by segment, its boxes in order
    cuts = np.flatnonzero(np.diff(keys[order])) + 1
    groups = np.split(order, cuts)
    segments = np.array([keys[g[0]] for g in groups], np.uint64)
    storage = open_storage(dst)
    if legacy:
        values = [join_legacy([flat[i] for i in g.tolist()]) for g in groups]
        written = write_shard(storage, spec, shard, segments, values, encoded=False)
        return {"segments": len(segments), "bytes": written}
    parts, sizes, unindexed = [], [], []
    for g in groups:
        manifest, data = join_multires([flat[i] for i in g.tolist()])
        parts += [*data, manifest]
        sizes.append(len(manifest))
        unindexed.append(sum(map(len, data)))
    laid = Laid(np.array(sizes, np.uint64), parts, np.array(unindexed, np.uint64))
    written = write_shard(storage, spec, shard, segments, laid)
    return {"segments": len(segments), "bytes": written}


def mesh(seg: str | os.PathLike, dst: str | os.PathLike | None = None, *,
         scale: int | str = 0, bbox: Any = None, ids: Any = None, box: Any = 256,
         lods: int = 3, reduction: int = 4, simplify: int = 1, max_error: float = 40.0,
         legacy: bool = False,
         sharding: None | str | dict = "auto", vertex_quantization_bits: int = 16,
         executor: Executor | None = None, workers: int | None = None,
         progress: bool = True, resume: bool = True, overwrite: bool = False,
         axes: str | None = None) -> dict[str, int]:
    """Make the meshes of a segmentation's labels: sharded multi-resolution Draco meshes
    (``neuroglancer_multilod_draco``), named in the segmentation's info as its ``mesh``.

    Parameters
    ----------
    seg
        A precomputed segmentation, or a zarr array or OME-Zarr group of labels (then
        ``dst`` is needed: there is no info to attach the meshes to).
    dst
        Where the mesh layer goes (default ``<seg>/mesh``). A folder inside ``seg`` is
        named in its info (relative); one elsewhere is not.
    scale
        The scale meshed (index or key; a zarr group's level index).
    bbox
        Only voxels (x0, y0, z0, x1, y1, z1) of that scale (voxel_offset included);
        surfaces are closed at its faces.
    ids
        Only these labels (default every non-zero label).
    box
        Voxels per task box edge (one integer or three); a multiple of ``2**(lods - 1)``
        (rounded up). A worker holds a box's labels as uint64 and its meshes.
    lods
        Levels of detail: LOD 0 nodes are ``box / 2**(lods - 1)`` voxels, the coarsest
        level one node per box.
    reduction
        Triangles kept per level: each level simplified to about ``1 / reduction`` of the
        one below (zmesh's quadric simplification, vertices moving at most a voxel at
        LOD 1, doubling per level).
    simplify, max_error
        LOD 0 (the only level of legacy meshes) simplified to about ``1 / simplify`` of
        its triangles, vertices moving at most ``max_error`` nm (doubling per coarser
        level); 1 keeps the marching cubes' mesh. igneous' ``mesh forge`` simplifies by
        100 at 40 nm.
    legacy
        Write single-resolution ``neuroglancer_legacy_mesh`` segments (full resolution)
        instead.
    sharding
        "auto" (murmurhash shards sized by the segments found), or a spec.
    vertex_quantization_bits
        10 or 16.
    executor, workers, progress, resume, overwrite
        As for :func:`ngshard.convert`: where tasks run (a local process pool of
        ``workers`` by default), a progress bar, resuming an interrupted run of the same
        job (records in ``dst``), replacing a layer already at ``dst``.
    axes
        A zarr source's axes as letters (x, y, z, c, t), overriding its metadata.

    Returns
    -------
    dict
        ``boxes`` and ``shards`` (tasks of each phase), ``segments`` meshed, ``run`` and
        ``skipped`` (tasks of this call, of a run before), ``attached`` (1 if the
        segmentation's info names the layer).

    Raises
    ------
    NotFoundError, SpecError
        A missing segmentation, one that is not integer labels of one channel, a bad scale,
        bounding box, box size or option.
    MissingDependencyError
        zmesh is not installed (``pip install 'ngshard[meshing]'``).
    ExistsError
        ``dst`` holds a layer, and not ``overwrite``.
    """
    require_module("zmesh", "meshing needs", "meshing")  # imported where the tasks run
    if vertex_quantization_bits not in (10, 16):
        raise SpecError(f"vertex_quantization_bits must be 10 or 16, got "
                        f"{vertex_quantization_bits}")
    if not 1 <= int(lods) <= 8 or int(reduction) < 1 or int(simplify) < 1 or \
            not float(max_error) >= 0:
        raise SpecError(f"lods must be 1 to 8, reduction and simplify at least 1 and "
                        f"max_error at least 0, got {lods}, {reduction}, {simplify}, "
                        f"{max_error}")
    region, handle = open_region(seg, scale, bbox, axes)
    step = 1 << (int(lods) - 1)
    size = tuple(-(-s // step) * step for s in box_size(box))
    res = np.asarray(region.resolution)
    options = MeshOptions(tuple(region.corner_nm(-1).tolist()),
                          tuple((np.asarray(size) // step * res).tolist()), int(lods),
                          int(reduction), int(vertex_quantization_bits), bool(legacy),
                          int(simplify), float(max_error) if int(simplify) > 1 else 0.0)
    dst, link = destination_of(seg, dst, handle, "mesh")
    wanted = None if ids is None else unique(np.asarray(ids, np.uint64))
    forge = [Step(f"box/{b.name}", forge_meshes, (dst, region, b, options, wanted))
             for b in boxes(region.shape + 2, size, start=-1)]
    kind = LEGACY_MESHES if legacy else MESHES

    def merge(spec: ShardingSpec, shard: int, requests: list) -> Step:
        return Step(f"shard/{spec.shard_filename(shard)}", merge_meshes,
                    (dst, spec.to_json(), shard, requests, bool(legacy)))

    def choose(count: int, mean: float | None) -> ShardingSpec:
        spec = shard_spec(sharding, count, mean, data_encoding="gzip" if legacy else "raw")
        if not legacy and spec.data_encoding != "raw":
            raise SpecError("mesh shards need data_encoding raw (fragments are read by range)")
        return spec

    def finish(spec: ShardingSpec, count: int) -> None:
        info: dict = {"@type": kind, "sharding": spec.to_json()}
        if not legacy:
            info.update({"vertex_quantization_bits": int(vertex_quantization_bits),
                         "transform": transform_json(None), "lod_scale_multiplier": 1.0})
        write_info(open_storage(dst), info)
        if link is not None:
            link_layer(open_storage(handle.storage.url), "mesh", link)

    doc = {"job": "mesh", "from": region.where, "to": dst, "scale": scale,
           "region": [region.lo, region.hi], "box": size, "ids": ids_doc(wanted),
           "options": [options.lods, options.reduction, options.bits, options.legacy,
                       options.simplify, options.max_error],
           "sharding": sharding}
    preload = ("zmesh",) if legacy else ("zmesh", "DracoPy")
    stats = run_job(Job("meshing", dst, doc, forge, merge, choose, finish, preload),
                    executor=executor, workers=workers, progress=progress, resume=resume,
                    overwrite=overwrite)
    return {**stats, "attached": int(link is not None)}
