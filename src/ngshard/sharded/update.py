"""How an existing shard changes: pure functions from old indices (and bytes) plus changes to the
bytes to write, for the two update strategies.

- rewrite: a whole new shard file from the old file's bytes and the changes (``new_shard``:
  a shard with no old bytes, the layout of every bulk write).
- append: bytes to append at the end of the old file (new chunk data, then the new indices of
  the touched minishards, then the trailer of ``trailer.py``) and a new shard index to write
  over the old one. Old bytes are never overwritten, so any mix of old and new shard index
  entries is a valid shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .._arrays import member, uint_dtype
from .format import (
    Entries,
    MinishardIndex,
    assemble_shard,
    decode_all,
    encode_minishard_indices,
    encode_shard_index,
)
from .prefixed import PrefixOf, rewrite_prefixed
from .spec import ShardingSpec
from .trailer import TRAILER_SIZE, trailer

Buffer = bytes | memoryview


def rewrite_shard(spec: ShardingSpec, old: Buffer | None, keys: np.ndarray,
                  deleted: np.ndarray, sizes: np.ndarray, data: Sequence,
                  where: str = "", prefix_of: PrefixOf | None = None) -> list | None:
    """The new shard file after the changes: ``keys[i]`` set, or deleted where
    ``deleted[i]``; the set keys' data-encoded values, ``sizes`` bytes each, lie back to back
    in that order in the parts ``data``. Returns None when no key is left.

    Kept chunks stay in the order they had in ``old``, each run of them that lay back to back
    there copied as one slice; new chunks follow them. (Only the minishard indices must be
    sorted by key; data may lie in any order.) With ``prefix_of``, each kept chunk keeps the
    unindexed prefix that lies right before it (see ``prefixed.py``).
    """
    old = memoryview(old) if old is not None else None
    kept = Entries.of(decode_all(spec, old, where)).without(np.sort(keys)) \
        if old is not None and len(old) else Entries.of({})
    by_place = np.argsort(kept.starts, kind="stable")
    kept = Entries(*(col[by_place] for col in kept))
    if prefix_of is not None and len(kept.keys):
        return rewrite_prefixed(spec, old, kept, prefix_of, keys[~deleted], sizes, data, where)
    new_keys = keys[~deleted]
    if not len(kept.keys):
        return new_shard(spec, new_keys, sizes, data) if len(new_keys) else None
    ends = kept.starts + kept.sizes
    joins = np.zeros(len(kept.keys), bool)
    joins[1:] = kept.starts[1:] == ends[:-1]
    run_first = np.flatnonzero(~joins)
    run_last = np.append(run_first[1:], len(joins)) - 1
    runs = [old[s:e] for s, e in zip(kept.starts[run_first].tolist(), ends[run_last].tolist())]
    all_sizes = np.concatenate([kept.sizes, np.asarray(sizes, np.uint64)])
    offsets = np.cumsum(all_sizes, dtype=np.uint64) - all_sizes  # back to back in that order
    minishards = np.concatenate([kept.minishards, spec.locate(new_keys)[1]])
    all_keys = np.concatenate([kept.keys, new_keys])
    order = np.lexsort((all_keys, minishards))
    return assemble_shard(minishards[order], all_keys[order], all_sizes[order],
                          [*runs, *data], spec.num_minishards, spec.minishard_index_encoding,
                          offsets[order], int(all_sizes.sum()))


def new_shard(spec: ShardingSpec, keys: np.ndarray, sizes: np.ndarray, data: Sequence,
              minishards: np.ndarray | None = None) -> list:
    """A whole shard file (as parts to write in order) holding the distinct ``keys``, given
    in (minishard, key) order (:func:`newest_in_index_order`), whose data-encoded values, ``sizes``
    bytes each, lie back to back in that order in the parts ``data`` (buffers, or a
    FileSlice the writer copies or adopts).

    Every writer of whole shards uses this layout (shard index, values in minishard index
    order, minishard indices in minishard order), so a shard's bytes depend on its contents
    alone; with the values in index order each minishard's data is one run, and the offset
    row of every minishard index is zeros, which gzip all but removes. The keys'
    ``minishards`` may be given where they are known already."""
    sizes = np.asarray(sizes, np.uint64)
    minishards = spec.locate(keys)[1] if minishards is None else minishards
    return assemble_shard(minishards, keys, sizes, list(data), spec.num_minishards,
                          spec.minishard_index_encoding)


def newest_in_index_order(spec: ShardingSpec, keys: np.ndarray,
                          minishards: np.ndarray | None = None,
                          age: np.ndarray | None = None) -> np.ndarray:
    """Positions of the newest entry of each distinct key in ``keys`` (the last one, or the
    one of greatest ``age``), in (minishard, key) order: the order of a minishard index, and
    of a new shard's data. ``minishards`` of the keys may be given where they are known."""
    if age is not None:
        order = np.lexsort((age, keys))
        ordered = keys[order]
    else:
        order = np.argsort(keys)  # quicksort; stable only matters where keys repeat
        ordered = keys[order]
        if len(keys) > 1 and (ordered[1:] == ordered[:-1]).any():
            order = np.argsort(keys, kind="stable")
            ordered = keys[order]
    newest = np.ones(len(order), bool)
    newest[:-1] = ordered[1:] != ordered[:-1]
    del ordered
    if not newest.all():
        order = order[newest]
    minishards = spec.locate(keys[order])[1] if minishards is None else minishards[order]
    # keys are in order: a stable sort by minishard alone (by radix, in a narrow dtype)
    # gives (minishard, key) order
    narrow = minishards.astype(uint_dtype(spec.num_minishards), copy=False)
    return order[np.argsort(narrow, kind="stable")]


