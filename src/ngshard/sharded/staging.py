"""Staged changes of a sharded store, bounded in memory by spilling to per-shard temp files.

Changes (a value, or None for a deletion) arrive one at a time (a dict) or in batches (arrays of
keys with lists of values, no per-key work). When the staged bytes pass the limit, everything in
memory is partitioned by shard and appended to one spill file per shard; what stays in memory
per spilled change is 16 bytes of numpy arrays. Later changes win: spill files are older than
the batches, batches are in arrival order, and the dict is the newest (a batch first turns the
dict into a batch of its own).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._arrays import member
from ..storage import SPILL_PREFIX, owner_tag, write_buffers
from .spec import ShardingSpec

DELETED = -1  # length recorded for a deletion


def _lengths(values: Sequence) -> np.ndarray:
    """Length of each value, DELETED for None (the common no-deletion case at C speed)."""
    if None not in values:
        return np.fromiter(map(len, values), np.int64, count=len(values))
    return np.fromiter((DELETED if v is None else len(v) for v in values), np.int64,
                       count=len(values))


def _last_of_runs(order: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """From a stable sort ``order`` in which equal keys are adjacent, the last (newest)
    position of each key."""
    last = np.ones(len(order), bool)
    last[:-1] = keys[order][1:] != keys[order][:-1]
    return order[last]


def last_wins(keys: np.ndarray) -> np.ndarray:
    """Positions of the last occurrence of each distinct key, in key order."""
    return _last_of_runs(np.argsort(keys, kind="stable"), keys)


@dataclass
class _Spilled:
    """The spilled changes of one shard: arrays in spill order, values in ``path``."""

    path: str
    keys: list[np.ndarray] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)


@dataclass
class ShardChanges:
    """The net changes of one shard: keys sorted, their values' lengths (DELETED marks a
    deletion) and the values, either in memory or, for a shard whose changes all sit in its
    spill file, as ``offsets`` into ``source`` (read only if :attr:`values` is asked for)."""

    shard: int
    keys: np.ndarray
    lengths: np.ndarray
    _values: list[bytes | memoryview | None] | None = None
    source: str | None = None
    offsets: np.ndarray | None = None

    @property
    def deleted(self) -> np.ndarray:
        return self.lengths == DELETED

    @property
    def values(self) -> list[bytes | memoryview | None]:
        """The values (None for deletions); memoryviews into the spill file once read."""
        if self._values is None:
            with open(self.source, "rb") as f:
                blob = memoryview(f.read())
            self._values = [None if n < 0 else blob[o:o + n]
                            for o, n in zip(self.offsets.tolist(), self.lengths.tolist())]
        return self._values


class Staging:
    """Staged key changes; ``limit_bytes`` bounds the value bytes held in memory."""

    def __init__(self, spec: ShardingSpec, limit_bytes: int, spill_dir: str | None = None):
        self.spec, self.limit_bytes, self._spill_parent = spec, limit_bytes, spill_dir
        # Spill files start with room for a shard index (a hole, not written), so a new shard
        # can be made from one in place: see shardupdate.shard_from_file.
        self.header = spec.shard_index_size
        self._dict: dict[int, bytes | None] = {}
        self._batches: list[tuple[np.ndarray, np.ndarray, list]] = []  # keys, lengths, values
        self._mem_bytes = 0
        self._spilled: dict[int, _Spilled] = {}
        self._tmp: str | None = None
        self.version = 0  # counts changes, so a plan can tell it still fits

    # --- changes ---------------------------------------------------------------------------

    def set(self, key: int, value: bytes | None) -> None:
        """Stage one value (None: a deletion)."""
        self.version += 1
        old = self._dict.get(key)
        self._mem_bytes += (len(value) if value is not None else 0) - \
            (len(old) if old is not None else 0)
        self._dict[key] = value
        if self._mem_bytes > self.limit_bytes:
            self.spill()

    def set_many(self, keys: np.ndarray, values: list[bytes]) -> None:
        """Stage a batch of values (None: a deletion) without per-key Python work."""
        self.version += 1
        self._fold_dict()
        lengths = _lengths(values)
        self._batches.append((keys, lengths, values))
        self._mem_bytes += int(np.maximum(lengths, 0).sum())
        if self._mem_bytes > self.limit_bytes:
            self.spill()

    def _fold_dict(self) -> None:
        if self._dict:
            values = list(self._dict.values())
            keys = np.fromiter(self._dict, np.uint64, count=len(self._dict))
            self._batches.append((keys, _lengths(values), values))
            self._dict = {}

    def _memory(self) -> tuple[np.ndarray, np.ndarray, list]:
        """Everything in memory as (keys, lengths, values), oldest change first."""
        self._fold_dict()
        if len(self._batches) > 1:
            keys, lengths, values = zip(*self._batches)
            self._batches = [(np.concatenate(keys), np.concatenate(lengths),
                              [v for vs in values for v in vs])]
        if not self._batches:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64), []
        return self._batches[0]

    def __bool__(self) -> bool:
        return bool(self._dict) or bool(self._batches) or bool(self._spilled)

    @property
    def spilled(self) -> bool:
        return bool(self._spilled)

    def status(self) -> tuple[np.ndarray, np.ndarray]:
        """Every changed key, sorted, and the length of its staged value (DELETED: deletion)."""
        mem_keys, mem_lengths, _ = self._memory()
        keys = np.concatenate([k for s in self._spilled.values() for k in s.keys] + [mem_keys])
        lengths = np.concatenate([n for s in self._spilled.values() for n in s.lengths]
                                 + [mem_lengths])
        pick = last_wins(keys)
        return keys[pick], lengths[pick]

    def lookup(self, key: int) -> tuple[bool, bytes | None]:
        """(staged?, value) of one key; value None for a staged deletion."""
        if key in self._dict:
            return True, self._dict[key]
        k = np.uint64(key)
        for keys, _, values in reversed(self._batches):
            hits = np.flatnonzero(keys == k)
            if len(hits):
                return True, values[hits[-1]]
        found = self._spilled_lookup(np.array([key], np.uint64))
        return (True, found[key]) if key in found else (False, None)

    def lookup_many(self, keys: np.ndarray) -> dict[int, bytes | None]:
        """The staged keys among sorted unique ``keys``: {key: value, None for a deletion}."""
        mem_keys, _, mem_values = self._memory()
        pick = last_wins(mem_keys)
        in_memory = member(keys, mem_keys[pick])
        pos = np.searchsorted(mem_keys[pick], keys[in_memory])
        found = dict(zip(keys[in_memory].tolist(),
                         map(mem_values.__getitem__, pick[pos].tolist())))
        found.update(self._spilled_lookup(keys[~in_memory]))
        return found

    def _spilled_lookup(self, keys: np.ndarray) -> dict[int, bytes | None]:
        """Spilled changes of ``keys`` (reading only their values), one pass per shard."""
        if not self._spilled or not len(keys):
            return {}
        nums = self.spec.locate(keys)[0].astype(np.int64)
        found: dict[int, bytes | None] = {}
        for shard in np.intersect1d(nums, list(self._spilled)).tolist():
            changes = self._spilled_changes(shard, keys[nums == shard])
            found.update(zip(changes.keys.tolist(), changes.values))
        return found

    def iter_changes(self) -> Iterator[ShardChanges]:
        """The net changes of every shard with staged changes, in shard order; each shard's
        spill file is read once, when its turn comes."""
        mem_keys, mem_lengths, mem_values = self._memory()
        nums = self.spec.locate(mem_keys)[0].astype(np.int64) if len(mem_keys) \
            else np.zeros(0, np.int64)
        # by shard, then key; lexsort is stable, so the last of equal keys is the newest
        pick = _last_of_runs(np.lexsort((mem_keys, nums)), mem_keys)
        nums_sorted = nums[pick]
        shards = np.union1d(np.unique(nums), np.array(sorted(self._spilled), np.int64))
        starts = np.searchsorted(nums_sorted, shards, side="left").tolist()
        ends = np.searchsorted(nums_sorted, shards, side="right").tolist()
        for shard, a, b in zip(shards.tolist(), starts, ends):
            idx = pick[a:b]
            keys, lengths = mem_keys[idx], mem_lengths[idx]
            values = list(map(mem_values.__getitem__, idx.tolist()))
            spilled = self._spilled_changes(shard)
            if spilled is not None and not len(keys):
                yield spilled
                continue
            if spilled is not None:  # memory is newer than every spill batch
                keep = ~member(spilled.keys, keys)
                keys = np.concatenate([spilled.keys[keep], keys])
                lengths = np.concatenate([spilled.lengths[keep], lengths])
                values = list(itertools.compress(spilled.values, keep.tolist())) + values
                order = np.argsort(keys, kind="stable")
                keys, lengths = keys[order], lengths[order]
                values = list(map(values.__getitem__, order.tolist()))
            yield ShardChanges(shard, keys, lengths, values)

    def clear(self) -> None:
        self.version += 1
        self._dict = {}
        self._batches = []
        self._mem_bytes = 0
        self._spilled.clear()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # --- spilling --------------------------------------------------------------------------

    def spill(self) -> None:
        """Move the in-memory changes to the per-shard spill files."""
        keys, lengths, values = self._memory()
        if not len(keys):
            return
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=SPILL_PREFIX + owner_tag(),
                                         dir=self._spill_parent)
        nums = self.spec.locate(keys)[0]
        order = np.argsort(nums, kind="stable")
        bounds = np.flatnonzero(np.diff(nums[order])) + 1
        for group in np.split(order, bounds):
            shard = int(nums[group[0]])
            spilled = self._spilled.get(shard)
            if spilled is None:
                spilled = self._spilled[shard] = _Spilled(f"{self._tmp}/{shard}.spill")
                with open(spilled.path, "wb") as f:
                    f.truncate(self.header)
            vals = list(map(values.__getitem__, group.tolist()))
            if (lengths[group] == DELETED).any():
                vals = [v for v in vals if v is not None]
            fd = os.open(spilled.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                write_buffers(fd, vals)
            finally:
                os.close(fd)
            spilled.keys.append(keys[group])
            spilled.lengths.append(lengths[group])
        self._batches = []
        self._mem_bytes = 0

    def _spilled_changes(self, shard: int, only: np.ndarray | None = None
                         ) -> ShardChanges | None:
        spilled = self._spilled.get(shard)
        if spilled is None:
            return None
        keys = np.concatenate(spilled.keys)
        lengths = np.concatenate(spilled.lengths)
        sizes = np.maximum(lengths, 0)
        offsets = np.cumsum(sizes) - sizes + self.header
        pick = last_wins(keys)
        if only is not None:
            pick = pick[member(keys[pick], np.sort(only))]
        changes = ShardChanges(shard, keys[pick], lengths[pick], source=spilled.path,
                               offsets=offsets[pick])
        if only is not None:  # a few values: read just those
            with open(spilled.path, "rb") as f:
                changes._values = [None if n < 0 else os.pread(f.fileno(), n, o) for o, n in
                                   zip(changes.offsets.tolist(), changes.lengths.tolist())]
        return changes

    def __del__(self) -> None:
        if getattr(self, "_tmp", None) is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
