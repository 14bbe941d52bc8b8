"""What callers hand to the writers, checked and brought to one form: (key, value) pairs in
batches (:func:`pair_batches`), and values given as arrays (the array form of ``write_kv`` and
``ShardedKV.set_many``) as :class:`Values`, without copying them."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from .._arrays import gather
from ..limits import KEY_BLOCK, PAIR_BATCH, PAIR_BATCH_BYTES, PAIR_BATCH_FIRST
from .spec import as_key_array


class Values(NamedTuple):
    """n values in one uint8 array ``data``: value i is ``data[offsets[i] - offsets[0]:
    offsets[i + 1] - offsets[0]]``, or where ``offsets`` is None, the i-th ``width`` bytes;
    or given as a list of bytes-like ``items`` (``offsets`` then their running lengths). The
    caller's offsets and items are kept as they are: nothing is copied here."""

    data: np.ndarray | None
    offsets: np.ndarray | None
    width: int = 0
    items: list | None = None

    def spans(self, which: np.ndarray | slice) -> tuple[np.ndarray, np.ndarray]:
        """(starts in ``data``, lengths) of the values ``which`` picks (indices or a slice)."""
        if isinstance(which, slice):
            which = np.arange(which.start, which.stop)
        if self.offsets is None:
            return which.astype(np.int64) * self.width, np.full(len(which), self.width,
                                                                np.int64)
        lo = self.offsets[which].astype(np.int64)
        return lo - int(self.offsets[0]), self.offsets[which + 1].astype(np.int64) - lo

    def take(self, which: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The values ``which`` picks, back to back as one uint8 array, and their lengths."""
        if self.items is not None:  # one join of the picked objects, at C speed
            chosen = list(map(self.items.__getitem__, which.tolist()))
            return np.frombuffer(b"".join(chosen), np.uint8), \
                np.fromiter(map(len, chosen), np.int64, len(chosen))
        assert self.data is not None, "Values without data or items"
        starts, lengths = self.spans(which)
        return gather(self.data, starts, lengths), lengths

    def cut(self, first: int, count: int, budget: int) -> int:
        """Where a run of values from ``first`` holding about ``budget`` bytes ends (at least
        one value, at most ``count`` in all)."""
        if self.offsets is None:
            last = first + budget // self.width if self.width else count
        else:
            last = int(np.searchsorted(self.offsets, self.offsets[first] + budget,
                                       side="right")) - 1
        return min(count, max(first + 1, last))


def value_arrays(keys: Any, values: Any, offsets: Any = None) -> tuple[np.ndarray, Values]:
    """Keys and values in the form the array writers take: uint64 keys and :class:`Values`.

    Raises
    ------
    InvalidKeyError
        A key outside [0, 2**64).
    TypeError
        Values of a type not described in :func:`ngshard.write_kv`.
    ValueError
        Offsets (or rows, or list items) that do not match the number of keys.
    """
    keys = as_key_array(keys)
    n = len(keys)
    if values is None:
        raise TypeError("keys= needs values=")
    if isinstance(values, (list, tuple)):
        if not set(map(type, values)) <= {bytes}:  # the common case checked at C speed
            bad = next((i for i, v in enumerate(values)
                        if not isinstance(v, (bytes, bytearray, memoryview))), None)
            if bad is not None:
                raise TypeError(f"value of key {int(keys[bad]) if bad < n else bad} must be "
                                f"bytes, got {type(values[bad]).__name__}")
        if offsets is not None:
            raise TypeError("offsets= goes with one buffer of values, not a list")
        _same_count(n, len(values), "values")
        ends = np.cumsum(np.fromiter(map(len, values), np.int64, count=len(values)))
        return keys, Values(None, np.r_[0, ends], items=list(values))
    if isinstance(values, np.ndarray) and values.ndim == 2:
        if offsets is not None:
            raise TypeError("offsets= goes with one buffer of values, not rows")
        _same_count(n, len(values), "rows of values")
        rows = np.ascontiguousarray(values)
        return keys, Values(rows.view(np.uint8).reshape(-1), None, rows.shape[1] * rows.itemsize)
    try:
        buf = np.frombuffer(memoryview(values).cast("B"), np.uint8) \
            if not isinstance(values, np.ndarray) else \
            np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    except TypeError:
        raise TypeError(f"values must be a buffer, a 2-D array or a list of bytes, got "
                        f"{type(values).__name__}") from None
    if offsets is None:
        raise TypeError("values= as one buffer needs offsets= (n + 1 boundaries)")
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu":
        raise ValueError(f"offsets must be a 1-D integer array, got {offsets.dtype} "
                         f"of shape {offsets.shape}")
    _same_count(n + 1, len(offsets), "offsets (n + 1 boundaries)")
    if not n:
        return keys, Values(buf[:0], None, 0)
    width = int(offsets[1]) - int(offsets[0])
    falls, even = False, True
    for a in range(0, n, KEY_BLOCK):  # a block at a time: no temporary of n items
        steps = np.diff(offsets[a:a + KEY_BLOCK + 1].astype(np.int64))
        falls |= bool((steps < 0).any())
        even &= bool((steps == width).all())
    if offsets[0] < 0 or offsets[-1] > len(buf) or falls:
        raise ValueError(f"offsets must rise from 0 or more to at most the {len(buf)} bytes "
                         f"of values, never falling")
    data = buf[int(offsets[0]):int(offsets[-1])]
    if even:
        return keys, Values(data, None, width)  # equal sizes: no offsets needed
    return keys, Values(data, offsets)


def _same_count(expected: int, got: int, what: str) -> None:
    if expected != got:
        raise ValueError(f"{expected} expected, but {got} {what} given")


def as_bytes(value: Any, key: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"value of key {key} must be bytes, got {type(value).__name__}")


def pair_batches(items: Mapping[int, bytes] | Iterable[tuple[int, bytes]]
             ) -> Iterator[tuple[np.ndarray, list[bytes]]]:
    """(keys, values) in batches, keys checked and converted at numpy speed. A batch is let go
    before the next one is read, so only one is ever held."""
    if isinstance(items, Mapping):
        keys, values = list(items.keys()), list(items.values())
        if not set(map(type, values)) <= {bytes}:
            values = [as_bytes(v, k) for k, v in zip(keys, values)]
        yield as_key_array(keys), values
        return
    it = iter(items)
    first, second = operator.itemgetter(0), operator.itemgetter(1)
    count = PAIR_BATCH_FIRST
    while True:
        batch = list(itertools.islice(it, count))
        if not batch:
            return
        keys, values = list(map(first, batch)), list(map(second, batch))
        del batch
        if not set(map(type, values)) <= {bytes}:
            values = [as_bytes(v, k) for k, v in zip(keys, values)]
        # the next batch holds about PAIR_BATCH_BYTES of values like these
        mean = sum(map(len, values)) / len(values)
        count = int(min(PAIR_BATCH, max(PAIR_BATCH_FIRST, PAIR_BATCH_BYTES // max(mean, 1))))
        yield as_key_array(keys), values
        del keys, values
