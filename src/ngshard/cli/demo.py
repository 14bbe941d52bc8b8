"""``ngshard demo``: write the built-in sample layers, then view them (``--no-view``: only
write). Quiet by default: what was written where, and the viewer's link; ``--verbose`` adds
what is in each layer and every source served. What the demo needs and lacks (the viewer
client, zmesh and DracoPy for the meshes: the ``demo`` extra) it installs with pip first,
saying so in one line (``--no-install``: it says what to install instead)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys

from ..errors import MissingDependencyError
from .store import cmd_info

#: import name -> what pip installs (the ``demo`` extra of pyproject.toml).
NEEDS = {"zmesh": "zmesh>=1.7", "DracoPy": "DracoPy>=2.0", "neuroglancer": "neuroglancer>=2.40"}
#: What to install by hand where the demo does not.
INSTALL_HINT = "pip install 'ngshard[demo]'"


def missing(view: bool = True) -> list[str]:
    """The requirements of :data:`NEEDS` not importable here (the viewer's only when
    ``view``)."""
    out = []
    for module, requirement in NEEDS.items():
        if module == "neuroglancer" and not view:
            continue
        found = sys.modules.get(module, ...)
        if found is None or (found is ... and importlib.util.find_spec(module) is None):
            out.append(requirement)
    return out


def install(requirements: list[str]) -> None:
    """Install ``requirements`` into this Python with pip, quietly.

    Raises
    ------
    MissingDependencyError
        pip failed (its last line says why).
    """
    print(f"installing what the demo needs: {', '.join(requirements)} (once)", flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *requirements],
                          capture_output=True, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["pip failed"])[-1]
        raise MissingDependencyError(f"could not install {', '.join(requirements)} ({why}): "
                                     f"{INSTALL_HINT}")
    importlib.invalidate_caches()


def cmd_demo(args: argparse.Namespace) -> int:
    from ..demo import make_demo

    path = os.path.abspath(args.dir)
    lacking = missing(view=not args.no_view)
    if lacking and not args.no_install:
        install(lacking)
    elif any(not r.startswith("neuroglancer") for r in lacking):
        raise MissingDependencyError(f"the demo's meshes need {', '.join(lacking)}: "
                                     f"{INSTALL_HINT}")
    folders = make_demo(path, force=args.force)  # refuses before writing anything
    print(f"wrote the demo to {path}: an image, a segmentation with meshes, skeletons and "
          f"segment properties, and synapse annotations")
    if args.verbose:
        for name in ("image", "segmentation", "skeletons", "mesh", "segment_properties",
                     "synapses"):
            print(f"\n{name} ({folders[name]}):")
            cmd_info(argparse.Namespace(url=folders[name], spec=None, json=False, scale=None,
                                        quiet=True))
    if args.no_view:
        print(f"look at it:  ngshard view {path}", flush=True)
        return 0
    from ..server.view import open_viewer
    from .serve import show

    try:
        viewing = open_viewer(path)
    except MissingDependencyError:
        print(f"to look at it in Neuroglancer: {INSTALL_HINT}, then: ngshard view {path} "
              f"(or: ngshard serve {path}, and open its sources in any Neuroglancer)",
              flush=True)
        return 0
    return show(viewing, path, browser=not args.no_browser, sources=args.verbose)


def add_command(command) -> None:
    """The ``demo`` subcommand (``command(name, fn, help)`` makes one)."""
    p = command("demo", cmd_demo, "write sample layers (a sharded image; a segmentation with "
                "multi-resolution meshes, skeletons and segment properties; synapse "
                "annotations), then view them in Neuroglancer (as `ngshard view` does), "
                "installing what that needs first; Ctrl-C stops", storage=False)
    p.add_argument("dir", nargs="?", default="ngshard-demo", help="where (default ./ngshard-demo)")
    p.add_argument("--force", action="store_true", help="write into a folder that holds other "
                   "things too, replacing its info and the files in its image, segmentation "
                   "and synapses folders (a previous demo is replaced without --force)")
    p.add_argument("--no-view", action="store_true", help="only write the data")
    p.add_argument("--no-browser", action="store_true", help="only print the viewer's URL")
    p.add_argument("--no-install", action="store_true", help="do not pip install what is "
                   "missing (the viewer client, zmesh, DracoPy); say what to install instead")
    p.add_argument("-v", "--verbose", action="store_true", help="also describe each layer "
                   "written and list every source served")

