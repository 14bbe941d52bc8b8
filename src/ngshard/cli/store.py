"""The store commands: info, ls, get, put, rm, import, verify, compact. Each takes a sharded
store, or a volume root (its sharded scales: all of them, or the one --scale names)."""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import os
import sys
from collections.abc import Iterator

from ..errors import NgShardError, UnlistableError
from ..progress import progress_bar
from ..sharded import ShardedKV
from ..sharded.spec import check_key
from ..verify import verify_kv, verify_volume
from ..volume import Bounds
from ..volume.handle import ScaleHandle
from ..volume.vectors import xyz
from .layers import cmd_get_layer, cmd_info_layer, typed_layer
from .targets import emit, progress_wanted, require_present, scale_indices, targets, volume_at
from .zarr_info import cmd_info_zarr, is_zarr


class KeyNotFound(NgShardError):
    """A key asked for is absent (its own exit status, so scripts can tell)."""


def parse_key(text: str) -> int:
    """A key from the command line: decimal (leading zeros allowed) or 0x hex."""
    t = text.strip()
    try:
        if t[:2].lower() == "0x" and "_" not in t:
            return check_key(int(t, 16))
        if t.isdecimal() and t.isascii():
            return check_key(int(t, 10))
    except ValueError:
        pass
    raise NgShardError(f"bad key {text!r}: expected an integer in [0, 2**64) "
                       f"(decimal or 0x hex)")


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _commit(kv: ShardedKV, args: argparse.Namespace) -> None:
    plan = kv.plan()
    if args.plan:
        print(plan)
    kv.commit(plan, progress=progress_wanted(args))


def _summary(kv: ShardedKV, progress: bool = False) -> dict:
    stats = kv.stats(progress=progress)
    total = sum(s["bytes"] for s in stats)
    return {"url": kv.storage.url, "sharding": kv.spec.to_json(), "shards": stats,
            "keys": sum(s["keys"] for s in stats), "bytes": total,
            "garbage_bytes": round(sum(s["garbage"] * s["bytes"] for s in stats))}


def describe_store(kv: ShardedKV, indent: str = "", progress: bool = False,
                   unindexed: str | None = None) -> None:
    """Print a store's rows. ``unindexed``: what the bytes outside its indices are, for a
    store whose values keep data before them (a mesh layer's fragments): they are reported
    as that data, not as garbage for ``compact`` to remove (it keeps them)."""
    s = _summary(kv, progress)
    spec, stats = kv.spec, s["shards"]
    rows = [("store", s["url"]),
            ("sharding", f"hash {spec.hash}, preshift_bits {spec.preshift_bits}, "
                         f"minishard_bits {spec.minishard_bits}, shard_bits {spec.shard_bits}"),
            ("encodings", f"minishard index {spec.minishard_index_encoding}, "
                          f"data {spec.data_encoding}"),
            ("shards", f"{len(stats)} present of {spec.num_shards}"),
            ("keys", str(s["keys"])),
            ("size", f"{size_text(s['bytes'])} ({s['bytes']} bytes)")]
    if stats:
        per = [x["keys"] for x in stats]
        worst = max(stats, key=lambda x: x["garbage"])
        rows += [("keys/shard", f"min {min(per)}, mean {s['keys'] / len(per):.0f}, "
                                f"max {max(per)}"),
                 ("garbage", f"{s['garbage_bytes'] / max(1, s['bytes']):.1%} of the bytes "
                             f"unreferenced (worst {worst['name']}: {worst['garbage']:.1%}; "
                             f"`ngshard compact` removes it)") if unindexed is None else
                 ("unindexed", f"{s['garbage_bytes'] / max(1, s['bytes']):.1%} of the bytes "
                               f"outside the indices ({unindexed}: data, not garbage; "
                               f"`ngshard compact` keeps them)")]
    for name, text in rows:
        print(f"{indent}{name:<13}{text}")


def cmd_info(args: argparse.Namespace) -> None:
    layer = typed_layer(args)
    if layer is not None:
        cmd_info_layer(args, layer[0], layer[2])
        return
    storage, info = volume_at(args)
    if info is None and args.spec is None and is_zarr(storage):
        cmd_info_zarr(args, storage)
        return
    progress = progress_wanted(args)
    if info is not None:
        found = {t.kv.storage.url: t for t in targets(args)} if any(
            s.sharding for s in info.scales) else {}
        if args.json:
            doc = info.to_json()
            doc["stores"] = {url: _summary(t.kv, progress) for url, t in found.items()}
            print(json.dumps(doc, indent=1))
            return
        print(f"volume       {storage.url}")
        print(f"layer        {info.type}, {info.data_type}, {info.num_channels} channel(s), "
              f"{len(info.scales)} scale(s)")
        for i, s in enumerate(info.scales):
            sharding = "unsharded" if s.sharding is None else "sharded"
            print(f"scale {i}      key {s.key}: size {s.size}, offset {s.voxel_offset}, "
                  f"resolution {s.resolution}, chunks {s.chunk_size}, {s.encoding}, {sharding}")
            box = Bounds(s.voxel_offset, xyz(o + n for o, n in zip(s.voxel_offset, s.size)))
            print(f"  {'bounds':<13}{box} (voxel coordinates, as a volume is indexed)")
            target = found.get(storage.child(s.key).url)
            if target is not None:
                assert target.handle is not None  # a volume's targets carry their scale
                describe_store(target.kv, indent="  ", progress=progress)
                shard = target.handle.grid.shard_shape(s.sharding)
                print(f"  {'shard box':<13}"
                      f"{'not a box (hashed)' if shard is None else f'{shard} chunks'}")
            else:
                files = storage.child(s.key)
                print(f"  {'files':<13}" + (f"{len(files.list())} chunk file(s)"
                                            if files.supports_listing else
                                            "not counted: the server gives no directory "
                                            "listings (every chunk still reads)"))
        return
    (target,) = targets(args)
    require_present(target)
    if args.json:
        print(json.dumps(_summary(target.kv, progress), indent=1))
    else:
        describe_store(target.kv, progress=progress)


