"""The obsolete two-file variant of a shard, ``<shard>.index`` + ``<shard>.data``: one
``.shard`` file split at the end of its shard index. Its names live here and nowhere else;
readers read it as the one file it stands for, and updates turn it into that file."""

from __future__ import annotations

from collections.abc import Collection

_SHARD = ".shard"


def pair_names(shard_name: str) -> tuple[str, str]:
    """``(<shard>.index, <shard>.data)`` standing for the file ``<shard>.shard``."""
    stem = shard_name[:-len(_SHARD)]
    return f"{stem}.index", f"{stem}.data"


def shards_of_pairs(names: Collection[str]) -> set[str]:
    """Names of the ``.shard`` files that complete pairs among ``names`` stand for."""
    return {f"{n[:-len('.index')]}{_SHARD}" for n in names
            if n.endswith(".index") and f"{n[:-len('.index')]}.data" in names}
