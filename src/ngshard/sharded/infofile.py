"""The ``info`` file of a layer or store: read defensively, written atomically, and the sharding
spec found in it (a store's own ``sharding``, or the scale of a volume whose key names it).

Stores written by ngshard carry at least ``{"sharding": spec}``, so the next open needs no spec.
"""

from __future__ import annotations

import json
import os

from ..errors import NotFoundError, SpecError
from ..kinds import INFO, parse_info
from ..storage import Storage
from .spec import ShardingSpec


def read_info(storage: Storage) -> dict | None:
    """The parsed ``info`` of a store or layer, None if it has none."""
    raw = storage.read(INFO)
    return None if raw is None else parse_info(raw, storage.path(INFO))


def write_info(storage: Storage, doc: dict) -> None:
    """Write ``info`` atomically."""
    storage.write(INFO, [json.dumps(doc, indent=1).encode()])


def parent_scale_spec(storage: Storage) -> tuple[bool, ShardingSpec | None]:
    """Whether ``storage`` is a scale directory of a volume (the parent's info has a scale
    whose key is its name), and that scale's sharding spec (None if unsharded)."""
    parent = storage.parent()
    if parent is None:
        return False, None
    key = storage.url.rstrip("/").rpartition("/")[2]
    info = read_info(parent)
    for scale in (info or {}).get("scales", []) if info else []:
        if isinstance(scale, dict) and scale.get("key") == key:
            sharding = scale.get("sharding")
            return True, None if sharding is None else ShardingSpec.from_json(sharding)
    return False, None


def spec_from_info(storage: Storage) -> ShardingSpec:
    """The sharding spec of a store from its ``info`` (ngshard's stores, skeleton, mesh and
    annotation layers), or from the scale of the parent volume whose key is the store's
    directory name."""
    root = storage.local_root
    if root is not None and not os.path.isdir(root):
        raise NotFoundError(f"{storage.url}: " + ("a file, not a store's directory"
                                                  if os.path.exists(root) else
                                                  "no such directory"))
    info = read_info(storage)
    where = storage.path(INFO)
    if info is not None:
        if "sharding" not in info:
            if "scales" in info:
                raise SpecError(f"{storage.url} is a volume: its scales are the sharded "
                                f"stores (give a scale, e.g. --scale 0)")
            raise SpecError(f"{where}: has no 'sharding' member: not a sharded store "
                            f"(give the spec with --spec)")
        return ShardingSpec.from_json(info["sharding"])
    is_scale, spec = parent_scale_spec(storage)
    if is_scale and spec is None:
        raise SpecError(f"{storage.url}: an unsharded scale of a volume (one file per chunk)")
    if spec is not None:
        return spec
    raise SpecError(f"{where}: no info file: give the sharding spec (--spec JSON|FILE, or "
                    f"spec= in Python)")


def as_spec(spec: ShardingSpec | dict | str) -> ShardingSpec:
    """A spec given as a ShardingSpec, its JSON object or text, or the name of a JSON file."""
    if isinstance(spec, ShardingSpec):
        return spec
    if isinstance(spec, str) and not spec.lstrip().startswith("{"):
        try:
            with open(spec) as f:
                spec = f.read()
        except OSError as e:
            raise SpecError(f"sharding spec: {spec!r} is neither JSON nor a readable file "
                            f"({e.strerror})") from None
    return ShardingSpec.from_json(spec)


def record_spec(storage: Storage, spec: ShardingSpec) -> None:
    """Give a store written by ngshard an ``info`` holding its spec (unless it is a volume's
    scale, whose spec lives in the volume's info, or its info already says so)."""
    info = read_info(storage)
    if info is None and parent_scale_spec(storage)[0]:
        return
    info = info or {}
    if info.get("sharding") != spec.to_json():
        write_info(storage, {**info, "sharding": spec.to_json()})


def check_recorded(storage: Storage, spec: ShardingSpec) -> None:
    """Refuse to update a store with a spec other than the one its info records: keys would
    land in the wrong shards."""
    try:
        recorded = spec_from_info(storage)
    except (SpecError, NotFoundError):
        return  # no recorded spec (or no store yet): the given one is all there is
    if recorded != spec:
        raise SpecError(f"{storage.path('info')}: records sharding {recorded.to_json()}, "
                        f"not the spec given ({spec.to_json()})")
