"""Built-in sample data: Neuroglancer layers as a connectomics pipeline leaves them, in
``image/``, ``segmentation/`` and ``synapses/``. The segmentation is a sharded
compressed_segmentation volume of Voronoi "cells" at two scales, whose segment IDs key the
layers its info attaches: sharded skeletons (``skeletons/``), sharded multi-resolution meshes
(one level of detail) made from the segmentation's second scale by :func:`ngshard.mesh`
(``mesh/``) and segment
properties (labels, sizes, tags: ``segment_properties/``). The image is a sharded raw uint8
volume at two scales, the same cells as a microscope might show them (bright insides, dark
membranes, smooth). Each
cell's skeleton runs along the cell through its own voxels, so a viewer shows it inside its
segment; the other IDs' skeletons are random walks that stay inside the volume. The synapses
are point annotations on membranes, with properties and their two cells as relationships
(see :mod:`ngshard.demo_segments`).

The data is deterministic (a seeded generator, fixed encodings), so a rerun writes the same
bytes. It replaces the previous demo's files rather than writing over them: the volumes'
shards are updated by appending, and a second run into them would leave half of every shard
garbage. A folder holding anything else is refused unless ``force``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from ._arrays import unique
from .demo_segments import cell_properties, synapses
from .errors import NgShardError, optional_module
from .layers.annotation_writer import write_annotations
from .layers.properties import write_segment_properties
from .layers.skeletons import write_skeletons
from .sharded import ShardingSpec
from .sharded.infofile import write_info
from .types import Encoding
from .volume import create_volume
from .volume.handle import write_volume_info
from .volume.layers import scale_key

DEMO_SPEC = ShardingSpec(hash="murmurhash3_x86_128", preshift_bits=0, minishard_bits=4,
                         shard_bits=3, minishard_index_encoding="gzip", data_encoding="gzip")
# mesh fragments are read by byte range: their data is never gzipped
MESH_SPEC = ShardingSpec(hash="murmurhash3_x86_128", preshift_bits=0, minishard_bits=3,
                         shard_bits=1, minishard_index_encoding="gzip", data_encoding="raw")
ANNOTATION_SPEC = ShardingSpec(hash="murmurhash3_x86_128", preshift_bits=0, minishard_bits=2,
                               shard_bits=1, minishard_index_encoding="gzip",
                               data_encoding="gzip")
RESOLUTION = (8, 8, 40)  # nm per voxel, x y z
DOWNSAMPLE = (2, 2, 1)  # of the second scale
#: Info member that marks a layer as the demo's: only such a layer is replaced by a rerun.
MARKER = "ngshard_demo"
#: The layers' folders, and those of the layers the segmentation's info attaches.
IMAGE, SEGMENTATION, SYNAPSES = "image", "segmentation", "synapses"
ATTACHED = ("skeletons", "mesh", "segment_properties")
SCALE_DIRS = (scale_key(RESOLUTION), scale_key([r * d for r, d in zip(RESOLUTION, DOWNSAMPLE)]))
_RELATIONSHIPS = ("pre_synaptic_cell", "post_synaptic_cell")
# The folders the demo writes: None is a folder of shards (and an info), a dict a layer (whose
# info must carry MARKER) and its folders. Earlier demos wrote the segmentation at the top:
# a rerun replaces those too.
DEMO_TREE: dict = {IMAGE: dict.fromkeys(SCALE_DIRS),
                   SEGMENTATION: {**dict.fromkeys(SCALE_DIRS), **dict.fromkeys(ATTACHED)},
                   SYNAPSES: dict.fromkeys(("by_id", "spatial0",
                                            *(f"rel_{r}" for r in _RELATIONSHIPS))),
                   **dict.fromkeys(SCALE_DIRS), "skeletons": None}
# The files the demo writes in those folders, and the temporaries an interrupted write leaves.
_DEMO_FILE = re.compile(r"info|[0-9a-f]+\.shard")
_TEMP_FILE = re.compile(r"\.(info|[0-9a-f]+\.shard)~.+\.tmp")


def chain(vertices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A skeleton of ``vertices`` joined in order, each to the next: (vertices, edges)."""
    n = len(vertices)
    return vertices, np.stack([np.arange(n - 1), np.arange(1, n)], axis=1)


