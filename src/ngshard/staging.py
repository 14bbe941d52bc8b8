"""Staged changes of a sharded store, bounded in memory by spilling to per-shard temp files.

Changes (a value, or None for a deletion) collect in a dict. When the staged bytes pass the
limit, the dict is partitioned by shard and appended to one spill file per shard; what stays in
memory per spilled change is 24 bytes of numpy arrays. Later changes win over earlier ones, so
every spill batch gets a sequence number and the dict counts as the newest batch.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from .spec import ShardingSpec

DELETED = -1  # length recorded for a spilled deletion


@dataclass
class _Spilled:
    """The spilled changes of one shard: arrays in spill order, values in ``path``."""

    path: str
    keys: list[np.ndarray] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)
    size: int = 0  # bytes in the spill file


@dataclass
class ShardChanges:
    """The net changes of one shard: keys sorted, values[i] None where key i is deleted.

    Values read back from a spill file are memoryviews into it (no copy).
    """

    shard: int
    keys: np.ndarray
    values: list[bytes | memoryview | None]

    @property
    def set_mask(self) -> np.ndarray:
        return np.fromiter((v is not None for v in self.values), bool, count=len(self.values))

    @property
    def nbytes(self) -> int:
        return sum(len(v) for v in self.values if v is not None)


class Staging:
    """Staged key changes; ``limit_bytes`` bounds the value bytes held in memory."""

    def __init__(self, spec: ShardingSpec, limit_bytes: int, spill_dir: str | None = None):
        self.spec, self.limit_bytes, self._spill_parent = spec, limit_bytes, spill_dir
        self._mem: dict[int, bytes | None] = {}
        self._mem_bytes = 0
        self._spilled: dict[int, _Spilled] = {}
        self._tmp: str | None = None

    # --- changes ---------------------------------------------------------------------------

    def set(self, key: int, value: bytes | None) -> None:
        old = self._mem.get(key)
        self._mem_bytes += (len(value) if value is not None else 0) - \
            (len(old) if old is not None else 0)
        self._mem[key] = value
        if self._mem_bytes > self.limit_bytes:
            self.spill()

    def set_many(self, keys: Iterable[int], values: list[bytes]) -> None:
        """Stage many values at once (no deletions). Replaced values still count towards the
        limit until the next spill, which only makes that spill come a little early."""
        self._mem.update(zip(keys, values))
        self._mem_bytes += sum(map(len, values))
        if self._mem_bytes > self.limit_bytes:
            self.spill()

    def __len__(self) -> int:
        """Number of distinct keys changed."""
        return len(self.keys())

    def __bool__(self) -> bool:
        return bool(self._mem) or bool(self._spilled)

    @property
    def spilled(self) -> bool:
        return bool(self._spilled)

    def status(self) -> tuple[np.ndarray, np.ndarray]:
        """Every changed key, sorted, and the length of its staged value (DELETED: deletion)."""
        vals = self._mem.values()
        mem_len = np.fromiter((DELETED if v is None else len(v) for v in vals), np.int64,
                              count=len(vals))
        keys = np.concatenate([k for s in self._spilled.values() for k in s.keys]
                              + [np.fromiter(self._mem, np.uint64, count=len(self._mem))])
        lengths = np.concatenate([n for s in self._spilled.values() for n in s.lengths]
                                 + [mem_len])
        # the last change of each key wins: a stable sort keeps the order of changes
        order = np.argsort(keys, kind="stable")
        last = np.ones(len(order), bool)
        last[:-1] = keys[order][1:] != keys[order][:-1]
        return keys[order[last]], lengths[order[last]]

    def keys(self) -> np.ndarray:
        """Every changed key (set or deleted), sorted."""
        return self.status()[0]

    def lookup(self, key: int) -> tuple[bool, bytes | None]:
        """(staged?, value) of one key; value None for a staged deletion."""
        if key in self._mem:
            return True, self._mem[key]
        if not self._spilled:
            return False, None
        changes = self._spilled_changes(self.spec.locate_one(key)[0], np.array([key], np.uint64))
        if changes is None or not len(changes.keys):
            return False, None
        return True, changes.values[0]

    def shards(self) -> np.ndarray:
        """Shard numbers with staged changes, sorted."""
        mem = np.fromiter(self._mem, np.uint64, count=len(self._mem))
        nums = self.spec.locate(mem)[0].astype(np.int64) if len(mem) else np.zeros(0, np.int64)
        return np.union1d(nums, np.array(sorted(self._spilled), np.int64))

    def iter_changes(self) -> Iterator[ShardChanges]:
        """The net changes of every shard with staged changes, in shard order; each shard's
        spill file is read once, when its turn comes."""
        mem_keys = np.fromiter(self._mem, np.uint64, count=len(self._mem))
        mem_values = list(self._mem.values())
        nums = self.spec.locate(mem_keys)[0].astype(np.int64) if len(mem_keys) \
            else np.zeros(0, np.int64)
        order = np.lexsort((mem_keys, nums))
        bounds = np.searchsorted(nums[order], self.shards(), side="left")
        ends = np.searchsorted(nums[order], self.shards(), side="right")
        for shard, a, b in zip(self.shards().tolist(), bounds.tolist(), ends.tolist()):
            idx = order[a:b]
            keys = mem_keys[idx]
            values = list(map(mem_values.__getitem__, idx.tolist()))
            spilled = self._spilled_changes(shard)
            if spilled is not None:  # the dict is newer than every spill batch
                keep = ~np.isin(spilled.keys, keys)
                keys = np.concatenate([spilled.keys[keep], keys])
                values = list(itertools.compress(spilled.values, keep.tolist())) + values
                resort = np.argsort(keys, kind="stable")
                keys = keys[resort]
                values = list(map(values.__getitem__, resort.tolist()))
            yield ShardChanges(shard, keys, values)

    def clear(self) -> None:
        self._mem.clear()
        self._mem_bytes = 0
        self._spilled.clear()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # --- spilling --------------------------------------------------------------------------

    def spill(self) -> None:
        """Move the in-memory changes to the per-shard spill files."""
        if not self._mem:
            return
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="ngshard-staged-", dir=self._spill_parent)
        keys = np.fromiter(self._mem, np.uint64, count=len(self._mem))
        values = list(self._mem.values())
        shard_nums = self.spec.locate(keys)[0]
        order = np.argsort(shard_nums, kind="stable")
        bounds = np.flatnonzero(np.diff(shard_nums[order])) + 1
        for group in np.split(order, bounds):
            shard = int(shard_nums[group[0]])
            spilled = self._spilled.get(shard)
            if spilled is None:
                spilled = self._spilled[shard] = _Spilled(f"{self._tmp}/{shard}.spill")
            vals = list(map(values.__getitem__, group.tolist()))
            if None in vals:
                lengths = np.fromiter((DELETED if v is None else len(v) for v in vals),
                                      np.int64, count=len(vals))
                vals = [v for v in vals if v is not None]
            else:
                lengths = np.fromiter(map(len, vals), np.int64, count=len(vals))
            with open(spilled.path, "ab") as f:
                f.writelines(vals)
            spilled.keys.append(keys[group])
            spilled.lengths.append(lengths)
            spilled.size += int(lengths[lengths > 0].sum())
        self._mem.clear()
        self._mem_bytes = 0

    def _spilled_changes(self, shard: int, only: np.ndarray | None = None
                         ) -> ShardChanges | None:
        spilled = self._spilled.get(shard)
        if spilled is None:
            return None
        keys = np.concatenate(spilled.keys)
        lengths = np.concatenate(spilled.lengths)
        offsets = np.cumsum(np.maximum(lengths, 0)) - np.maximum(lengths, 0)
        # the last change of each key wins: stable sort keeps spill order among equal keys
        order = np.argsort(keys, kind="stable")
        last = np.ones(len(order), bool)
        last[:-1] = keys[order][1:] != keys[order][:-1]
        pick = order[last]
        if only is not None:
            pick = pick[np.isin(keys[pick], only)]
        with open(spilled.path, "rb") as f:
            if only is None:
                blob = memoryview(f.read())
                values = [None if n < 0 else blob[o:o + n]
                          for o, n in zip(offsets[pick].tolist(), lengths[pick].tolist())]
            else:
                values = [None if n < 0 else os.pread(f.fileno(), n, o)
                          for o, n in zip(offsets[pick].tolist(), lengths[pick].tolist())]
        return ShardChanges(shard, keys[pick], values)

    def __del__(self) -> None:
        if getattr(self, "_tmp", None) is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
