"""``ngshard mesh SEG`` and ``ngshard skeletonize SEG``: meshes and skeletons of a
segmentation's labels, made by tasks over boxes then shards, on a local process pool or a
Dask cluster, and named in the segmentation's info."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from ..errors import SpecError
from ..kinds import LEGACY_MESHES, MESHES, SKELETONS
from .convert import pool_args
from .numbers import ints


def add_commands(command) -> None:
    """The ``mesh`` and ``skeletonize`` subcommands (``command(name, fn, help)`` makes
    one)."""
    p = command("mesh", cmd_mesh, "make multi-resolution meshes of a segmentation's labels "
                "(zmesh marching cubes over task boxes, simplified per level of detail), "
                f"written as a sharded {MESHES} layer (SEG/mesh by "
                "default) and named in SEG's info; an interrupted run resumes")
    _common(p)
    p.add_argument("--lods", type=int, default=3, metavar="N",
                   help="levels of detail (default 3; the coarsest is one node per box)")
    p.add_argument("--reduction", type=int, default=4, metavar="N",
                   help="each level keeps about 1/N of the triangles of the one below "
                        "(default 4)")
    p.add_argument("--simplify", type=int, default=1, metavar="N",
                   help="simplify LOD 0 to about 1/N of its triangles (default 1: the "
                        "marching cubes' mesh; igneous' mesh forge uses 100)")
    p.add_argument("--max-error", type=float, default=40.0, metavar="NM",
                   help="with --simplify, how far (nm) a vertex of LOD 0 may move "
                        "(default 40, doubling per level)")
    p.add_argument("--legacy", action="store_true", help="write single-resolution "
                   f"{LEGACY_MESHES} segments instead")
    p = command("skeletonize", cmd_skeletonize, "make TEASAR skeletons of a segmentation's "
                "labels (kimimaro over task boxes, joined across them), written as a "
                f"sharded {SKELETONS} layer with radius and vertex_types "
                "(SEG/skeletons by default) and named in SEG's info; an interrupted run "
                "resumes")
    _common(p)
    p.add_argument("--teasar", metavar="JSON", help="kimimaro teasar_params overriding its "
                   "defaults, e.g. '{\"scale\": 4, \"const\": 500}'")
    p.add_argument("--dust", type=int, default=0, metavar="VOXELS",
                   help="drop pieces of fewer voxels within a box (default 0: keep all)")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("seg", metavar="SEG", help="a precomputed segmentation, or a zarr array "
                   "or OME-Zarr group of labels (then --dst is needed)")
    p.add_argument("--dst", metavar="URL", help="where the layer goes (default: a folder "
                   "in SEG)")
    p.add_argument("--scale", default="0", metavar="INDEX|KEY",
                   help="the scale to use (default 0, the finest)")
    p.add_argument("--bbox", metavar="X0,Y0,Z0,X1,Y1,Z1",
                   help="only these voxels of the scale (voxel_offset included)")
    p.add_argument("--ids", metavar="ID,ID,...|FILE", help="only these labels (a list, or a "
                   "file of them, one per line)")
    p.add_argument("--box", default="256", metavar="N|X,Y,Z",
                   help="voxels per task box edge (default 256)")
    p.add_argument("--sharding", default="auto", metavar="auto|JSON",
                   help="the layer's sharding: auto (sized by the segments found) or a spec "
                        "(JSON text or file)")
    pool_args(p, "the layer", reach="SEG and the layer")
    p.add_argument("--force", action="store_true", help="replace a layer already there")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _options(args: argparse.Namespace) -> dict:
    box = ints(args.box, "--box")
    if box is None or len(box) not in (1, 3):
        raise SpecError(f"--box must be one integer or three, not {args.box!r}")
    ids = None
    if args.ids is not None:
        text = Path(args.ids).read_text() if os.path.isfile(args.ids) else args.ids
        try:
            ids = np.array([int(v, 0) for v in text.replace(",", " ").split()], np.uint64)
        except (ValueError, OverflowError):
            raise SpecError(f"--ids must be uint64 labels, not {args.ids!r}") from None
    sharding = args.sharding
    if sharding != "auto" and os.path.isfile(sharding):
        sharding = Path(sharding).read_text()
    return {"dst": args.dst, "scale": int(args.scale) if args.scale.isdigit() else args.scale,
            "bbox": ints(args.bbox, "--bbox", 6), "ids": ids,
            "box": box[0] if len(box) == 1 else box, "sharding": sharding,
            "workers": args.workers, "progress": not args.quiet and sys.stderr.isatty(),
            "resume": not args.no_resume, "overwrite": args.force}


def _run(fn, args: argparse.Namespace, what: str, **extra) -> int:
    from ..pipelines.executors import dask_client

    options = _options(args)
    client = dask_client(args.dask) if args.dask else None
    try:
        stats = fn(args.seg, executor=client.get_executor() if client else None, **options,
                   **extra)
    finally:
        if client is not None:
            client.close()
    done = f", {stats['skipped']} done before" if stats["skipped"] else ""
    attached = " (named in its info)" if stats["attached"] else ""
    print(f"{what} {stats['segments']} segments of {args.seg}{attached}: "
          f"{stats['boxes']} boxes, {stats['shards']} shards, {stats['run']} tasks run{done}")
    return 0


def cmd_mesh(args: argparse.Namespace) -> int:
    from ..pipelines.meshing import mesh

    return _run(mesh, args, "meshed", lods=args.lods, reduction=args.reduction,
                simplify=args.simplify, max_error=args.max_error, legacy=args.legacy)


def cmd_skeletonize(args: argparse.Namespace) -> int:
    from ..pipelines.skeletonizing import skeletonize

    teasar = None
    if args.teasar:
        try:
            teasar = json.loads(args.teasar)
        except ValueError as e:
            raise SpecError(f"--teasar must be a JSON object ({e})") from None
    return _run(skeletonize, args, "skeletonized", teasar=teasar,
                dust_threshold=args.dust)
