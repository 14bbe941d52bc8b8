"""``ngshard demo``: write the built-in sample layers, show what is in them, then view them
(``--no-view``: only write). Without the ``view`` extra, it says in one line how to get the
viewer and exits 0."""

from __future__ import annotations

import argparse
import os

from ..errors import MissingDependencyError
from ..sharded import open_kv
from ..volume import open_volume
from .store import cmd_info


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import make_demo

    path = os.path.abspath(args.dir)
    folders = make_demo(path, force=args.force)  # refuses before writing anything
    print(f"wrote a sample image layer and a segmentation layer with skeletons to {path}")
    for url in (folders["image"], folders["segmentation"], folders["skeletons"]):
        cmd_info(argparse.Namespace(url=url, spec=None, json=False, scale=None))
    vol = open_volume(folders["segmentation"])
    labels = vol[0:256:64, 128, 64, 0]
    print(f"segment IDs at x=0,64,128,192, y=128, z=64:  "
          f"{', '.join(map(str, labels.tolist()))}")
    value = open_kv(folders["skeletons"])[int(labels[0])]
    print(f"its skeleton ({folders['skeletons']}):  {len(value)} bytes, "
          f"{int.from_bytes(value[:4], 'little')} vertices, inside its segment")
    if args.no_view:
        print(f"look at it:  ngshard view {path}", flush=True)
        return 0
    from ..server.view import INSTALL_HINT, open_viewer
    from .serve import show

    try:
        viewing = open_viewer(path)
    except MissingDependencyError:
        print(f"to look at it in Neuroglancer: {INSTALL_HINT}, then: ngshard view {path} "
              f"(or: ngshard serve {path}, and open its sources in any Neuroglancer)",
              flush=True)
        return 0
    return show(viewing, path, browser=not args.no_browser)