def walk_skeletons(rng: np.random.Generator, lengths: np.ndarray, shape: tuple[int, int, int],
                   step: float = 50.0) -> list[np.ndarray]:
    """Random walks of ``lengths`` vertices (nm, steps of ``step`` nm per axis), all at once,
    folded back at the faces so that every vertex lies inside the volume's voxel centres'
    box (a walk that is clipped instead sticks to the faces)."""
    res = np.asarray(RESOLUTION, float)
    lo, span = res / 2, (np.asarray(shape) - 1) * res  # first and last voxel centres
    starts = rng.uniform(lo, lo + span, (len(lengths), 3))
    steps = rng.normal(0, step, (int(lengths.sum()), 3))
    first = np.cumsum(lengths) - lengths
    walked = steps.cumsum(axis=0)
    walked -= np.repeat(walked[first] - steps[first], lengths, axis=0)  # each walk from 0
    u = np.mod(np.repeat(starts, lengths, axis=0) + walked - lo, 2 * span)
    return np.split(lo + span - np.abs(u - span), first[1:])


def cell_skeletons(cells: np.ndarray, n: int, vertices: int = 32, stride: int = 2
                   ) -> dict[int, np.ndarray]:
    """For each cell present in ``cells`` (an (x, y, z) array of cell numbers below ``n``), a
    chain of up to ``vertices`` voxel centres (nm) of that cell, along its principal axis.

    The cell's voxels are cut into that many slabs across the axis and each slab gives its
    voxel nearest to the slab's centroid: the centroids follow the middle of the cell, and
    taking a voxel of the cell itself keeps every vertex inside its segment (a centroid of a
    non-convex cell may lie outside it). Works on every ``stride``-th voxel per axis, plus
    every voxel of the cells that sampling misses, all cells at once.
    """
    sample = np.zeros(cells.shape, bool)
    sample[::stride, ::stride, ::stride] = True
    sample |= (np.bincount(cells[sample], minlength=n) == 0)[cells]
    at = np.flatnonzero(sample)
    g = cells.ravel()[at]
    p = (np.stack(np.unravel_index(at, cells.shape), axis=1) + 0.5) * np.asarray(RESOLUTION)
    count = np.bincount(g, minlength=n)
    mean = np.stack([np.bincount(g, p[:, d], n) for d in range(3)], 1) / \
        np.maximum(count, 1)[:, None]
    q = p - mean[g]
    cov = np.stack([np.bincount(g, q[:, i] * q[:, j], n) for i in range(3) for j in range(3)],
                   1).reshape(n, 3, 3)
    axis = np.linalg.eigh(cov)[1][:, :, -1]  # the eigenvector of the largest eigenvalue
    t = (q * axis[g]).sum(axis=1)
    lo, hi = np.full(n, np.inf), np.full(n, -np.inf)
    np.minimum.at(lo, g, t)
    np.maximum.at(hi, g, t)
    width = np.where(hi > lo, hi - lo, 1.0)
    slab = g * vertices + np.minimum(((t - lo[g]) / width[g] * vertices).astype(np.intp),
                                     vertices - 1)
    size = np.maximum(np.bincount(slab, minlength=n * vertices), 1)[:, None]
    centre = np.stack([np.bincount(slab, p[:, d], n * vertices) for d in range(3)], 1) / size
    d2 = ((p - centre[slab]) ** 2).sum(axis=1)
    best = np.full(n * vertices, np.inf)
    np.minimum.at(best, slab, d2)
    hit = np.flatnonzero(d2 == best[slab])
    slabs, first = np.unique(slab[hit], return_index=True)  # one voxel per slab, in order
    chain = p[hit[first]]
    ends = np.searchsorted(slabs // vertices, np.arange(n + 1))
    return {c: chain[ends[c]:ends[c + 1]] for c in np.flatnonzero(count).tolist()}


def smooth_image(rng: np.random.Generator, cells: np.ndarray, n: int) -> np.ndarray:
    """A uint8 image of ``cells`` as a microscope might show them: each cell a grey of its
    own, darker at the membranes between cells, blurred (twice a box filter over 5 x 5 x 3
    voxels) so that neighbouring voxels differ a little, not by steps."""
    grey = rng.uniform(140, 220, n).astype(np.float32)
    image = grey[cells]
    for axis in range(3):  # membranes: voxels whose next neighbour is another cell
        a, b = [slice(None)] * 3, [slice(None)] * 3
        a[axis], b[axis] = slice(None, -1), slice(1, None)
        edge = cells[tuple(a)] != cells[tuple(b)]
        image[tuple(a)][edge] = 40.0
        image[tuple(b)][edge] = 40.0
    for axis, width in zip(range(3), (5, 5, 3)):
        for _ in range(2):
            image = _box_filter(image, axis, width)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def _box_filter(a: np.ndarray, axis: int, width: int) -> np.ndarray:
    """The mean over ``width`` (odd) neighbours along ``axis``, edges repeated, from one
    cumulative sum."""
    a = np.moveaxis(a, axis, 0)
    r = width // 2
    padded = np.concatenate([np.repeat(a[:1], r + 1, axis=0), a, np.repeat(a[-1:], r, axis=0)])
    c = np.cumsum(padded, axis=0, dtype=np.float32)
    return np.moveaxis((c[width:] - c[:-width]) / np.float32(width), 0, axis)


def voronoi_cells(rng: np.random.Generator, shape: tuple[int, int, int], n: int,
                  step: int = 4) -> np.ndarray:
    """(x, y, z) cell numbers: each voxel takes the number of the nearest of ``n`` random
    seeds, computed on a grid ``step`` times coarser and scaled up."""
    coarse = [s // step for s in shape]
    seeds = rng.uniform(0, 1, (n, 3)) * coarse
    x, y, z = (np.arange(s, dtype=np.float32) + 0.5 for s in coarse)
    nearest = np.zeros(coarse, np.intp)
    best = np.full(coarse, np.inf, np.float32)
    for i, (sx, sy, sz) in enumerate(seeds):
        d = ((x - sx) ** 2)[:, None, None] + ((y - sy) ** 2)[None, :, None] + \
            ((z - sz) ** 2)[None, None, :]
        closer = d < best
        best[closer], nearest[closer] = d[closer], i
    for axis in range(3):
        nearest = np.repeat(nearest, step, axis=axis)
    return nearest


def _marked(path: str) -> bool:
    try:
        doc = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and MARKER in doc


def previous_demo(path: str) -> list[str]:
    """The files of an earlier demo at ``path``, each layer's info after its data and the
    infos last (empty if there is none): removed in this order, an interrupted removal
    still leaves a folder that a rerun recognises.

    Raises
    ------
    NgShardError
        ``path`` holds something the demo did not write (it is not replaced).
    """
    def foreign(why: str) -> NgShardError:
        return NgShardError(f"{path} is not a folder of `ngshard demo` ({why}); use --force to "
                            f"write the demo there anyway (replacing the files in its "
                            f"{IMAGE}, {SEGMENTATION} and {SYNAPSES} folders)")

    if not os.path.exists(path):
        return []
    data, infos = _scan(path, DEMO_TREE, "", foreign)
    return data + infos


def _scan(path: str, tree: dict, rel: str, foreign) -> tuple[list[str], list[str]]:
    """(data files, infos) of a demo layer folder ``path`` laid out as ``tree``."""
    data, infos, info = [], [], None
    with os.scandir(path) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            name = os.path.join(rel, entry.name)
            if entry.name == "info" and entry.is_file(follow_symlinks=False):
                if not _marked(entry.path):
                    raise foreign(f"{name} is another layer's")
                info = entry.path
            elif entry.is_file(follow_symlinks=False) and _TEMP_FILE.fullmatch(entry.name):
                data.append(entry.path)
            elif entry.name in tree and entry.is_dir(follow_symlinks=False):
                if tree[entry.name] is not None:
                    more, more_infos = _scan(entry.path, tree[entry.name], name, foreign)
                    data += more
                    infos += more_infos
                    continue
                with os.scandir(entry.path) as inner:
                    for e in inner:
                        if not (e.is_file(follow_symlinks=False) and (
                                _DEMO_FILE.fullmatch(e.name) or _TEMP_FILE.fullmatch(e.name))):
                            raise foreign(f"it holds {os.path.join(name, e.name)}")
                        data.append(e.path)
                        if info is None and not os.path.isfile(os.path.join(path, "info")):
                            raise foreign(f"demo files in {name} but no info beside them")
            else:
                raise foreign(f"it holds {name}")
    return data, infos + ([info] if info else [])


def _demo_files_any(path: str, tree: dict | None = None) -> list[str]:
    """With --force: every file directly in the demo's folders, whatever it is, so that
    nothing stale is appended to or mixed in, and the infos last; at the top only its info
    (a layer there would hide the demo's from a viewer)."""
    data, infos = [], []
    top = tree is None
    tree = DEMO_TREE if tree is None else tree
    for name, sub in sorted(tree.items()):
        folder = os.path.join(path, name)
        if not os.path.isdir(folder):
            continue
        if sub is None:
            data += [os.path.join(folder, n) for n in sorted(os.listdir(folder))
                     if os.path.isfile(os.path.join(folder, n))]
        else:
            inner = _demo_files_any(folder, sub)
            data += [n for n in inner if os.path.basename(n) != "info"]
            infos += [n for n in inner if os.path.basename(n) == "info"]
    mine = [os.path.join(path, n) for n in sorted(os.listdir(path))
            if os.path.isfile(os.path.join(path, n)) and (not top or n == "info")]
    return data + [n for n in mine if os.path.basename(n) != "info"] + infos + \
        [n for n in mine if os.path.basename(n) == "info"]


def make_demo(path: str | os.PathLike, shape: tuple[int, int, int] = (256, 256, 128),
              cells: int = 300, segments: int = 5000, seed: int = 0, *, force: bool = False
              ) -> dict[str, str]:
    """Write the sample layers at ``path`` (see the module docstring), replacing a previous
    demo there.

    Parameters
    ----------
    path
        A local folder (made if needed).
    shape, cells, segments, seed
        Volume size (voxels of 8 x 8 x 40 nm), number of Voronoi cells, number of skeletons
        (cells included), random seed.
    force
        Also write into a folder holding other things: its info and every file in the
        demo's folders are replaced; other files stay.

    Returns
    -------
    dict
        The layers' folders: ``{"image": ..., "segmentation": ..., "synapses": ...,
        "skeletons": ..., "mesh": ..., "segment_properties": ...}``.

    Raises
    ------
    NgShardError
        ``path`` holds files the demo did not write, and not ``force``.
    MissingDependencyError
        zmesh (for the meshes) or DracoPy (to encode them) is missing; nothing is written.
    """
    path = os.fspath(path)
    for name in _demo_files_any(path) if force and os.path.isdir(path) else previous_demo(path):
        os.unlink(name)
    rng = np.random.default_rng(seed)
    ids = unique(rng.integers(1, 2**40, segments, dtype=np.uint64))
    chosen = rng.choice(ids, cells, replace=False)
    cell = voronoi_cells(rng, shape, cells)
    walks = walk_skeletons(rng, rng.integers(2, 200, len(ids)), shape)
    skeletons = dict(zip(ids.tolist(), walks))
    skeletons.update((int(chosen[c]), v) for c, v in cell_skeletons(cell, cells).items())
    image = smooth_image(rng, cell, cells)
    labels = chosen[cell]
    for module in ("zmesh", "DracoPy"):  # before writing: the meshes need them
        optional_module(module, "the demo's meshes need", "meshing")
    synapse = synapses(rng, labels)

    folders = {name: os.path.join(path, name) for name in (IMAGE, SEGMENTATION, SYNAPSES)}
    folders.update((name, os.path.join(folders[SEGMENTATION], name)) for name in ATTACHED)
    encoding: Encoding
    for layer, data, encoding in ((SEGMENTATION, labels, "compressed_segmentation"),
                                  (IMAGE, image, "raw")):
        vol = create_volume(folders[layer], dtype=data.dtype, shape=shape,
                            chunk_size=(64, 64, 64), encoding=encoding, resolution=RESOLUTION,
                            sharding="auto")
        # Marked before any chunk is written, so that a rerun after an interruption replaces
        # it; the layers it attaches are named once they are written.
        extra = {MARKER: "sample data; `ngshard demo` replaces it"}
        vol.handle.info = replace(vol.info, extra={**vol.info.extra, **extra})
        write_volume_info(vol.storage, vol.info)
        with vol:
            vol[:] = data
        vol.add_scale(DOWNSAMPLE)

    seg = folders[SEGMENTATION]
    write_skeletons(folders["skeletons"], {k: chain(v) for k, v in skeletons.items()},
                    sharding=DEMO_SPEC, segmentation=seg)
    # the second scale is enough for cells constant over 4 x 4 x 4 voxels (its voxels are
    # 2 x 2 x 1 of the first), and one level of detail (the marching cubes' mesh, no
    # simplification: half the time of two levels) keeps the demo quick
    from .pipelines.meshing import mesh

    mesh(seg, folders["mesh"], scale=1, lods=1, box=64, sharding=MESH_SPEC.to_json(),
         progress=False, overwrite=True, resume=False)
    write_segment_properties(folders["segment_properties"], segmentation=seg,
                             **cell_properties(labels, chosen, np.concatenate(
                                 list(synapse["relationships"].values()))))
    written = write_annotations(folders[SYNAPSES], "point", synapse["geometry"],
                                properties=synapse["properties"],
                                relationships=synapse["relationships"],
                                dimensions={a: [r, "nm"] for a, r in zip("xyz", RESOLUTION)},
                                lower_bound=[0, 0, 0], upper_bound=list(shape),
                                sharding=ANNOTATION_SPEC)
    # marked last: a collection written whole, then claimed as the demo's
    write_info(written.storage, {**written.info, MARKER: extra[MARKER]})
    return folders
