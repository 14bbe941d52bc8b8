"""``ngshard serve`` and ``ngshard view``: serve a precomputed tree over HTTP and print its
Neuroglancer sources; with ``view``, a Neuroglancer client showing it too. Both run until
Ctrl-C (or SIGTERM), which stops them cleanly."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from ..limits import SERVE_PROCESSES
from ..server import Server, serve
from ..server.protocol import Request
from ..server.respond import Response
from .numbers import floats
from .storage_args import storage_options

_SHOWN = 40  # layers printed at most


def print_sources(server: Server, root: str) -> None:
    """What is served where, and the Neuroglancer source of each layer found."""
    print(f"serving {root} at {server.url} (read only; Ctrl-C stops)", flush=True)
    if server.host in ("", "0.0.0.0", "::"):
        print(f"  (listening on every interface: from another machine, use this machine's "
              f"address for {server.url.split('//')[1].rsplit(':', 1)[0]})")
    if not server.layers:
        print("  no precomputed layers found under it (its files are served all the same)")
    shown = server.layers[:_SHOWN]
    width = max([len(layer.path or ".") for layer in shown] + [8])
    for layer in shown:
        source = layer.source(server.url)
        what = source or f"({layer.kind.replace('_', ' ')}: not a layer Neuroglancer opens)"
        extra = f"  ({layer.kind}; with {', '.join(layer.attached)})" if layer.attached else \
            f"  ({layer.kind})" if source else ""
        print(f"  {layer.path or '.':<{width}}  {what}{extra}")
    if len(server.layers) > len(shown):
        print(f"  ... and {len(server.layers) - len(shown)} more")
    sys.stdout.flush()


def _access_log(request: Request | None, response: Response) -> None:
    if request is None:
        print(f"ngshard: {response.status} (unparsable request)", file=sys.stderr)
        return
    rng = request.headers.get("range")
    print(f"ngshard: {response.status} {request.method} {request.target}"
          f"{' ' + rng if rng else ''}", file=sys.stderr, flush=True)


def run_until_interrupted(announce, close) -> int:
    """Call ``announce`` (print where things are), wait for Ctrl-C or SIGTERM, then call
    ``close``; exit status 0. The signals are caught before anything is announced, so a
    client that acts on the announcement can stop us at once."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        announce()
        while not stop.wait(3600):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        close()
    print("stopped", flush=True)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    server = serve(args.url, args.host, args.port, listing=args.listing,
                   storage_options=storage_options(args),
                   log=_access_log if args.verbose else None,
                   processes=args.processes)
    return run_until_interrupted(lambda: print_sources(server, args.url), server.close)


def cmd_view(args: argparse.Namespace) -> int:
    from ..server.view import open_viewer

    viewing = open_viewer(args.url, args.host, args.port, args.viewer_port,
                          resolution=floats(args.resolution, "--resolution"),
                          storage_options=storage_options(args))
    return show(viewing, args.url, browser=not args.no_browser)


def show(viewing, root: str, *, browser: bool, sources: bool = True) -> int:
    """Print where the data (with ``sources``, every layer's source) and the viewer are,
    open the viewer if asked and possible, and serve until interrupted."""
    from ..server.view import open_browser

    def announce() -> None:
        if sources:
            print_sources(viewing.server, root)
        for notice in viewing.notices:
            print(f"note: {notice}")
        print(f"viewer: {viewing.url}", flush=True)
        if browser and open_browser(viewing.url):
            print("(opened in your browser)", flush=True)

    return run_until_interrupted(announce, viewing.close)


def add_commands(command) -> None:
    """The ``serve`` and ``view`` subcommands (``command(name, fn, help)`` makes one)."""
    p = command("serve", cmd_serve, "serve a precomputed tree (volumes, sharded stores, "
                "skeletons, meshes, annotations) over HTTP with byte ranges and CORS, and print "
                "a Neuroglancer source for each layer found; Ctrl-C stops")
    where(p)
    p.add_argument("--listing", action="store_true",
                   help="answer requests for a folder with a list of its files (off: 404)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="log each request to stderr (every request is then answered in "
                        "Python: slower)")
    p.add_argument("--processes", type=int, metavar="N",
                   help="processes serving a local folder, as nginx's worker_processes "
                        f"(default: one per core, at most {SERVE_PROCESSES}; a store that is "
                        "not a local folder is served from one)")
    p = command("view", cmd_view, "serve a precomputed tree and a Neuroglancer viewer whose "
                "state holds its layers; print (and open, when a browser is there) the viewer's "
                "URL; Ctrl-C stops. Needs: pip install 'ngshard[view]'")
    where(p)
    p.add_argument("--viewer-port", type=int, default=0, metavar="PORT",
                   help="the viewer's port (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="only print the viewer's URL")
    p.add_argument("--resolution", metavar="X,Y,Z", help="nm per voxel of the layers whose "
                   "metadata has no units (plain zarr arrays; default 1 nm, with a notice)")


def where(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", metavar="PATH|URL", help="a local folder or any fsspec URL (also "
                   "inside precomputed:// or zarr://)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=0, help="port for the data (default: a free one)")
