"""Pure encoders and decoders of the sharded format's binary parts: bytes and numpy arrays in,
bytes and numpy arrays out, no I/O.

Decoders check every number against the size of the file it came from and raise
CorruptDataError naming that file (``where``) and the offset, so hostile input can neither crash
the reader nor make it allocate more than the bytes it actually read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .._arrays import member
from .._kernels import minishard_tables
from ..bounded import take
from ..compression import decode, gzip_compress
from ..errors import CorruptDataError
from ..limits import MAX_MINISHARD_INDEX_BYTES
from ..types import Blob

if TYPE_CHECKING:
    from .spec import ShardingSpec

_U64 = np.dtype("<u8")
_ZERO = np.uint64(0)


# --- shard index ---------------------------------------------------------------------------

def decode_shard_index(buf: Blob, num_minishards: int, file_size: int,
                       where: str = "") -> np.ndarray:
    """The shard index as a ``(num_minishards, 2)`` uint64 array of absolute ``[start, end)``.

    ``file_size`` is the size of the whole shard file; every range must lie inside it, and
    the non-empty ranges must not overlap (each minishard has an index of its own).
    """
    index_end = 16 * num_minishards
    if len(buf) != index_end or file_size < index_end:
        raise CorruptDataError(f"{where}: file of {file_size} bytes is shorter than its "
                               f"{index_end}-byte shard index")
    rel = take(buf, _U64, 2 * num_minishards, where=where,
               what="shard index").reshape(num_minishards, 2)
    bad = (rel[:, 1] < rel[:, 0]) | (rel[:, 1] > np.uint64(file_size - index_end))
    if bad.any():
        m = int(np.flatnonzero(bad)[0])
        raise CorruptDataError(
            f"{where}: shard index entry {m} (at offset {16 * m}) has range "
            f"[{int(rel[m, 0])}, {int(rel[m, 1])}) that is reversed or past the end of the "
            f"{file_size}-byte file")
    used = np.flatnonzero(rel[:, 1] > rel[:, 0])
    if len(used) > 1:
        order = used[np.argsort(rel[used, 0], kind="stable")]
        clash = np.flatnonzero(rel[order[1:], 0] < rel[order[:-1], 1])
        if len(clash):
            a, b = sorted(order[clash[0]:clash[0] + 2].tolist())
            raise CorruptDataError(f"{where}: shard index entries {a} and {b} claim "
                                   f"overlapping minishard index bytes")
    return rel.astype(np.uint64) + np.uint64(index_end)


def encode_shard_index(ranges: np.ndarray, num_minishards: int) -> bytes:
    """Bytes of a shard index from absolute ``(num_minishards, 2)`` ``[start, end)`` ranges."""
    rel = np.asarray(ranges, np.uint64).reshape(num_minishards, 2) - np.uint64(16 * num_minishards)
    return rel.astype(_U64, copy=False).tobytes()


# --- minishard index -----------------------------------------------------------------------


class MinishardIndex(NamedTuple):
    """The chunks of one minishard, sorted by key: absolute data offsets into the shard file."""

    keys: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(found mask, positions) of ``keys`` in this index."""
        pos = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        return member(keys, self.keys), pos

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes * 3


EMPTY_MINISHARD = MinishardIndex(*(np.zeros(0, np.uint64) for _ in range(3)))


