"""Staged changes of a sharded store, bounded in memory by spilling to per-shard files.

Changes (a value, or None for a deletion) arrive one at a time (a dict) or in batches: keys as
a uint64 array, the values copied once into a numpy byte block per batch, so no Python object
per value is kept. (Numpy blocks, not a growing bytearray or ``b"".join``: numpy backs large
arrays with huge pages, and the page faults of a fresh 4 KiB-paged buffer cost several times
the copy itself.)
Past ``limit_bytes`` (the values plus 48 bytes per key, what a key costs while spilling)
everything in memory is sorted by shard and key and appended to the spill files (``spill.py``)
as one run per shard, and nothing per key stays in memory. Later changes win: spilled runs are
older than memory, batches are in arrival order, and the dict is the newest (a batch first
turns the dict into a batch of its own).

Planning and committing take the changes one shard at a time (:meth:`Staging.iter_changes`),
so their memory follows the largest shard, not the number of keys.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

import numpy as np

from .._arrays import gather, member, uint_dtype
from ..limits import KEY_BLOCK
from ..types import Blob
from .changes import DELETED, ShardChanges, last_wins
from .inputs import Values
from .spec import ShardingSpec
from .spill import SpillFiles

# Memory per staged key counted against the limit: its key and length, and the sorting that
# spilling does.
KEY_BYTES = 48
# Values of at least this many bytes on average are worth a Python step each: a batch of them
# is laid out in shard order, and they are copied one slice each between blocks.
LARGE_VALUE = 4096


def _starts(lengths: np.ndarray) -> np.ndarray:
    """Where each value starts among back-to-back values (deletions take no bytes)."""
    sizes = np.maximum(lengths, 0)
    return np.cumsum(sizes) - sizes


def _lengths(values: Sequence) -> np.ndarray:
    """Length of each value, DELETED for None (the common no-deletion case at C speed)."""
    if None not in values:
        return np.fromiter(map(len, values), np.int64, count=len(values))
    return np.fromiter((DELETED if v is None else len(v) for v in values), np.int64,
                       count=len(values))


class Staging:
    """Staged key changes; ``limit_bytes`` bounds what is held in memory."""

    def __init__(self, spec: ShardingSpec, limit_bytes: int, spill_dir: str | None = None,
                 durable: bool = False):
        self.spec, self.limit_bytes = spec, limit_bytes
        self._dict: dict[int, Blob | None] = {}
        self._keys: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._blocks: list[np.ndarray] = []  # the values of the batches, back to back (uint8)
        self._mem_bytes = 0
        self.spilled_files = SpillFiles(spec, spill_dir, durable)
        self.version = 0  # counts changes, so a plan can tell it still fits

    # --- changes ---------------------------------------------------------------------------

    def set(self, key: int, value: Blob | None) -> None:
        """Stage one value (None: a deletion)."""
        self.version += 1
        if key in self._dict:  # replaces a value staged here
            old = self._dict[key]
            self._mem_bytes -= len(old) if old is not None else 0
        else:
            self._mem_bytes += KEY_BYTES
        self._mem_bytes += len(value) if value is not None else 0
        self._dict[key] = value
        if self._mem_bytes > self.limit_bytes:
            self.spill()

    def set_many(self, keys: np.ndarray, values: Sequence[Blob | None]) -> None:
        """Stage a batch of values without per-key Python work (None: a deletion, staged
        one by one: deletions are few)."""
        if None in values:
            for key, value in zip(keys.tolist(), values):
                self.set(key, value)
            return
        blobs = cast(Sequence[Blob], values)  # no None among them
        lengths = _lengths(blobs)
        total = int(lengths.sum())
        if len(blobs) > 1 and total >= LARGE_VALUE * len(blobs):
            # in the order a commit takes them (shard, minishard, key; repeated keys keep
            # their order): a shard's values are then one run of the block, written as is
            order = self.commit_order(keys)
            keys, lengths = keys[order], lengths[order]
            blobs = [blobs[i] for i in order.tolist()]
        block = np.empty(total, np.uint8)
        view, end = block.data, 0
        for value in blobs:  # one copy of each value, straight into the block
            n = len(value)
            view[end:end + n] = value
            end += n
        self._add(keys, lengths, block, owned=True)

    def commit_order(self, keys: np.ndarray) -> np.ndarray:
        """The order in which a commit writes the values of ``keys`` (shard, minishard, key;
        repeated keys keep their order): a shard's values staged back to back in it, in one
        block, are written as they lie."""
        return np.lexsort((keys, self._placement(keys)))

    def set_arrays(self, keys: np.ndarray, values: Values, adopt: bool = False) -> None:
        """Stage ``len(keys)`` values given as :class:`~.inputs.Values`, a part at a time
        (so a huge batch spills as it goes rather than all at once); ``adopt``: values in one
        uint8 array handed over by the caller, kept as it is (in memory already: no parts)."""
        if adopt and values.data is not None:
            self._add(keys, values.spans(slice(0, len(keys)))[1], values.data, owned=True)
            return
        step = max(1, self.limit_bytes // 4)
        first = 0
        while first < len(keys):
            last = values.cut(first, len(keys), step)
            if values.items is not None:
                self.set_many(keys[first:last], values.items[first:last])
                first = last
                continue
            assert values.data is not None, "Values without data or items"
            starts, lengths = values.spans(slice(first, last))
            a = int(starts[0])
            self._add(keys[first:last], lengths, values.data[a:a + int(lengths.sum())])
            first = last

    def _add(self, keys: np.ndarray, lengths: np.ndarray, data, owned: bool = False) -> None:
        """Stage a batch; ``owned``: ``data`` is a uint8 array nobody else holds (kept as it
        is, else copied)."""
        self.version += 1
        self._fold_dict()
        self._keys.append(keys)
        self._lengths.append(lengths)
        self._blocks.append(data if owned else np.frombuffer(data, np.uint8).copy())
        self._mem_bytes += len(data) + KEY_BYTES * len(keys)
        if self._mem_bytes > self.limit_bytes:
            self.spill()

    def _fold_dict(self) -> None:
        if self._dict:
            values = list(self._dict.values())
            self._keys.append(np.fromiter(self._dict, np.uint64, count=len(self._dict)))
            self._lengths.append(_lengths(values))
            self._blocks.append(np.frombuffer(b"".join(v for v in values if v is not None),
                                              np.uint8))
            self._dict = {}

    def _memory(self, fold: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The batches in memory as (keys, lengths), oldest first; with ``fold``, the dict
        turned into a batch first, so that they are everything in memory."""
        if fold:
            self._fold_dict()
        if len(self._keys) > 1:
            self._keys, self._lengths = [np.concatenate(self._keys)], \
                [np.concatenate(self._lengths)]
        if not self._keys:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return self._keys[0], self._lengths[0]

    def _data(self) -> np.ndarray:
        """The values in memory back to back, as one uint8 array (the blocks joined once)."""
        if len(self._blocks) != 1:
            self._blocks = [np.concatenate(self._blocks) if self._blocks
                            else np.zeros(0, np.uint8)]
        return self._blocks[0]

    def _values(self, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """The values at ``starts`` (among all blocks) of ``sizes`` bytes, back to back as one
        uint8 array: a view where they lie so in one block already (blocks never change),
        large values copied one slice each from their blocks, small ones gathered."""
        if not sizes.sum():  # empty values only (perhaps no block at all)
            return np.zeros(0, np.uint8)
        bounds = np.cumsum([0, *map(len, self._blocks)])
        # an empty value at the very end starts where no block does: say the last one
        block = np.minimum(np.searchsorted(bounds, starts, side="right") - 1,
                           len(self._blocks) - 1)
        if len(starts) and (block == block[0]).all() and \
                (starts[1:] == starts[:-1] + sizes[:-1]).all():
            first = int(starts[0] - bounds[block[0]])
            return self._blocks[int(block[0])][first:first + int(sizes.sum())]
        if len(self._blocks) == 1 or sizes.sum() < LARGE_VALUE * len(sizes):
            return gather(self._data(), starts, sizes)
        out = np.empty(int(sizes.sum()), np.uint8)
        at = 0
        for b, s, n in zip(block.tolist(), (starts - bounds[block]).tolist(), sizes.tolist()):
            out[at:at + n] = self._blocks[b][s:s + n]
            at += n
        return out

    def __bool__(self) -> bool:
        return bool(self._dict) or bool(self._keys) or bool(self.spilled_files)

    @property
    def spilled(self) -> bool:
        return bool(self.spilled_files)

    # --- reading staged changes --------------------------------------------------------------

    def lookup(self, key: int) -> tuple[bool, Blob | None]:
        """(staged?, value) of one key; value None for a staged deletion."""
        if key in self._dict:
            return True, self._dict[key]
        mem_keys, mem_lengths = self._memory(fold=False)  # the dict was searched above
        hits = np.flatnonzero(mem_keys == np.uint64(key))  # a scan, not a sort: one key
        if len(hits):
            i = int(hits[-1])
            n = int(mem_lengths[i])
            start = int(_starts(mem_lengths[:i + 1])[-1]) if n >= 0 else 0
            return True, None if n < 0 else self._data()[start:start + n].tobytes()
        found = self.lookup_many(np.array([key], np.uint64)) if self.spilled_files else {}
        return (True, found[key]) if key in found else (False, None)

    def lookup_many(self, keys: np.ndarray) -> dict[int, bytes | None]:
        """The staged keys among sorted unique ``keys``: {key: value, None for a deletion}."""
        mem_keys, mem_lengths = self._memory()
        starts = _starts(mem_lengths)
        pick = last_wins(mem_keys)
        in_memory = member(keys, mem_keys[pick])
        hits = pick[np.searchsorted(mem_keys[pick], keys[in_memory])]
        data = self._data()
        found: dict[int, bytes | None] = {
            k: None if n < 0 else data[s:s + n].tobytes() for k, n, s in
            zip(keys[in_memory].tolist(), mem_lengths[hits].tolist(), starts[hits].tolist())}
        rest = keys[~in_memory]
        if self.spilled_files and len(rest):
            nums = self.spec.locate(rest)[0].astype(np.int64)
            for shard in np.intersect1d(nums, self.spilled_files.shards()).tolist():
                changes = self.spilled_files.changes(shard, rest[nums == shard])
                found.update(zip(changes.keys.tolist(), changes.values()))
        return found

    def status(self) -> tuple[np.ndarray, np.ndarray]:
        """Every changed key, sorted, and the length of its staged value (DELETED: deletion).
        O(keys) memory: for listing only; planning and committing go shard by shard."""
        parts = [(c.keys, c.lengths) for c in self.iter_changes(data=False)]
        if not parts:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        keys, lengths = map(np.concatenate, zip(*parts))
        order = np.argsort(keys)
        return keys[order], lengths[order]

    def iter_changes(self, data: bool = True) -> Iterator[ShardChanges]:
        """The net changes of every shard with staged changes, in shard order, one shard at a
        time (with their values where ``data``). Once anything has spilled, memory is spilled
        too, so each shard's changes come from its spill files alone."""
        if self.spilled_files:
            self.spill()
            for shard in self.spilled_files.shards():
                yield self.spilled_files.changes(shard)
            return
        yield from self._memory_changes(data)

    def _memory_changes(self, with_data: bool) -> Iterator[ShardChanges]:
        """The net changes in memory, shard by shard, each in (minishard, key) order with the
        newest change of each key."""
        keys, lengths = self._memory()
        if not len(keys):
            return
        place = self._placement(keys)
        # by (shard, minishard), then key, then age (both sorts are stable); few temporaries
        # at a time, as the buffer may hold millions of keys
        order = np.argsort(keys, kind="stable")
        order = order[np.argsort(place[order], kind="stable")]
        newest = np.ones(len(order), bool)
        sorted_keys = keys[order]
        newest[:-1] = sorted_keys[1:] != sorted_keys[:-1]
        del sorted_keys
        pick = order[newest]
        del order, newest
        starts = _starts(lengths) if with_data else None
        bits = self.spec.minishard_bits
        nums = place[pick] >> place.dtype.type(bits)
        cuts = (np.flatnonzero(np.diff(nums)) + 1).tolist()
        for a, b in zip([0, *cuts], [*cuts, len(pick)]):
            group = pick[a:b]
            g_lengths = lengths[group]
            values = None
            if starts is not None:  # with_data
                is_set = g_lengths != DELETED
                values = self._values(starts[group][is_set], g_lengths[is_set])
            yield ShardChanges(int(nums[a]), keys[group], g_lengths, data=values)

    def _placement(self, keys: np.ndarray) -> np.ndarray:
        """(shard << minishard_bits) | minishard of each key, in the narrowest dtype (hashed
        a block at a time)."""
        spec = self.spec
        out = np.empty(len(keys), uint_dtype(1 << (spec.shard_bits + spec.minishard_bits)))
        shift = np.uint64(spec.minishard_bits)
        for a in range(0, len(keys), KEY_BLOCK):
            shard, minishard = spec.locate(keys[a:a + KEY_BLOCK])
            out[a:a + KEY_BLOCK] = (shard << shift) | minishard
        return out

    def clear(self) -> None:
        self.version += 1
        self._dict = {}
        self._keys, self._lengths = [], []
        self._blocks = []
        self._mem_bytes = 0
        self.spilled_files.clear()

    # --- spilling --------------------------------------------------------------------------

    def spill(self) -> None:
        """Move the in-memory changes to the spill files, one sorted run per shard."""
        for changes in self._memory_changes(True):
            assert changes.data is not None
            self.spilled_files.append(changes.shard, changes.keys, changes.lengths,
                                      changes.data)
        self._keys, self._lengths = [], []
        self._blocks = []
        self._mem_bytes = 0

    def __del__(self) -> None:
        files = getattr(self, "spilled_files", None)
        if files is not None:
            files.clear()
