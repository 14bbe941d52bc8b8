"""The ``info`` file of a layer or store: read defensively, written atomically, and the sharding
spec found in it (a store's own ``sharding``, or the one its parent layer's info gives the
folder the store is: which folders those are, :func:`ngshard.kinds.stores` knows).

Stores written by ngshard carry at least ``{"sharding": spec}``, so the next open needs no spec.
"""

from __future__ import annotations

from ..errors import NotFoundError, SpecError, SpecMissingError
from ..jsondoc import dump_json
from ..kinds import INFO, parse_info, stores
from ..storage import Storage
from .spec import ShardingSpec


def read_info(storage: Storage) -> dict | None:
    """The parsed ``info`` of a store or layer, None if it has none."""
    raw = storage.read(INFO)
    return None if raw is None else parse_info(raw, storage.path(INFO))


def write_info(storage: Storage, doc: dict) -> None:
    """Write ``info`` atomically."""
    storage.write(INFO, [dump_json(doc, indent=1).encode()])


def parent_spec(storage: Storage) -> tuple[bool, ShardingSpec | None]:
    """Whether ``storage`` is a store inside a parent layer (a folder the parent's info names
    as one, :func:`ngshard.kinds.stores`), and its sharding spec there (None: a file per
    key)."""
    parent = storage.parent()
    if parent is None:
        return False, None
    key = storage.url.rstrip("/").rpartition("/")[2]
    inside = stores(read_info(parent))
    if key not in inside:
        return False, None
    sharding = inside[key]
    return True, None if sharding is None else ShardingSpec.from_json(sharding)


def spec_from_info(storage: Storage) -> ShardingSpec:
    """The sharding spec of a store from its ``info`` (``sharding``: ngshard's stores, layers
    that are one store), or from its parent layer's info (a store in one of its folders).

    Raises
    ------
    SpecMissingError
        No spec recorded for the store: none is given.
    SpecError
        An info without one, of a layer whose stores are in its folders.
    NotFoundError
        No directory there.
    """
    storage.require_folder("a store's directory")
    info = read_info(storage)
    where = storage.path(INFO)
    if info is not None:
        if "sharding" in info:
            return ShardingSpec.from_json(info["sharding"])
        inside = [key for key, sharding in stores(info).items() if sharding is not None]
        if inside:
            raise SpecError(f"{where}: no 'sharding' member: the layer's sharded stores are "
                            f"in its folders {', '.join(inside)}: open one of them")
        raise SpecMissingError(where, "has no 'sharding' member: not a sharded store")
    in_parent, spec = parent_spec(storage)
    if in_parent and spec is None:
        raise SpecError(f"{storage.url}: not sharded: its parent layer keeps a file per key "
                        f"here")
    if spec is not None:
        return spec
    raise SpecMissingError(where, "no info file")


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
    """Give a store written by ngshard an ``info`` holding its spec (unless it is a store
    inside a parent layer, whose spec lives in the parent's info, or its info says so)."""
    info = read_info(storage)
    if info is None and parent_spec(storage)[0]:
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
