"""The ``ngshard`` command line: inspect and read sharded stores from a shell."""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
from collections.abc import Iterator, Sequence

from tqdm.auto import tqdm

from .errors import NgShardError
from .kv import ShardedKV, open_kv
from .spec import check_key
from .storage import open_storage
from .verify import verify_kv, verify_volume
from .volume import Volume, open_volume
from .volume.info import VolumeInfo


def _parse_key(text: str) -> int:
    try:
        return check_key(int(text, 0))
    except ValueError:
        raise NgShardError(f"bad key {text!r}: expected an integer in [0, 2**64) "
                           f"(decimal or 0x hex)") from None


def _open(args: argparse.Namespace, mode: str = "r") -> ShardedKV:
    if mode == "r":
        return open_kv(args.url, spec=args.spec)
    return open_kv(args.url, spec=args.spec, mode=mode,
                   strategy=getattr(args, "strategy", "auto"))


def _commit(kv: ShardedKV, args: argparse.Namespace) -> None:
    plan = kv.plan()
    if args.plan:
        print(plan)
    kv.commit(plan, progress=not args.quiet)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _volume_info(url: str) -> VolumeInfo | None:
    """The layer's info if ``url`` is a precomputed volume (its info has scales)."""
    raw = open_storage(url).read("info")
    try:
        doc = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(doc, dict) or "scales" not in doc:
        return None
    return VolumeInfo.from_json(doc, f"{url}/info")


def describe_volume(url: str, info: VolumeInfo) -> None:
    print(f"volume       {url}")
    print(f"layer        {info.type}, {info.data_type}, {info.num_channels} channel(s), "
          f"{len(info.scales)} scale(s)")
    storage = open_storage(url)
    for i, s in enumerate(info.scales):
        files = storage.child(s.key).list()
        sizes = [storage.child(s.key).stat(n) for n in files] if s.sharding else []
        where = (f"{len(files)} shard file(s), {_size(sum(x.size for x in sizes if x))}"
                 if s.sharding else f"{len(files)} chunk file(s)")
        sharding = "unsharded" if s.sharding is None else (
            f"sharded ({s.sharding.hash}, preshift {s.sharding.preshift_bits}, minishard "
            f"{s.sharding.minishard_bits}, shard {s.sharding.shard_bits} bits)")
        print(f"scale {i}      key {s.key}: size {s.size}, offset {s.voxel_offset}, "
              f"resolution {s.resolution}, chunks {s.chunk_size}, {s.encoding}, {sharding}; "
              f"{where}")


def cmd_info(args: argparse.Namespace) -> None:
    info = _volume_info(args.url) if args.spec is None else None
    if info is not None:
        if args.json:
            print(json.dumps(info.to_json(), indent=1))
        else:
            describe_volume(args.url, info)
        return
    kv = _open(args)
    stats = kv.stats()
    total_keys = sum(s["keys"] for s in stats)
    total_bytes = sum(s["bytes"] for s in stats)
    if args.json:
        garbage = sum(s["garbage"] * s["bytes"] for s in stats)
        print(json.dumps({"url": kv.storage.url, "sharding": kv.spec.to_json(),
                          "shards": stats, "keys": total_keys, "bytes": total_bytes,
                          "garbage_bytes": round(garbage)}, indent=1))
        return
    spec = kv.spec
    print(f"store        {kv.storage.url}")
    print(f"sharding     hash {spec.hash}, preshift_bits {spec.preshift_bits}, "
          f"minishard_bits {spec.minishard_bits}, shard_bits {spec.shard_bits}")
    print(f"encodings    minishard index {spec.minishard_index_encoding}, "
          f"data {spec.data_encoding}")
    print(f"shards       {len(stats)} present of {spec.num_shards}")
    print(f"keys         {total_keys}")
    print(f"size         {_size(total_bytes)} ({total_bytes} bytes)")
    if stats:
        per = [s["keys"] for s in stats]
        print(f"keys/shard   min {min(per)}, mean {total_keys / len(per):.0f}, max {max(per)}")
        garbage = sum(s["garbage"] * s["bytes"] for s in stats)
        worst = max(stats, key=lambda s: s["garbage"])
        print(f"garbage      {garbage / total_bytes:.1%} of the bytes unreferenced (worst "
              f"{worst['name']}: {worst['garbage']:.1%}; `ngshard compact` removes it)")


def cmd_ls(args: argparse.Namespace) -> None:
    keys = _open(args).keys_array()
    if args.sort:
        keys.sort()
    out = sys.stdout
    for i in range(0, len(keys), 1 << 16):
        out.write("\n".join(map(str, keys[i:i + (1 << 16)].tolist())) + "\n")


def cmd_get(args: argparse.Namespace) -> None:
    key = _parse_key(args.key)
    try:
        value = _open(args)[key]
    except KeyError:
        raise NgShardError(f"key {key} is not in {args.url}") from None
    if args.output:
        with open(args.output, "wb") as f:
            f.write(value)
    else:
        sys.stdout.buffer.write(value)
        sys.stdout.buffer.flush()


def cmd_put(args: argparse.Namespace) -> None:
    key = _parse_key(args.key)
    if args.file == "-":
        value = sys.stdin.buffer.read()
    else:
        with open(args.file, "rb") as f:
            value = f.read()
    kv = _open(args, "a")
    kv[key] = value
    _commit(kv, args)


def cmd_rm(args: argparse.Namespace) -> None:
    keys = [_parse_key(k) for k in args.keys]
    kv = _open(args, "r+")
    missing = [k for k in keys if k not in kv]
    if missing and not args.force:
        raise NgShardError(f"not in {args.url}: {', '.join(map(str, missing))} "
                           f"(--force ignores absent keys)")
    for k in keys:
        if k not in missing:
            del kv[k]
    _commit(kv, args)