def _write_lines(rows: list[str]) -> None:
    if rows:
        sys.stdout.write("\n".join(rows) + "\n")


def cmd_ls(args: argparse.Namespace) -> None:
    found = targets(args)
    progress = progress_wanted(args)
    for target in found:
        if target.handle is None:
            require_present(target)
        if len(found) > 1:
            print(f"# {target.label}")
        # shard by shard (a few shards' indices in memory); --sort needs every key at once
        shards = [target.kv.keys_array()] if args.sort else \
            target.kv.iter_keys(arrays=True, progress=progress)
        grid = target.handle.grid if args.chunks and target.handle is not None else None
        for keys in shards:
            if args.sort:
                keys.sort()
            positions = None
            if grid is not None:  # keys outside the grid have no position (verify says so)
                keys = keys[grid.codes_in_grid(keys)]
                positions = grid.unmorton(keys)
            for i in range(0, len(keys), 1 << 16):
                part = keys[i:i + (1 << 16)].tolist()
                if positions is None:
                    _write_lines(list(map(str, part)))
                else:
                    _write_lines([f"{k} {x} {y} {z}" for k, (x, y, z) in
                                  zip(part, positions[i:i + (1 << 16)].tolist())])


def cmd_get(args: argparse.Namespace) -> None:
    key = parse_key(args.key)
    layer = typed_layer(args)
    if layer is not None:
        cmd_get_layer(args, layer[0], layer[2], key)
        return
    if args.as_ is not None:
        raise NgShardError(f"--as decodes skeleton, mesh, annotation and segment property "
                           f"layers; {args.url} is a volume or a bare store (get its raw "
                           f"bytes without --as)")
    if getattr(args, "scale", None) is None and volume_at(args)[1] is not None:
        args.scale = "0"
    (target,) = targets(args)
    try:
        value = target.kv[key]
    except KeyError:
        raise KeyNotFound(f"key {key} is not in {target.label}") from None
    emit(args, value)


def cmd_put(args: argparse.Namespace) -> None:
    key = parse_key(args.key)
    if args.file == "-":
        value = sys.stdin.buffer.read()
    else:
        with open(args.file, "rb") as f:
            value = f.read()
    (target,) = targets(args, "a")
    target.kv[key] = value
    _commit(target.kv, args)


def cmd_rm(args: argparse.Namespace) -> None:
    keys = [parse_key(k) for k in args.keys]
    (target,) = targets(args, "r+")
    kv = target.kv
    missing = [k for k in keys if k not in kv]
    if missing and not args.force:
        raise KeyNotFound(f"not in {target.label}: {', '.join(map(str, missing))} "
                          f"(--force ignores absent keys)")
    for k in sorted(set(keys) - set(missing)):
        del kv[k]
    _commit(kv, args)


def _import_items(source: str) -> Iterator[tuple[int, bytes]]:
    """(key, value) pairs from a directory of files named by key or a JSON-lines file."""
    if os.path.isdir(source):
        for entry in sorted(os.scandir(source), key=lambda e: e.name):
            if entry.is_file():
                with open(entry.path, "rb") as f:
                    yield parse_key(entry.name), f.read()
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
            yield parse_key(str(key)), value


def cmd_import(args: argparse.Namespace) -> None:
    if not os.path.exists(args.source) and args.source != "-":
        raise NgShardError(f"{args.source}: no such file or directory")
    (target,) = targets(args, "a")
    items = progress_bar(_import_items(args.source), desc="reading", unit="key",
                         enabled=progress_wanted(args))
    target.kv.update(items)
    _commit(target.kv, args)


def _verify_report(label: str, report) -> None:
    print(f"scale {label}: {str(report).replace(' keys,', ' chunks decoded,', 1)}")


def cmd_verify(args: argparse.Namespace) -> int:
    from ..pipelines.resume import unfinished

    storage, info = volume_at(args)
    progress = progress_wanted(args)
    if info is not None:
        # a job adding scales not in the info yet (a pyramid): the scales' checks miss it
        left = unfinished(storage, besides=[s.key for s in info.scales])
        if left is not None:
            print(left)
        ok = left is None
        for i in scale_indices(args, info, writing=False):
            try:
                report = verify_volume(ScaleHandle(storage, info, i), progress=progress)
            except UnlistableError as e:  # never OK about what could not be seen
                print(f"scale {info.scales[i].key}: not verified: {e}")
                ok = False
                continue
            _verify_report(info.scales[i].key, report)
            ok &= report.ok
        return 0 if ok else 1
    left = unfinished(storage)
    if left is not None:  # a conversion's destination, not a volume (yet): nothing is OK
        print(left)
        return 1
    (target,) = targets(args)
    require_present(target)
    report = verify_kv(target.kv, progress=progress)
    print(report)
    return 0 if report.ok else 1


def cmd_compact(args: argparse.Namespace) -> None:
    for target in targets(args, "r+", every_scale=True):
        plan = target.kv.compact(progress=progress_wanted(args))
        saved = sum(p.size_before - p.write_bytes for p in plan.shards)
        print(f"{target.label}: compacted {len(plan.shards)} shard(s), {saved} bytes freed")
