"""``ngshard attach SEGMENTATION``: name meshes, skeletons and segment properties in a
segmentation's info (:func:`ngshard.attach`), so that Neuroglancer shows them with it."""

from __future__ import annotations

import argparse

from ..errors import SpecError
from ..layers.attach import attach


def cmd_attach(args: argparse.Namespace) -> int:
    given = {"meshes": args.mesh, "skeletons": args.skeletons,
             "segment_properties": args.segment_properties}
    if all(v is None for v in given.values()):
        raise SpecError("nothing to attach: give --mesh, --skeletons or --segment-properties")
    info = attach(args.url, **given)
    names = {"meshes": "mesh", "skeletons": "skeletons",
             "segment_properties": "segment_properties"}
    done = ", ".join(f"{names[k]} = {info[names[k]]!r}" for k, v in given.items()
                     if v is not None)
    print(f"{args.url}: info now names {done}")
    return 0


def add_command(command) -> None:
    """The ``attach`` subcommand (``command(name, fn, help)`` makes one)."""
    p = command("attach", cmd_attach, "record meshes, skeletons and segment properties in a "
                "segmentation's info (as paths relative to it), so that Neuroglancer shows "
                "them with its segments", storage=False)
    p.add_argument("url", metavar="SEGMENTATION", help="the segmentation volume's folder")
    p.add_argument("--mesh", metavar="PATH|URL", help="a mesh layer (multi-resolution or "
                   "legacy)")
    p.add_argument("--skeletons", metavar="PATH|URL", help="a skeleton layer")
    p.add_argument("--segment-properties", metavar="PATH|URL",
                   help="a segment properties folder")
