"""``ngshard demo``: write the built-in sample layer and show what is in it."""

from __future__ import annotations

import argparse
import os

from ..sharded import open_kv
from ..volume import open_volume
from .store import cmd_info


def cmd_demo(args: argparse.Namespace) -> None:
    from ..demo import make_demo

    path = os.path.abspath(args.dir)
    skeletons = os.path.join(path, "skeletons")
    make_demo(path, force=args.force)  # refuses before writing anything
    print(f"wrote a sample segmentation layer with skeletons to {path}")
    for url in (path, skeletons):
        cmd_info(argparse.Namespace(url=url, spec=None, json=False, scale=None))
    vol = open_volume(path)
    labels = vol[0:256:64, 128, 64, 0]
    print(f"segment IDs at x=0,64,128,192, y=128, z=64:  "
          f"{', '.join(map(str, labels.tolist()))}")
    value = open_kv(skeletons)[int(labels[0])]
    print(f"its skeleton ({skeletons}):  {len(value)} bytes, "
          f"{int.from_bytes(value[:4], 'little')} vertices, inside its segment")
    print(f"try:  ngshard verify {path};  ngshard ls {skeletons} | head")
