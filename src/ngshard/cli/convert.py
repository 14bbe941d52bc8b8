"""``ngshard convert SRC DST``: zarr (an array or an OME-Zarr group) -> precomputed, or a
precomputed layer -> an OME-Zarr 0.5 group of sharded Zarr v3 arrays, on a local process pool
or a Dask cluster."""

from __future__ import annotations

import argparse
import shlex
import sys

from ..errors import Interrupted
from .numbers import floats, ints
from .storage_args import storage_options


def add_command(command) -> None:
    """The ``convert`` subcommand (``command(name, fn, help)`` makes one)."""
    p = command("convert", cmd_convert, "convert a zarr array or OME-Zarr group, a TIFF "
                "stack, an HDF5 or N5 dataset, to a precomputed layer, or a precomputed "
                "layer to an OME-Zarr 0.5 group of sharded Zarr v3 arrays (by what SRC "
                "holds); an interrupted "
                "conversion resumes where it stopped", source=True)
    p.add_argument("src", metavar="SRC", help="zarr array or group, precomputed layer, a "
                   "TIFF stack (a glob or folder of 2-D sections, or a multi-page TIFF), an "
                   "HDF5 dataset (FILE.h5 holding one, or FILE.h5/path/in/file; z y x "
                   "unless --axes) or an N5 dataset's folder")
    p.add_argument("url", metavar="DST", help="where the result goes")
    p.add_argument("--axes", metavar="LETTERS",
                   help="the source's axes in order, from x y z c t (e.g. czyx); default: "
                        "OME metadata or dimension names, else the last three are z y x and "
                        "a fourth from the end is channels")
    p.add_argument("--resolution", metavar="X,Y,Z", help="the voxel size (of the finest "
                   "level) where the source's metadata gives none, in --units (default nm; "
                   "a TIFF stack, HDF5 or N5 dataset: nm, default the OME-TIFF's or the "
                   "dataset's resolution attribute, else 1,1,1)")
    p.add_argument("--offset", metavar="X,Y,Z", help="the voxel offset (of the finest "
                   "level) where the source's metadata gives none")
    p.add_argument("--units", metavar="UNIT", help="the length unit of --resolution, or of "
                   "OME scales without units: nm (default), um, mm, ...")
    p.add_argument("--chunk-size", metavar="X,Y,Z", help="precomputed chunk size (default: "
                   "the zarr inner chunk when it is between 8 and 512, else 64,64,64)")
    p.add_argument("--encoding", help="precomputed: raw, compressed_segmentation, jpeg, png "
                   "(default compressed_segmentation for labels, raw otherwise); zarr: "
                   "zstd, gzip, raw")
    p.add_argument("--sharding", default="auto", metavar="auto|none|JSON",
                   help="precomputed sharding: auto (box shards), none (a file per chunk), or "
                        "a spec (JSON text or file)")
    p.add_argument("--scales", metavar="I,J,...", help="only these source levels")
    p.add_argument("--downsample", nargs="?", const=True, default=False, type=int,
                   metavar="N", help="add coarser scales (at most N; near-isotropic factors, as "
                   "`ngshard downsample`) to a single-level source")
    pool_args(p, "DST", reach="DST", job="conversion")
    p.add_argument("--force", action="store_true", help="replace what DST holds (a layer, "
                   "a zarr array or group, another conversion's unfinished run): all of it "
                   "is removed first; without --force that is refused")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def pool_args(p: argparse.ArgumentParser, where: str, *, reach: str | None = None,
              job: str = "job") -> None:
    """``--workers``, ``--dask`` and ``--no-resume`` of a command that runs a job: ``where``
    its record is, ``reach`` what the Dask workers must reach."""
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes "
                   "(default: one per core)")
    note = f"; {reach} must be reachable from the workers" if reach else ""
    p.add_argument("--dask", metavar="ADDRESS", help="run the tasks on the Dask scheduler "
                   f"at ADDRESS (needs ngshard[dask]{note})")
    p.add_argument("--no-resume", action="store_true", help="start afresh even if an "
                   f"interrupted run of the same {job} is recorded in {where}")


def cmd_convert(args: argparse.Namespace) -> int:
    from ..pipelines import convert
    from ..pipelines.executors import dask_client

    client = dask_client(args.dask) if args.dask else None
    try:
        stats = convert(args.src, args.url, axes=args.axes, encoding=args.encoding,
                        chunk_size=ints(args.chunk_size, "--chunk-size", 3),
                        scales=ints(args.scales, "--scales"), sharding=args.sharding,
                        downsample=args.downsample, workers=args.workers,
                        executor=client.get_executor() if client else None,
                        progress=not args.quiet and sys.stderr.isatty(),
                        resume=not args.no_resume, overwrite=args.force,
                        storage_options=storage_options(args),
                        src_storage_options=storage_options(args, source=True),
                        resolution=floats(args.resolution, "--resolution"),
                        offset=ints(args.offset, "--offset", 3, signed=True),
                        units=args.units)
    except Interrupted as e:  # the command that resumes it (--no-resume would start afresh)
        again = shlex.join(["ngshard", *(a for a in args.argv if a != "--no-resume")])
        raise Interrupted(f"{e}: {again}") from None
    finally:
        if client is not None:
            client.close()
    done = f", {stats['skipped']} done before" if stats["skipped"] else ""
    print(f"converted {args.src} -> {args.url}: {stats['run']} tasks{done}, "
          f"{stats['chunks']} chunks, {stats['bytes']} bytes")
    return 0
