"""Writing a whole sharded store of values, each with an optional unindexed prefix (mesh
fragments before each manifest; skeletons and annotations have none), in bounded memory:
items arrive in any order, are grouped by shard in memory up to ``buffer_bytes``, then
appended to one spill file per shard (beside local shards, so each becomes its shard by a
rename); every shard is assembled at the end by :func:`ngshard.sharded.prefixed.prefixed_shard`.

Values are held as given (no copy into a staging buffer) and grouped by shard with numpy, a
batch at a time: for a fresh store this does less than a staged update of the sharded store,
which copies every value in and gathers it out again by shard.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..limits import DEFAULT_BUFFER_BYTES
from ..progress import progress_bar
from ..sharded import ShardingSpec
from ..sharded.prefixed import prefixed_shard
from ..storage import SPILL_PREFIX, FileSlice, Storage, owner_tag, write_buffers
from ..threads import bounded_map


@dataclass
class _Shard:
    keys: list[int] = field(default_factory=list)
    prefixes: list[int] = field(default_factory=list)
    values: list[int] = field(default_factory=list)
    held: list = field(default_factory=list)  # [prefix,] value, [prefix,] value, ...
    spill: str | None = None
    spilled: int = 0  # bytes in the spill file after its header hole


class PrefixedShardWriter:
    """Collects values (and their prefixes) by key and writes every shard once, on
    :meth:`close`; shard files of an earlier store there that get no key are removed."""

    def __init__(self, storage: Storage, spec: ShardingSpec,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        self.storage, self.spec, self.buffer_bytes = storage, spec, buffer_bytes
        self._shards: dict[int, _Shard] = {}
        self._held = 0
        self._tmp: str | None = None

    def add_many(self, keys: np.ndarray, values: list, prefixes: list | None = None) -> None:
        """Add values (bytes-like) of distinct new keys, each after its prefix (none by
        default); the batch is grouped by shard at once."""
        keys = np.asarray(keys, np.uint64)
        shards = self.spec.locate(keys)[0]
        order = np.argsort(shards, kind="stable")
        cuts = np.flatnonzero(np.diff(shards[order])) + 1
        sizes = np.fromiter(map(len, values), np.int64, len(values))
        pre = np.zeros(len(keys), np.int64) if prefixes is None else \
            np.fromiter(map(len, prefixes), np.int64, len(prefixes))
        for rows in np.split(order, cuts) if len(order) else []:
            s = self._shards.setdefault(int(shards[rows[0]]), _Shard())
            s.keys += keys[rows].tolist()
            s.prefixes += pre[rows].tolist()
            s.values += sizes[rows].tolist()
            ints = rows.tolist()
            if prefixes is None:
                s.held += [values[i] for i in ints]
            else:
                s.held += [b for i in ints for b in (prefixes[i], values[i])]
        self._held += int(sizes.sum() + pre.sum())
        if self._held > self.buffer_bytes:
            self._spill()

    def _spill(self) -> None:
        if self._tmp is None:
            root = self.storage.local_root
            if root is not None:  # a new layer's directory: made by the first write otherwise
                os.makedirs(root, exist_ok=True)
            self._tmp = tempfile.mkdtemp(prefix=SPILL_PREFIX + owner_tag(), dir=root)
        header = self.spec.shard_index_size
        for number, s in self._shards.items():
            if not s.held:
                continue
            if s.spill is None:
                s.spill = os.path.join(self._tmp, f"{number}.spill")
                with open(s.spill, "wb") as f:
                    f.truncate(header)
            fd = os.open(s.spill, os.O_WRONLY | os.O_APPEND)
            try:
                write_buffers(fd, s.held)
            finally:
                os.close(fd)
            s.spilled += sum(map(len, s.held))
            s.held = []
        self._held = 0

    def close(self, progress: bool = False) -> None:
        """Write every shard (in parallel; a progress bar over them if asked), then remove
        stale shards and spill files."""
        spec = self.spec
        if any(s.spill for s in self._shards.values()):
            self._spill()  # one region per shard: its spill file
        try:
            names = {spec.shard_filename(n) for n in self._shards}
            written = bounded_map(lambda item: self._write(*item), list(self._shards.items()))
            for _ in progress_bar(written, enabled=progress, total=len(self._shards),
                                  desc="shards", unit="shard"):
                pass
            for name in self.storage.list():
                if name.endswith(".shard") and spec.parse_shard_filename(name) is not None \
                        and name not in names:
                    self.storage.delete(name)
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)

    def _write(self, number: int, s: _Shard) -> None:
        keys = np.array(s.keys, np.uint64)
        distinct, counts = np.unique(keys, return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"segment {int(distinct[counts > 1][0])} given twice")
        if s.spill is not None:
            data = [FileSlice(s.spill, self.spec.shard_index_size, s.spilled, owned=True)]
        else:
            data = s.held
        parts = prefixed_shard(self.spec, keys, np.array(s.prefixes), np.array(s.values), data)
        self.storage.write(self.spec.shard_filename(number), parts)
