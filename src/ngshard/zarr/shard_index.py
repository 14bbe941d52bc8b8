"""The ``sharding_indexed`` shard index, pure: an (n, 2) uint64 table of (offset, nbytes) per
inner chunk in C order over the chunks of a shard, ``2**64 - 1`` twice for an empty chunk,
encoded with the index codecs at the start or the end of the shard.

:func:`index_range` is the one place that says which bytes of a shard its index occupies.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ..errors import CorruptDataError, SpecError
from ..types import Place
from .codecs import CodecPipeline

EMPTY = np.uint64(2**64 - 1)


class ShardIndex(NamedTuple):
    """(offset, nbytes) of each inner chunk of a shard; ``empty`` where both are 2**64-1."""

    table: np.ndarray  # (n, 2) uint64

    @property
    def empty(self) -> np.ndarray:
        return (self.table == EMPTY).all(axis=1)

    @property
    def nbytes(self) -> int:
        return self.table.nbytes

    def ranges(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(present mask, (k, 2) int64 [start, end) of the present ones) of inner chunks
        ``ids``."""
        rows = self.table[np.asarray(ids, np.intp)]
        present = ~(rows == EMPTY).all(axis=1)
        rows = rows[present].astype(np.int64)
        return present, np.stack([rows[:, 0], rows[:, 0] + rows[:, 1]], axis=1)

    @classmethod
    def new(cls, n: int) -> ShardIndex:
        return cls(np.full((n, 2), EMPTY, np.uint64))


def index_nbytes(codecs: CodecPipeline, chunks_per_shard: tuple[int, ...]) -> int:
    """Encoded size of the index of a shard of ``chunks_per_shard`` inner chunks."""
    size = codecs.encoded_size((*chunks_per_shard, 2), np.dtype(np.uint64))
    if size is None:
        raise SpecError(f"index_codecs {codecs.to_json()} do not have a fixed size "
                        f"(compression may not be used for the shard index)")
    return size


def index_range(shard_size: int, nbytes: int, location: str) -> tuple[int, int]:
    """[start, end) of the index of ``nbytes`` in a shard of ``shard_size`` bytes."""
    return (0, nbytes) if location == "start" else (shard_size - nbytes, shard_size)


def decode_index(data: Any, codecs: CodecPipeline, chunks_per_shard: tuple[int, ...],
                 shard_size: int, where: Place) -> ShardIndex:
    """The index from its encoded bytes; CorruptDataError naming ``where`` for a bad
    checksum, a half-empty entry or a chunk outside the shard's ``shard_size`` bytes."""
    table = codecs.decode(data, (*chunks_per_shard, 2), np.dtype(np.uint64), 0,
                          f"{where} (shard index)")
    table = np.ascontiguousarray(table, np.uint64).reshape(-1, 2)
    offsets, sizes = table[:, 0], table[:, 1]
    empty_o, empty_n = offsets == EMPTY, sizes == EMPTY
    half = np.flatnonzero(empty_o != empty_n)
    if len(half):
        raise CorruptDataError(f"{where}: shard index entry {int(half[0])} is half empty "
                               f"(offset {offsets[half[0]]}, nbytes {sizes[half[0]]})")
    size = np.uint64(shard_size)
    outside = np.flatnonzero(~empty_o & ((offsets > size) | (sizes > size - np.minimum(
        offsets, size))))
    if len(outside):
        i = int(outside[0])
        raise CorruptDataError(f"{where}: shard index entry {i} points outside the shard "
                               f"(offset {offsets[i]}, nbytes {sizes[i]}, shard of "
                               f"{shard_size} bytes)")
    return ShardIndex(table)


def encode_index(index: ShardIndex, codecs: CodecPipeline,
                 chunks_per_shard: tuple[int, ...]) -> bytes:
    return bytes(codecs.encode(index.table.reshape(*chunks_per_shard, 2), 0))


def lay_out(sizes: np.ndarray, index_size: int, location: str) -> ShardIndex:
    """The index of inner chunks written one after another in id order, ``sizes`` bytes
    each (-1: empty), after the index if it is at the start."""
    sizes = np.asarray(sizes, np.int64)
    present = sizes >= 0
    used = np.where(present, sizes, 0)
    offsets = np.cumsum(used) - used + (index_size if location == "start" else 0)
    table = np.full((len(sizes), 2), EMPTY, np.uint64)
    table[present, 0] = offsets[present]
    table[present, 1] = sizes[present]
    return ShardIndex(table)
