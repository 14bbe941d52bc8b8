"""The append trailer and the garbage of appended shards: pure functions over indices and bytes.

An append update (``update.py``) writes new chunk data and new minishard indices at the end
of a shard and then patches the shard index, so old bytes stay behind unreferenced. It ends
with a 16-byte trailer recording how many of the file's bytes are unreferenced, so deciding
when to compact needs no pass over every minishard index. Other readers ignore it (the format
allows unused bytes); a file without one (every other writer, our compactions) has no garbage.

Readers find the trailer right after the last minishard index (:func:`indices_end`): a file
that goes on past it holds the tail of an append that died, all of it garbage.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..types import Blob

if TYPE_CHECKING:
    from .format import MinishardIndex
    from .spec import ShardingSpec

TRAILER_MAGIC = b"ngsh-gc1"
TRAILER_SIZE = 16


def trailer(garbage: int) -> bytes:
    """The trailer recording ``garbage`` unreferenced bytes (its own 16 included)."""
    return TRAILER_MAGIC + garbage.to_bytes(8, "little")


def trailer_garbage(tail: Blob, file_size: int) -> int | None:
    """Unreferenced bytes recorded by a trailer (16 bytes), None if they are no trailer."""
    tail = bytes(tail)
    if len(tail) != TRAILER_SIZE or not tail.startswith(TRAILER_MAGIC):
        return None
    garbage = int.from_bytes(tail[8:], "little")
    return garbage if garbage <= file_size else None


def indices_end(ranges: np.ndarray, index_end: int) -> int:
    """Where the last minishard index ends: an append's trailer follows it directly, so a
    shard whose file goes on past that trailer holds the tail of an append that died."""
    used = ranges[ranges[:, 1] > ranges[:, 0]]
    return max(index_end, int(used[:, 1].max())) if len(used) else index_end


def live_bytes(spec: ShardingSpec, ranges: np.ndarray,
               indices: dict[int, MinishardIndex]) -> int:
    """Bytes of a shard file that its indices reference: shard index, minishard indices, chunks.
    The rest of the file is garbage left by append updates."""
    return (spec.shard_index_size + int((ranges[:, 1] - ranges[:, 0]).sum())
            + sum(int(idx.sizes.sum()) for idx in indices.values()))
