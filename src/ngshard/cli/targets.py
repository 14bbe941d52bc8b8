"""What a command's URL names: a sharded store (its own info, a volume scale's directory, or a
spec given with --spec), or a volume root whose sharded scales are stores. The info is read
once per command, here."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

from ..errors import NotFoundError, SpecError, SpecMissingError
from ..kinds import VOLUME, kind_of
from ..layers.dispatch import checked_source, unindexed_sizes
from ..sharded import ShardedKV, open_kv
from ..sharded.infofile import read_info
from ..storage import Storage
from ..types import Mode, Strategy
from ..volume import VolumeInfo
from ..volume.handle import ScaleHandle
from .storage_args import storage_options


@dataclass
class Target:
    """One store a command works on; ``handle`` is set for a volume scale."""

    label: str
    kv: ShardedKV
    handle: ScaleHandle | None = None


def progress_wanted(args: argparse.Namespace) -> bool:
    """Progress bars only on a terminal, and never with --quiet."""
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def _volume(storage: Storage, doc: dict | None) -> VolumeInfo | None:
    if kind_of(doc) != VOLUME:
        return None
    return VolumeInfo.from_json(doc, storage.path("info"))


def url_storage(args: argparse.Namespace) -> Storage:
    """The storage of the command's URL (any form, see ngshard.storage.urls), opened once
    per command; a format the URL names must be the one stored there."""
    if getattr(args, "opened", None) is None:
        args.opened = checked_source(args.url, storage_options(args))[0]
    return args.opened


def volume_at(args: argparse.Namespace) -> tuple[Storage, VolumeInfo | None]:
    """The storage of the URL and its volume info if it is a volume root (unless --spec);
    resolved once per command."""
    if getattr(args, "resolved", None) is None:
        storage = url_storage(args)
        storage.require_folder(missing_ok=True)
        doc = None if args.spec is not None else read_info(storage)
        args.resolved = (storage, _volume(storage, doc))
        if doc is not None and "sharding" in doc:  # the store's own spec: no second read
            args.spec = doc["sharding"]
    return args.resolved


def scale_indices(args: argparse.Namespace, info: VolumeInfo, writing: bool) -> list[int]:
    which = getattr(args, "scale", None)
    if which is None:
        if writing:
            keys = ", ".join(s.key for s in info.scales)
            raise SpecError(f"{args.url} is a volume (scales {keys}): give --scale to say "
                            f"which scale's store to change")
        return list(range(len(info.scales)))
    scale = info.scale(int(which) if which.isdigit() else which)
    return [info.scales.index(scale)]


def targets(args: argparse.Namespace, mode: Mode = "r", *, every_scale: bool = False
            ) -> list[Target]:
    """The stores the URL names, opened in ``mode``. A volume root gives its sharded scales:
    all of them (reads, or ``every_scale``), or the one --scale names (needed to change
    keys)."""
    storage, info = volume_at(args)
    writing = mode != "r"
    if info is not None:
        out = []
        for i in scale_indices(args, info, writing and not every_scale):
            scale = info.scales[i]
            if scale.sharding is None:
                if getattr(args, "scale", None) is not None:
                    raise SpecError(f"{args.url}: scale {scale.key} is unsharded (one file per "
                                    f"chunk): there is no sharded store to work on")
                continue
            handle = ScaleHandle(storage, info, i, "r" if mode == "r" else "r+")
            assert handle.store.kv is not None  # the scale is sharded
            out.append(Target(f"{storage.path(scale.key)}", handle.store.kv, handle))
        if not out:
            raise SpecError(f"{args.url}: a volume with no sharded scale (one file per chunk)")
        return out
    strategy: Strategy = getattr(args, "strategy", None) or "auto"  # argparse checked it
    try:  # a layer's store whose shards keep unindexed entries: its writes must know them
        kv = open_kv(storage, spec=args.spec, mode=mode, strategy=strategy,
                     unindexed=unindexed_sizes(read_info(storage))) if writing else \
            open_kv(storage, spec=args.spec)
    except SpecMissingError as e:
        raise SpecError(f"{e.where}: {e.reason}: give the sharding spec with --spec "
                        f"JSON|FILE") from None
    except NotFoundError:
        if not writing or args.spec is not None:
            raise
        raise SpecError(f"{storage.url}: no store there yet: give the sharding spec of the "
                        f"new store with --spec JSON|FILE") from None
    return [Target(storage.url, kv)]


def require_present(target: Target) -> None:
    """A store that is read must be there: shards, or at least an info file."""
    kv = target.kv
    if not kv.shard_names() and kv.storage.read("info") is None:
        where = kv.storage.url
        missing = kv.storage.local_root is not None and not os.path.exists(where)
        reason = "no such directory" if missing else "no shard files and no info file"
        raise NotFoundError(f"{where}: {reason}: not a sharded store")


def emit(args: argparse.Namespace, data: bytes) -> None:
    """``data`` to the file of ``--output``, or to standard output."""
    if args.output:
        with open(args.output, "wb") as f:
            f.write(data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
