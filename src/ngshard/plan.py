"""The plan of a commit: what happens to each shard, decided before anything is written.

Deciding reads only indices; doing (in kv.py) follows the plan shard by shard. Printing a plan
shows a user what a commit will cost before it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: What a commit does to one shard file.
ACTIONS = {
    "create": "write a new shard file",
    "rewrite": "read the whole shard, write it anew with the changes after the old bytes "
               "(atomic replace)",
    "append": "append new chunks and minishard indices, then patch the shard index",
    "compact": "rewrite without the garbage of earlier appends",
    "convert": "read an obsolete <shard>.index/.data pair, write it with the changes as one "
               "shard file, remove the pair",
    "delete": "remove the shard file (no key left)",
}


@dataclass
class ShardPlan:
    """One shard's part of a commit."""

    name: str
    shard: int
    action: str
    sets: int = 0  # keys written (new or replaced)
    deletes: int = 0  # present keys removed
    keys_after: int | None = 0  # None: not known without reading every minishard index
    read_bytes: int = 0  # bytes read to carry out the action (indices were read to plan it)
    write_bytes: int = 0  # bytes written, estimated before encoding
    size_before: int = 0
    garbage_after: float = 0.0  # fraction of the file left unreferenced
    generation: Any = field(default=None, repr=False)  # of the file the plan was made from


@dataclass
class CommitPlan:
    """The plan of a whole commit, one entry per shard that changes."""

    url: str
    strategy: str
    shards: list[ShardPlan]
    staged_version: int = field(default=-1, repr=False)  # of the changes it was made for

    @property
    def write_bytes(self) -> int:
        return sum(s.write_bytes for s in self.shards)

    @property
    def read_bytes(self) -> int:
        return sum(s.read_bytes for s in self.shards)

    def __str__(self) -> str:
        head = (f"commit to {self.url} (strategy {self.strategy}): {len(self.shards)} shard(s), "
                f"read {self.read_bytes} B, write {self.write_bytes} B")
        rows = [f"  {'shard':<20} {'action':<8} {'sets':>8} {'deletes':>8} {'keys after':>10} "
                f"{'read B':>12} {'write B':>12} {'garbage':>7}"]
        rows += [f"  {s.name:<20} {s.action:<8} {s.sets:>8} {s.deletes:>8} "
                 f"{'?' if s.keys_after is None else s.keys_after:>10} "
                 f"{s.read_bytes:>12} {s.write_bytes:>12} {s.garbage_after:>7.1%}"
                 for s in self.shards]
        return "\n".join([head, *rows])
