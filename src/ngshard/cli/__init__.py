"""The ``ngshard`` command line. Exit status: 0 success, 1 an error (one line on standard error;
``--debug`` shows the traceback), 2 a usage error, 3 a key that is not there (``get``, ``rm``)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import traceback
import warnings
from collections.abc import Sequence

from .. import __version__
from ..errors import Interrupted, NgShardError
from .attach import add_command as add_attach_command
from .convert import add_command as add_convert_command
from .demo import add_command as add_demo_command
from .pyramids import add_commands as add_pyramid_commands
from .segments import add_commands as add_segment_commands
from .serve import add_commands as add_serve_commands
from .storage_args import add_storage_args
from .store import (
    KeyNotFound,
    cmd_compact,
    cmd_get,
    cmd_import,
    cmd_info,
    cmd_ls,
    cmd_put,
    cmd_rm,
    cmd_verify,
)

EXIT_ERROR, EXIT_USAGE, EXIT_MISSING_KEY = 1, 2, 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ngshard", description=(
        "Neuroglancer precomputed sharded stores and volumes. URL is a local path, any "
        "fsspec URL (file://, memory://, http(s)://, s3://, gs://), or a Neuroglancer source "
        "around one (precomputed://gs://..., zarr://..., gs://...|zarr3:). Exit status: 0 "
        "success, 1 error, 2 usage error, 3 key not found."))
    parser.add_argument("--version", action="version", version=f"ngshard {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, fn, help: str, *, storage: bool = True,
                source: bool = False) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(fn=fn)
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks of errors")
        if storage:
            add_storage_args(p, source=source)
        return p

    def store_args(p: argparse.ArgumentParser, scale: str) -> None:
        p.add_argument("url", metavar="URL", help="a sharded store, or a volume's root")
        p.add_argument("--spec", metavar="JSON|FILE",
                       help="sharding spec (JSON text or file) when URL has no info file")
        p.add_argument("--scale", metavar="INDEX|KEY", help=f"for a volume root: {scale}")

    def write_args(p: argparse.ArgumentParser) -> None:
        store_args(p, "the scale whose store to change (needed there)")
        p.add_argument("--strategy", choices=("auto", "append", "rewrite"), default="auto",
                       help="append to local shards, or rewrite them whole (default: append "
                            "for local files, rewrite elsewhere)")
        p.add_argument("--plan", action="store_true", help="print the commit plan first")
        quiet(p)

    def quiet(p: argparse.ArgumentParser) -> None:
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")

    p = command("info", cmd_info, "describe a sharded store (spec, shards, keys, sizes, "
                "garbage), a precomputed volume (scales, chunking, sharding, encoding, and "
                "the stores of its sharded scales), or a skeleton, mesh, annotation or "
                "segment properties layer")
    store_args(p, "describe only this scale's store (default: every scale)")
    p.add_argument("--json", action="store_true", help="print JSON")
    quiet(p)
    p = command("ls", cmd_ls, "list the keys of a store (or of a volume's scales), one per line")
    store_args(p, "list only this scale's keys (default: every sharded scale)")
    p.add_argument("--sort", action="store_true", help="sort numerically (default: shard order, "
                   "streamed shard by shard; --sort holds every key in memory)")
    quiet(p)
    p.add_argument("--chunks", action="store_true",
                   help="for volume scales: print each chunk's grid position (x y z, "
                        "0-based from voxel_offset) after its Morton key")
    p = command("get", cmd_get, "write the value of one key to stdout or a file; for a "
                "skeleton, mesh or annotation layer, --as decodes it")
    store_args(p, "the scale whose store holds KEY (default: scale 0)")
    p.add_argument("key", metavar="KEY", help="uint64 key, decimal or 0x hex")
    p.add_argument("--as", dest="as_", choices=("json", "obj", "ply", "swc"),
                   help="decode the segment: json (any layer), swc (skeletons), obj or ply "
                        "(meshes)")
    p.add_argument("--lod", type=int, default=0, help="mesh level of detail (0: finest)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p = command("put", cmd_put, "set the value of one key (creates the store if needed)")
    write_args(p)
    p.add_argument("key", metavar="KEY", help="uint64 key, decimal or 0x hex")
    p.add_argument("file", metavar="FILE", help="file holding the value, - for stdin")
    p = command("rm", cmd_rm, "delete keys")
    write_args(p)
    p.add_argument("keys", metavar="KEY", nargs="+", help="uint64 keys")
    p.add_argument("-f", "--force", action="store_true", help="ignore absent keys")
    p = command("import", cmd_import, "add many keys: from a directory of files named by key "
                "(decimal, leading zeros allowed, or 0x hex), or a JSON-lines file of "
                "{\"key\": KEY, \"value\": BASE64} (- for stdin)")
    write_args(p)
    p.add_argument("source", metavar="DIR|NDJSON")
    p = command("verify", cmd_verify, "check every shard, index, key and chunk of a store, or "
                "decode every chunk of every scale of a volume; exit 1 on any problem")
    store_args(p, "check only this scale (default: every scale)")
    quiet(p)
    p = command("compact", cmd_compact, "rewrite shards without the garbage left by appends "
                "(every sharded scale of a volume)")
    store_args(p, "compact only this scale's store (default: every sharded scale)")
    quiet(p)
    add_demo_command(command)
    add_attach_command(command)
    add_convert_command(command)
    add_pyramid_commands(command)
    add_segment_commands(command)
    add_serve_commands(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # to say how to resume
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return args.fn(args) or 0
    except BrokenPipeError:  # e.g. `ngshard ls URL | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Interrupted as e:  # a job stopped by Ctrl-C: what was left and how to resume
        print(f"ngshard: {e}: {resume_command(args.argv)}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("ngshard: interrupted", file=sys.stderr)
        return 130
    except (NgShardError, OSError) as e:
        if args.debug:
            traceback.print_exc()
        print(f"ngshard: error: {_message(e, getattr(args, 'url', None))}", file=sys.stderr)
        return EXIT_MISSING_KEY if isinstance(e, KeyNotFound) else EXIT_ERROR


def resume_command(argv: Sequence[str]) -> str:
    """The command line that resumes an interrupted job run by ``ngshard argv``: the same
    command without ``--no-resume`` (which would start afresh), quoted for a shell."""
    return shlex.join(["ngshard", *(a for a in argv if a != "--no-resume")])


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings (a server that ignores Range requests, ...) as one line, like errors."""
    print(f"ngshard: warning: {message}", file=sys.stderr)


def _message(e: BaseException, url: str | None) -> str:
    """One line for any expected failure; OSErrors name their file (or the URL at work)."""
    if isinstance(e, NgShardError) and not (isinstance(e, OSError) and e.strerror):
        return str(e)
    where = getattr(e, "filename", None) or url
    what = getattr(e, "strerror", None) or str(e) or type(e).__name__
    return f"{where}: {what}" if where else what


if __name__ == "__main__":
    sys.exit(main())