class Append(NamedTuple):
    """An append update: write ``tail`` at ``offset``, then ``index`` at 0."""

    offset: int
    tail: list[Buffer]
    index: bytes
    empty: bool  # no key is left: delete the file instead


def append_update(spec: ShardingSpec, file_size: int, garbage: int, ranges: np.ndarray,
                  touched: dict[int, MinishardIndex], keys: np.ndarray, deleted: np.ndarray,
                  sizes: np.ndarray, data: Sequence) -> Append:
    """Append the changes to a shard of ``file_size`` bytes, ``garbage`` of them unreferenced,
    whose shard index is ``ranges``.

    ``touched`` holds the old index of every minishard a changed key falls in; ``keys[i]`` is
    set, or deleted where ``deleted[i]``; the set keys' data-encoded values, ``sizes`` bytes
    each, lie back to back in key order in the parts ``data``.
    """
    old = Entries.of(touched)
    changed = member(old.keys, np.sort(keys))
    kept = Entries(*(col[~changed] for col in old))
    new_keys = keys[~deleted]
    sizes = np.asarray(sizes, np.uint64)
    starts = np.cumsum(sizes, dtype=np.uint64) - sizes + np.uint64(file_size)
    ms = np.concatenate([kept.minishards, spec.locate(new_keys)[1]])
    all_keys = np.concatenate([kept.keys, new_keys])
    order = np.lexsort((all_keys, ms))
    parts, lengths = encode_minishard_indices(
        ms[order], all_keys[order], np.concatenate([kept.starts, starts])[order],
        np.concatenate([kept.sizes, sizes])[order], spec.shard_index_size,
        spec.num_minishards, spec.minishard_index_encoding)
    touched_ms = np.array(sorted(touched), np.intp)
    index_start = file_size + int(sizes.sum())
    ends = index_start + np.cumsum(lengths)
    new_ranges = ranges.copy()
    new_ranges[touched_ms, 0] = (ends - lengths)[touched_ms]
    new_ranges[touched_ms, 1] = ends[touched_ms]
    empty_now = new_ranges[:, 0] == new_ranges[:, 1]
    new_ranges[empty_now] = spec.shard_index_size
    garbage += (int(old.sizes[changed].sum()) + TRAILER_SIZE
                + int((ranges[touched_ms, 1] - ranges[touched_ms, 0]).sum()))
    return Append(file_size, [*data, *parts, trailer(garbage)],
                  encode_shard_index(new_ranges, spec.num_minishards),
                  bool(empty_now.all()))

