"""How an existing shard changes by an append, pure: from old indices plus changes, the bytes to
append at the end of the old file (new chunk data, then the new indices of the touched
minishards, then the trailer of ``trailer.py``) and a new shard index to write over the old
one. Old bytes are never overwritten, so any mix of old and new shard index entries is a valid
shard. (A shard rewritten whole is ``shard_writer.rewrite_shard``'s.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .._arrays import member
from ..types import Blob
from .format import Entries, MinishardIndex, encode_minishard_indices, encode_shard_index
from .spec import ShardingSpec
from .trailer import TRAILER_SIZE, trailer

Buffer = Blob


class Append(NamedTuple):
    """An append update: write ``tail`` at ``offset``, then ``shard_index`` at 0."""

    offset: int
    tail: list[Buffer]
    shard_index: bytes
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

