"""``ngshard downsample LAYER`` (coarser levels of a precomputed volume, a whole pyramid in
one pass) and ``ngshard transfer SRC DST`` (precomputed -> precomputed: re-shard, re-chunk,
re-encode, cut, then downsample), on a local process pool or a Dask cluster, resumable."""

from __future__ import annotations

import argparse
import sys

from .convert import pool_args
from .numbers import ints
from .storage_args import storage_options


def _pool_args(p: argparse.ArgumentParser, where: str) -> None:
    pool_args(p, where)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", choices=("mean", "mode", "min", "max", "stride"),
                   help="default mode for a segmentation, mean otherwise")
    p.add_argument("--sparse", action="store_true", help="mode where background (0) wins "
                   "a block only when it holds nothing else (thin neurites survive)")


def add_commands(command) -> None:
    """The ``downsample`` and ``transfer`` subcommands (``command(name, fn, help)`` makes
    one)."""
    p = command("downsample", cmd_downsample, "add coarser levels to a precomputed volume: "
                "near-isotropic factors by default (2x2x1 until the voxel is near "
                "isotropic, then 2x2x2), every level of a task's box made from one read of "
                "it, whole shards; an interrupted run resumes where it stopped")
    p.add_argument("url", metavar="LAYER", help="a precomputed image or segmentation")
    p.add_argument("--levels", type=int, metavar="N", help="how many levels (default: until "
                   "the coarsest fits in one chunk)")
    p.add_argument("--factor", metavar="X,Y,Z", help="the same factor for every level "
                   "instead of the near-isotropic rule")
    _method_args(p)
    p.add_argument("--scale", metavar="INDEX|KEY", help="the scale to start from (default "
                   "the coarsest there)")
    p.add_argument("--sharding", choices=("auto", "none"), default="auto",
                   help="auto: sharded if the source scale is; none: a file per chunk")
    p.add_argument("--force", action="store_true", help="replace levels of the same keys")
    _pool_args(p, "LAYER")
    p = command("transfer", cmd_transfer, "copy a precomputed layer into a new one: an image "
                "or segmentation re-sharded, re-chunked, re-encoded, cut to a box, a subset "
                "of its scales, then downsampled, in whole-shard tasks (encoded chunks "
                "carried as they are where the chunk grid and encoding stay); skeletons "
                "and meshes between a file per segment and shards, legacy meshes into "
                "multi-resolution ones (--multires)", source=True)
    p.add_argument("src", metavar="SRC", help="a precomputed layer")
    p.add_argument("url", metavar="DST", help="the new layer")
    p.add_argument("--sharding", default="auto", metavar="auto|none|JSON",
                   help="auto (box shards), none (a file per chunk or segment), or a spec "
                        "(JSON text or file)")
    p.add_argument("--chunk-size", metavar="X,Y,Z", help="new chunk size (default the "
                   "source's)")
    p.add_argument("--encoding", help="new chunk encoding (default the source's)")
    p.add_argument("--bbox", metavar="X0,Y0,Z0,X1,Y1,Z1", help="the box to keep, in voxels "
                   "of the first scale copied (voxel_offset included)")
    p.add_argument("--scales", metavar="I,J,...", help="only these source scales")
    p.add_argument("--downsample", nargs="?", const=True, default=False, type=int,
                   metavar="N", help="add coarser levels (at most N) below the last scale, "
                   "as `ngshard downsample`")
    _method_args(p)
    p.add_argument("--multires", action="store_true", help="legacy meshes: write them as "
                   "multi-resolution (Draco) meshes, each segment's "
                   "fragments joined")
    p.add_argument("--lods", type=int, metavar="N", help="with --multires: levels of detail "
                   "(default 3 where zmesh is installed, else 1)")
    p.add_argument("--force", action="store_true", help="replace what DST holds")
    _pool_args(p, "DST")


def _run(fn, args: argparse.Namespace, **kwargs) -> dict:
    """``fn(**kwargs)`` on the local pool or the Dask cluster ``--dask`` names."""
    from ..pipelines.executors import dask_client

    client = dask_client(args.dask) if args.dask else None
    try:
        return fn(workers=args.workers, executor=client.get_executor() if client else None,
                  progress=not args.quiet and sys.stderr.isatty(),
                  resume=not args.no_resume, **kwargs)
    finally:
        if client is not None:
            client.close()


def _summary(stats: dict) -> str:
    done = f", {stats['skipped']} done before" if stats["skipped"] else ""
    return f"{stats['run']} tasks{done}, {stats['chunks']} chunks, {stats['bytes']} bytes"


def cmd_downsample(args: argparse.Namespace) -> int:
    from ..pipelines import downsample

    scale = args.scale
    if scale is not None and scale.lstrip("-").isdigit():
        scale = int(scale)
    stats = _run(downsample, args, url=args.url, levels=args.levels,
                 factor=ints(args.factor, "--factor", 3), method=args.method,
                 sparse=args.sparse, scale=scale, sharding=args.sharding,
                 overwrite=args.force, storage_options=storage_options(args))
    print(f"downsampled {args.url}: levels {', '.join(stats['levels']) or 'none'}; "
          f"{_summary(stats)}")
    return 0


def cmd_transfer(args: argparse.Namespace) -> int:
    from ..pipelines import transfer

    box = ints(args.bbox, "--bbox", 6, signed=True)
    stats = _run(transfer, args, src=args.src, dst=args.url,
                 scales=ints(args.scales, "--scales"), bbox=box and (box[:3], box[3:]),
                 chunk_size=ints(args.chunk_size, "--chunk-size", 3),
                 encoding=args.encoding, sharding=args.sharding,
                 downsample=args.downsample, method=args.method, sparse=args.sparse,
                 multires=args.multires, lods=args.lods,
                 overwrite=args.force, storage_options=storage_options(args),
                 src_storage_options=storage_options(args, source=True))
    print(f"transferred {args.src} -> {args.url}: {_summary(stats)}")
    return 0
