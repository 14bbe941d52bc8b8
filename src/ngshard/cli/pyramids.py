"""``ngshard downsample LAYER``: coarser levels of a precomputed volume, a whole pyramid in
one pass, on a local process pool or a Dask cluster, resumable."""

from __future__ import annotations

import argparse
import sys

from .convert import _ints


def add_commands(command) -> None:
    """The ``downsample`` subcommand (``command(name, fn, help)`` makes one)."""
    p = command("downsample", cmd_downsample, "add coarser levels to a precomputed volume: "
                "near-isotropic factors by default (2x2x1 until the voxel is near "
                "isotropic, then 2x2x2), every level of a task's box made from one read of "
                "it, whole shards; an interrupted run resumes where it stopped")
    p.add_argument("url", metavar="LAYER", help="a precomputed image or segmentation")
    p.add_argument("--levels", type=int, metavar="N", help="how many levels (default: until "
                   "the coarsest fits in one chunk)")
    p.add_argument("--factor", metavar="X,Y,Z", help="the same factor for every level "
                   "instead of the near-isotropic rule")
    p.add_argument("--method", choices=("mean", "mode", "min", "max", "stride"),
                   help="default mode for a segmentation, mean otherwise")
    p.add_argument("--sparse", action="store_true", help="mode where background (0) wins "
                   "a block only when it holds nothing else (thin neurites survive)")
    p.add_argument("--scale", metavar="INDEX|KEY", help="the scale to start from (default "
                   "the coarsest there)")
    p.add_argument("--sharding", choices=("auto", "none"), default="auto",
                   help="auto: sharded if the source scale is; none: a file per chunk")
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes "
                   "(default: one per core)")
    p.add_argument("--dask", metavar="ADDRESS", help="run the tasks on the Dask scheduler "
                   "at ADDRESS (needs ngshard[dask])")
    p.add_argument("--no-resume", action="store_true", help="start afresh even if an "
                   "interrupted run of the same job is recorded in LAYER")
    p.add_argument("--force", action="store_true", help="replace levels of the same keys")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def cmd_downsample(args: argparse.Namespace) -> int:
    from ..pipelines import downsample
    from ..pipelines.executors import dask_client

    scale = args.scale
    if scale is not None and scale.lstrip("-").isdigit():
        scale = int(scale)
    client = dask_client(args.dask) if args.dask else None
    try:
        stats = downsample(args.url, levels=args.levels, factor=_ints(args.factor, "--factor", 3),
                           method=args.method, sparse=args.sparse, scale=scale,
                           sharding=args.sharding, workers=args.workers,
                           executor=client.get_executor() if client else None,
                           progress=not args.quiet and sys.stderr.isatty(),
                           resume=not args.no_resume, overwrite=args.force)
    finally:
        if client is not None:
            client.close()
    done = f", {stats['skipped']} done before" if stats["skipped"] else ""
    print(f"downsampled {args.url}: levels {', '.join(stats['levels']) or 'none'}; "
          f"{stats['run']} tasks{done}, {stats['chunks']} chunks, {stats['bytes']} bytes")
    return 0