def _import_items(source: str) -> Iterator[tuple[int, bytes]]:
    """(key, value) pairs from a directory of files named by key or a JSON-lines file."""
    if os.path.isdir(source):
        for entry in sorted(os.scandir(source), key=lambda e: e.name):
            if entry.is_file():
                with open(entry.path, "rb") as f:
                    yield _parse_key(entry.name), f.read()
        return
    with open(source) if source != "-" else sys.stdin as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key = record["key"]
                value = base64.b64decode(record["value"], validate=True)
            except (ValueError, KeyError, TypeError, binascii.Error) as e:
                raise NgShardError(f"{source}:{number}: expected "
                                   f'{{"key": KEY, "value": BASE64}} ({e})') from None
            yield _parse_key(str(key)), value


def cmd_import(args: argparse.Namespace) -> None:
    kv = _open(args, "a")
    items = tqdm(_import_items(args.source), desc="reading", unit="key", disable=args.quiet)
    kv.update(items)
    _commit(kv, args)


def cmd_verify(args: argparse.Namespace) -> int:
    info = _volume_info(args.url) if args.spec is None else None
    if info is not None:
        reports = [verify_volume(Volume(open_storage(args.url), info, i), progress=not args.quiet)
                   for i in range(len(info.scales))]
        for scale, report in zip(info.scales, reports):
            print(f"scale {scale.key}: {report}".replace(" keys,", " chunks decoded,", 1))
        return 0 if all(r.ok for r in reports) else 1
    report = verify_kv(_open(args), progress=not args.quiet)
    print(report)
    return 0 if report.ok else 1


def cmd_compact(args: argparse.Namespace) -> None:
    kv = _open(args, "r+")
    plan = kv.compact(progress=not args.quiet)
    saved = sum(p.size_before - p.write_bytes for p in plan.shards)
    print(f"compacted {len(plan.shards)} shard(s), {saved} bytes freed")


def cmd_demo(args: argparse.Namespace) -> None:
    from .demo import make_demo

    path = os.path.abspath(args.dir)
    skeletons = os.path.join(path, "skeletons")
    print(f"writing a sample segmentation layer with skeletons to {path} ...")
    make_demo(path)
    args.spec, args.json = None, False
    for args.url in (path, skeletons):
        cmd_info(args)
    vol = open_volume(path)
    labels = vol[0:256:64, 128, 64, 0]
    print(f"segment IDs at x=0,64,128,192, y=128, z=64:  "
          f"{', '.join(map(str, labels.tolist()))}")
    value = open_kv(skeletons)[int(labels[0])]
    print(f"its skeleton ({skeletons}):  {len(value)} bytes, "
          f"{int.from_bytes(value[:4], 'little')} vertices")
    print(f"try:  ngshard verify {path};  ngshard ls {skeletons} | head")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ngshard", description=(
        "Neuroglancer precomputed sharded stores. URL is a local path or any fsspec URL "
        "(file://, memory://, http(s)://, s3://, gs://)."))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, fn, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(fn=fn)
        return p

    def store_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("url", metavar="URL", help="directory of the sharded store")
        p.add_argument("--spec", metavar="JSON|FILE",
                       help="sharding spec (JSON text or file) when URL has no info file")

    p = command("info", cmd_info, "describe a sharded store (spec, shards, keys, sizes) or a "
                "precomputed volume (scales, chunking, sharding, encoding, files)")
    store_args(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p = command("ls", cmd_ls, "list the keys of a store, one per line")
    store_args(p)
    p.add_argument("--sort", action="store_true", help="sort numerically (default: shard order)")
    p = command("get", cmd_get, "write the value of one key to stdout or a file")
    store_args(p)
    p.add_argument("key", metavar="KEY", help="uint64 key, decimal or 0x hex")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    def write_args(p: argparse.ArgumentParser) -> None:
        store_args(p)
        p.add_argument("--strategy", choices=("auto", "append", "rewrite"), default="auto",
                       help="append to local shards, or rewrite them whole (default: append "
                            "for local files, rewrite elsewhere)")
        p.add_argument("--plan", action="store_true", help="print the commit plan first")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")

    p = command("put", cmd_put, "set the value of one key (creates the store if needed)")
    write_args(p)
    p.add_argument("key", metavar="KEY", help="uint64 key, decimal or 0x hex")
    p.add_argument("file", metavar="FILE", help="file holding the value, - for stdin")
    p = command("rm", cmd_rm, "delete keys")
    write_args(p)
    p.add_argument("keys", metavar="KEY", nargs="+", help="uint64 keys")
    p.add_argument("-f", "--force", action="store_true", help="ignore absent keys")
    p = command("import", cmd_import, "add many keys: from a directory of files named by key, "
                "or a JSON-lines file of {\"key\": KEY, \"value\": BASE64} (- for stdin)")
    write_args(p)
    p.add_argument("source", metavar="DIR|NDJSON")
    p = command("verify", cmd_verify, "check every shard, index, key and chunk of a store, or "
                "decode every chunk of every scale of a volume")
    store_args(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p = command("compact", cmd_compact, "rewrite shards without the garbage left by appends")
    store_args(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p = command("demo", cmd_demo, "write a sample sharded store and show it")
    p.add_argument("dir", nargs="?", default="ngshard-demo", help="where (default ./ngshard-demo)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args) or 0
    except BrokenPipeError:  # e.g. `ngshard ls URL | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (NgShardError, OSError) as e:
        print(f"ngshard: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
