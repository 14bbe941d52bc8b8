"""The net changes of one shard, as staging hands them to planning and committing.

A shard's changes are its changed keys (each once, in (minishard, key) order: the order of the
minishard indices, and of a new shard's data) with the length of each staged value (DELETED for
a deletion), and the staged values of the set keys back to back in that order: in memory, or in
a spill file (``source``, value i at ``offsets[i]``). Only one shard's changes are held at a
time, so memory follows the largest shard, not the whole write.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._arrays import views
from ..compression import encode
from ..threads import pmap

DELETED = -1  # length recorded for a deletion


def last_of_runs(order: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """From a stable sort ``order`` in which equal keys are adjacent, the last (newest)
    position of each key."""
    last = np.ones(len(order), bool)
    last[:-1] = keys[order][1:] != keys[order][:-1]
    return order[last]


def last_wins(keys: np.ndarray) -> np.ndarray:
    """Positions of the last occurrence of each distinct key, in key order."""
    return last_of_runs(np.argsort(keys, kind="stable"), keys)


@dataclass
class ShardChanges:
    """The net changes of one shard (see the module docstring)."""

    shard: int
    keys: np.ndarray
    lengths: np.ndarray
    data: np.ndarray | None = None  # in memory: uint8, the set values back to back
    source: str | None = None  # spilled: the file holding the values
    offsets: np.ndarray | None = None  # spilled: where each key's value starts in ``source``
    spill: Any = None  # spilled: the SpillFiles that hold them

    def encoded(self, encoding: str) -> tuple[np.ndarray, list]:
        """The set values as a shard holds them: their encoded sizes (uint64, in order) and
        parts holding them back to back (buffers, or a spill file the writer may adopt)."""
        if self.spill is not None:
            sizes, parts = self.spill.region(self, encoding)
            return sizes.astype(np.uint64), parts
        sizes = self.sizes
        assert self.data is not None, "changes neither spilled nor in memory"
        if encoding == "raw":
            return sizes, [self.data] if len(sizes) else []
        parts = pmap(lambda v: encode(v, encoding), views(self.data, sizes))
        return np.fromiter(map(len, parts), np.uint64, len(parts)), parts

    @property
    def deleted(self) -> np.ndarray:
        return self.lengths == DELETED

    @property
    def sizes(self) -> np.ndarray:
        """Sizes of the set values, in order (as uint64)."""
        return self.lengths[self.lengths != DELETED].astype(np.uint64)

    def values(self) -> list[bytes | None]:
        """Every value (None for deletions): for lookups of a few keys."""
        if self.source is None:
            return _split(self.data, self.lengths)
        out: list[bytes | None] = []
        assert self.offsets is not None, "spilled changes without their offsets"
        with open(self.source, "rb") as f:
            for o, n in zip(self.offsets.tolist(), self.lengths.tolist()):
                out.append(None if n < 0 else os.pread(f.fileno(), n, o))
        return out


def _split(data: np.ndarray | None, lengths: np.ndarray) -> list[bytes | None]:
    """Back-to-back values (``lengths`` with DELETED for none) as bytes, None for deletions."""
    blob = data.tobytes() if data is not None else b""
    sizes = np.maximum(lengths, 0)
    starts = (np.cumsum(sizes) - sizes).tolist()
    return [None if n < 0 else blob[s:s + n] for s, n in zip(starts, lengths.tolist())]