def find_in_tables(tables: Sequence[MinishardIndex], which: np.ndarray, keys: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Look each key up in its own minishard index only, ``tables[which[i]]``: one binary
    search over every table at once (no sort of their keys; a key misplaced in another
    minishard is not found, as readers must).

    Returns
    -------
    (found, starts, sizes)
        A mask over ``keys`` and, where found, each chunk's absolute start and size.
    """
    counts = np.fromiter((len(t.keys) for t in tables), np.int64, len(tables))
    bounds = np.zeros(len(tables) + 1, np.int64)
    np.cumsum(counts, out=bounds[1:])
    if not len(keys) or not bounds[-1]:  # nothing to find
        none = np.zeros(0, np.uint64)
        return np.zeros(len(keys), bool), none, none
    table = np.concatenate([t.keys for t in tables])
    which = np.asarray(which, np.int64)
    lo, end = bounds[which], bounds[which + 1]
    hi = end.copy()
    for _ in range(int(counts.max()).bit_length()):  # halves every key's [lo, hi) each time
        mid = (lo + hi) >> 1
        less = table[np.minimum(mid, len(table) - 1)] < keys
        lo = np.where(less & (lo < hi), mid + 1, lo)
        hi = np.where(less, hi, mid)
    pos = np.minimum(lo, len(table) - 1)
    found = (lo < end) & (table[pos] == keys)
    pos = pos[found]
    starts = np.concatenate([t.starts for t in tables])[pos]
    sizes = np.concatenate([t.sizes for t in tables])[pos]
    return found, starts, sizes



class _Nth:
    """The place of the i-th index of a batch, spelled only when a message is written."""

    __slots__ = ("where", "i")

    def __init__(self, where: Callable[[int], str], i: int) -> None:
        self.where, self.i = where, i

    def __str__(self) -> str:
        return self.where(self.i)


def decode_minishard_indices(bufs: Sequence[Blob], encoding: str, index_end: int,
                             file_size: int, where: Callable[[int], str],
                             limit: int = MAX_MINISHARD_INDEX_BYTES) -> list[MinishardIndex]:
    """Decode many minishard indices of one shard file at once (vectorized over all of them).

    Every chunk range must lie between the end of the shard index and the end of the
    ``file_size``-byte file; an index may inflate to at most ``limit`` bytes. ``where(i)``
    names the file and the place of the i-th index for error messages.
    """
    raws: Sequence[Blob] = bufs if encoding == "raw" else [
        decode(b, encoding, _Nth(where, i), limit) for i, b in enumerate(bufs)]
    lengths = np.fromiter(map(len, raws), np.int64, count=len(raws))
    bad = np.flatnonzero(lengths % 24)
    if len(bad):
        raise CorruptDataError(f"{where(int(bad[0]))}: minishard index of "
                               f"{int(lengths[bad[0]])} bytes is not a multiple of 24")
    counts = lengths // 24
    first = np.cumsum(counts) - counts
    total = int(counts.sum())
    keys, starts, sizes = (np.empty(total, _U64) for _ in range(3))
    # one compiled pass: the sums of the deltas (restarting at each table), the bounds, the order
    outside, rising = minishard_tables(raws[0] if len(raws) == 1 else b"".join(raws), counts,
                                   int(index_end), int(file_size), keys, starts, sizes)

    def table_of(i: int) -> int:
        return int(np.searchsorted(first + counts, i, side="right"))

    if outside >= 0:
        i = outside
        raise CorruptDataError(
            f"{where(table_of(i))}: chunk {int(keys[i])} claims bytes [{int(starts[i])}, "
            f"{int(starts[i]) + int(sizes[i])}) outside [{index_end}, {file_size}), the data "
            f"region of the file")
    if not rising:  # writers usually sort; one array at a time
        order = np.lexsort((keys, np.repeat(np.arange(len(raws)), counts))) if len(raws) > 1 \
            else np.argsort(keys, kind="stable")
        keys = keys[order]
        starts = starts[order]
        sizes = sizes[order]
        del order
        same = keys[1:] == keys[:-1]
        same[first[counts > 0][1:] - 1] = False  # the last entry of a table and the next's first
        dup = np.flatnonzero(same)
        if len(dup):
            raise CorruptDataError(f"{where(table_of(int(dup[0])))}: key {int(keys[dup[0]])} "
                                   f"appears twice in one minishard index")
    ends = (first + counts).tolist()
    return [MinishardIndex(keys[a:b], starts[a:b], sizes[a:b])
            for a, b in zip(first.tolist(), ends)]


def decode_minishard_index(buf: bytes, encoding: str, index_end: int, file_size: int,
                           where: str = "") -> MinishardIndex:
    """Decode one minishard index; every chunk range must lie inside the ``file_size`` file."""
    return decode_minishard_indices([buf], encoding, index_end, file_size, lambda _: where)[0]


def encode_minishard_indices(minishards: np.ndarray, keys: np.ndarray, starts: np.ndarray,
                             sizes: np.ndarray, index_end: int, num_minishards: int,
                             encoding: str) -> tuple[list[Blob], np.ndarray]:
    """Encode the minishard indices of all chunks of a shard at once.

    The chunks must be grouped by minishard (sorted by minishard, then key); ``starts`` are
    absolute file offsets, anywhere in the file. Returns the encoded indices in minishard order
    and the encoded length of each of the ``num_minishards`` minishards (0 where empty).
    """
    keys, starts, sizes = (np.asarray(a, np.uint64) for a in (keys, starts, sizes))
    n = len(keys)
    counts = np.bincount(minishards.astype(np.intp), minlength=num_minishards)
    nonempty = np.flatnonzero(counts)
    ends = np.cumsum(counts)
    first = (ends - counts)[nonempty]  # entry number where each non-empty minishard begins
    # rows of the [3, n] table of all chunks; minishard m's index is its columns, C order
    rows = np.empty((3, n), _U64)
    np.subtract(keys[1:], keys[:-1], out=rows[0, 1:])
    np.subtract(starts[1:], starts[:-1] + sizes[:-1], out=rows[1, 1:])
    rows[0, first] = keys[first]  # deltas restart in each minishard
    rows[1, first] = starts[first] - np.uint64(index_end)
    rows[2] = sizes
    lengths = np.zeros(num_minishards, np.int64)
    spans = list(zip(first.tolist(), ends[nonempty].tolist()))
    if encoding == "raw":
        lengths[nonempty] = 24 * counts[nonempty]
        return ([b"".join(rows[:, a:b].tobytes() for a, b in spans)] if n else []), lengths
    # level 1: a minishard index is a few KiB of deltas that compress as well there as at
    # level 6, and per-call setup dominates (a third less time per call)
    parts: list[Blob] = [gzip_compress(rows[:, a:b].tobytes(), 1) for a, b in spans]
    lengths[nonempty] = np.fromiter(map(len, parts), np.int64, len(parts))
    return parts, lengths


def encode_shard(minishards: np.ndarray, keys: np.ndarray, values: Sequence[Blob],
                 num_minishards: int, index_encoding: str) -> list[Blob]:
    """A whole shard file as a list of byte strings to write one after the other.

    Chunks must be sorted by (minishard, key) and ``values`` already data-encoded. Layout:
    shard index, chunk data in that order, then the minishard indices in minishard order.
    """
    sizes = np.fromiter(map(len, values), np.uint64, count=len(values))
    return assemble_shard(minishards, keys, sizes, values, num_minishards, index_encoding)


def assemble_shard(minishards: np.ndarray, keys: np.ndarray, sizes: np.ndarray,
                   data: Sequence, num_minishards: int, index_encoding: str,
                   offsets: np.ndarray | None = None, data_size: int | None = None) -> list:
    """Like :func:`encode_shard`, with the chunk data given as any list of parts (buffers, or
    whatever the writer copies) forming a data region of ``data_size`` bytes in which chunk i
    starts at ``offsets[i]``. By default the chunks lie back to back in the given order."""
    index_end = 16 * num_minishards
    sizes = np.asarray(sizes, np.uint64)
    if offsets is None:
        offsets = np.cumsum(sizes, dtype=np.uint64) - sizes
        data_size = int(sizes.sum())
    elif data_size is None:
        raise TypeError("assemble_shard: offsets need the data_size of their region")
    starts = np.asarray(offsets, np.uint64) + np.uint64(index_end)
    parts, lengths = encode_minishard_indices(minishards, keys, starts, sizes, index_end,
                                              num_minishards, index_encoding)
    ends = index_end + data_size + np.cumsum(lengths)
    ranges = np.stack([ends - lengths, ends], axis=1).astype(np.uint64)
    return [encode_shard_index(ranges, num_minishards), *data, *parts]


# --- whole shards held in memory ----------------------------------------------------------

class Entries(NamedTuple):
    """Chunk entries of a shard: minishard, key, absolute start and size, as parallel arrays."""

    minishards: np.ndarray
    keys: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    @classmethod
    def of(cls, indices: dict[int, MinishardIndex]) -> Entries:
        ms = sorted(m for m, idx in indices.items() if len(idx.keys))
        if not ms:
            return cls(*(np.zeros(0, np.uint64) for _ in range(4)))
        counts = [len(indices[m].keys) for m in ms]
        return cls(np.repeat(np.array(ms, np.uint64), counts),
                   *(np.concatenate([getattr(indices[m], f) for m in ms])
                     for f in ("keys", "starts", "sizes")))

    def without(self, keys: np.ndarray) -> Entries:
        """The entries whose key is not in ``keys`` (sorted)."""
        keep = ~member(self.keys, keys)
        return Entries(*(col[keep] for col in self))


def decode_all(spec: ShardingSpec, data: Blob, where: str
               ) -> dict[int, MinishardIndex]:
    """Every non-empty minishard index of a whole shard file held in memory."""
    ranges = decode_shard_index(bytes(data[:spec.shard_index_size]), spec.num_minishards,
                                len(data), where)
    ms = np.flatnonzero(ranges[:, 0] != ranges[:, 1]).tolist()
    bufs = [data[int(ranges[m, 0]):int(ranges[m, 1])] for m in ms]
    indices = decode_minishard_indices(
        bufs, spec.minishard_index_encoding, spec.shard_index_size, len(data),
        lambda i: f"{where} (minishard {ms[i]} index at offset {int(ranges[ms[i], 0])})")
    return dict(zip(ms, indices))
