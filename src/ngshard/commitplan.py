"""CommitPlan: what a commit of staged changes will do, decided before anything is written.

Every ``plan()`` returns one: ``ShardedKV.plan()``, ``Volume.plan()``, a staged zarr array's
``plan()``, and any chunk store's. It holds one :class:`ShardPlan` per shard or file that
changes (its action, the keys set and deleted, the bytes read and written), how many chunks
are encoded first, and the metadata written after the data. ``str(plan)`` is a summary of a
few lines; the detail is one attribute away: ``plan.shards`` (and ``plan.changes``, the
staged array's slabs to encode and drop). Byte counts are those of the stored values (for a
sharded store, unencoded by its data encoding; gzip only shrinks them), indices included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: What a commit does to one shard or file.
ACTIONS = {
    "create": "write a new shard file",
    "rewrite": "read the whole shard, write it anew with the changes (atomic replace; a "
               "zarr shard left with no chunk is deleted)",
    "append": "append new chunks and minishard indices, then patch the shard index",
    "compact": "rewrite without the garbage of earlier appends",
    "convert": "read an obsolete <shard>.index/.data pair, write it with the changes as one "
               "shard file, remove the pair",
    "write": "write the file whole without reading it (a chunk file, or a shard all of "
             "whose chunks are staged)",
    "delete": "remove the file (no key left)",
}

#: Entries printed by ``str(plan)`` (more are counted by action; all are in ``plan.shards``).
SHOWN = 5


@dataclass(frozen=True)
class ShardPlan:
    """One shard's (or one file's) part of a commit."""

    name: str
    shard: int  # the shard's number (zarr: its C-order index in the shard grid); -1: a file
    action: str
    sets: int = 0  # keys written (new or replaced)
    deletes: int = 0  # present keys removed
    keys_after: int | None = 0  # None: not known without reading every minishard index
    read_bytes: int = 0  # bytes read to carry out the action (indices were read to plan it)
    write_bytes: int = 0  # bytes written: data, indices and trailer
    size_before: int = 0
    garbage_after: float = 0.0  # fraction of the file left unreferenced
    generation: Any = field(default=None, repr=False)  # of the file the plan was made from


@dataclass(frozen=True)
class CommitPlan:
    """The plan of a whole commit.

    Attributes
    ----------
    url
        The store written.
    strategy
        How shards change (``append``, ``rewrite``, ``compact``); empty for files.
    shards
        One entry per shard or file that changes, in shard (or name) order.
    unit
        What an entry is: ``shard``, ``file``, ``chunk``.
    encode
        Chunks encoded before anything is written (a staged array's changed chunks).
    then
        What is written after the data, last (a resized volume's info, a zarr.json).
    changes
        The staged array's plan of the slabs it encodes and drops (``ChangesPlan``), or None.
    """

    url: str
    strategy: str
    shards: tuple[ShardPlan, ...] = ()
    unit: str = "shard"
    encode: int = 0
    then: tuple[str, ...] = ()
    changes: Any = field(default=None, repr=False, compare=False)
    staged_version: int = field(default=-1, repr=False)  # of the changes it was made for

    @classmethod
    def files(cls, url: str, sizes: Mapping[str, int | None], unit: str = "file"
              ) -> CommitPlan:
        """The plan of writing files whole (``{name: bytes}``) and deleting others (``{name:
        None}``), in name order."""
        return cls(url, "", tuple(
            ShardPlan(name, -1, "write", sets=1, keys_after=1, write_bytes=size)
            if size is not None else ShardPlan(name, -1, "delete", deletes=1)
            for name, size in sorted(sizes.items())), unit=unit)

    @property
    def write_bytes(self) -> int:
        return sum(s.write_bytes for s in self.shards)

    @property
    def read_bytes(self) -> int:
        return sum(s.read_bytes for s in self.shards)

    def actions(self) -> dict[str, int]:
        """Entries per action, e.g. ``{"create": 3, "append": 1}``."""
        return dict(sorted(Counter(s.action for s in self.shards).items()))

    def __str__(self) -> str:
        how = f" (strategy {self.strategy})" if self.strategy else ""
        encode = f"encode {self.encode} chunks, then " if self.encode else ""
        counts = ", ".join(f"{a} {n}" for a, n in self.actions().items())
        head = (f"commit to {self.url}{how}: {encode}{len(self.shards)} {self.unit}(s)"
                f"{f' ({counts})' if counts else ''}, read {self.read_bytes} B, write "
                f"{self.write_bytes} B")
        rows = []
        if self.shards and len(self.shards) <= SHOWN:
            rows = [f"  {self.unit:<20} {'action':<8} {'sets':>8} {'deletes':>8} "
                    f"{'keys after':>10} {'read B':>12} {'write B':>12} {'garbage':>7}"]
            rows += [f"  {s.name:<20} {s.action:<8} {s.sets:>8} {s.deletes:>8} "
                     f"{'?' if s.keys_after is None else s.keys_after:>10} "
                     f"{s.read_bytes:>12} {s.write_bytes:>12} {s.garbage_after:>7.1%}"
                     for s in self.shards]
        elif self.shards:
            rows = [f"  one row per {self.unit} in plan.shards"]
        then = [f"then {what}" for what in self.then]
        return "\n".join([head, *rows, *then])

    __repr__ = __str__
