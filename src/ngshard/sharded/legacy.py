"""The obsolete two-file variant of a shard, ``<shard>.index`` + ``<shard>.data``: one
``.shard`` file split at the end of its shard index. Its names live here and nowhere else;
readers read it as the one file it stands for, and updates turn it into that file."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..storage import ObjectInfo, Storage

_SHARD = ".shard"


def pair_names(shard_name: str) -> tuple[str, str]:
    """``(<shard>.index, <shard>.data)`` standing for the file ``<shard>.shard``."""
    stem = shard_name[:-len(_SHARD)]
    return f"{stem}.index", f"{stem}.data"


def shards_of_pairs(names: Collection[str]) -> set[str]:
    """Names of the ``.shard`` files that complete pairs among ``names`` stand for."""
    return {f"{n[:-len('.index')]}{_SHARD}" for n in names
            if n.endswith(".index") and f"{n[:-len('.index')]}.data" in names}


def with_pairs(storage: Storage, names: Sequence[str], infos: Sequence[ObjectInfo | None]
               ) -> list[tuple[ObjectInfo, ObjectInfo | None] | None]:
    """For each shard file of ``names`` (``infos``: its stat, None where missing): (info,
    None), or where it is missing the (index, data) infos of an obsolete two-file shard of
    its name, None if neither is there. The stats of a step go out together."""
    missing = [i for i, info in enumerate(infos) if info is None]
    pairs = [pair_names(names[i]) for i in missing]
    index = storage.stat_many([p[0] for p in pairs])
    have = [k for k, info in enumerate(index) if info is not None]
    data = storage.stat_many([pairs[k][1] for k in have])
    out: list = [(info, None) if info is not None else None for info in infos]
    for k, info in zip(have, data):
        if info is not None:
            out[missing[k]] = (index[k], info)
    return out
