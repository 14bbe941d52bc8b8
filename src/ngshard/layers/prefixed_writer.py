"""Writing a whole sharded store of values with unindexed prefixes (mesh fragments before each
manifest), in bounded memory: items arrive in any order, are grouped by shard in memory up to
``buffer_bytes``, then appended to one spill file per shard (beside local shards, so each
becomes its shard by a rename); every shard is assembled at the end by
:func:`ngshard.sharded.prefixed.prefixed_shard`."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ..sharded import ShardingSpec
from ..sharded.prefixed import prefixed_shard
from ..storage import SPILL_PREFIX, FileSlice, Storage, owner_tag, write_buffers
from ..threads import bounded_map

DEFAULT_BUFFER_BYTES = 256 << 20


@dataclass
class _Shard:
    keys: list[int] = field(default_factory=list)
    prefixes: list[int] = field(default_factory=list)
    values: list[int] = field(default_factory=list)
    held: list[bytes] = field(default_factory=list)  # prefix, value, prefix, value, ...
    spill: str | None = None
    spilled: int = 0  # bytes in the spill file after its header hole


class PrefixedShardWriter:
    """Collects (key, prefix, value) and writes every shard once, on :meth:`close`; shard
    files of an earlier store there that get no key are removed."""

    def __init__(self, storage: Storage, spec: ShardingSpec,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        self.storage, self.spec, self.buffer_bytes = storage, spec, buffer_bytes
        self._shards: dict[int, _Shard] = {}
        self._held = 0
        self._tmp: str | None = None

    def add(self, key: int, prefix: bytes, value: bytes) -> None:
        shard = int(self.spec.locate_one(key)[0])
        s = self._shards.setdefault(shard, _Shard())
        s.keys.append(key)
        s.prefixes.append(len(prefix))
        s.values.append(len(value))
        s.held += [prefix, value]
        self._held += len(prefix) + len(value)
        if self._held > self.buffer_bytes:
            self._spill()

    def _spill(self) -> None:
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix=SPILL_PREFIX + owner_tag(),
                                         dir=self.storage.local_root)
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

    def close(self) -> None:
        """Write every shard (in parallel), then remove stale shards and spill files."""
        spec = self.spec
        if any(s.spill for s in self._shards.values()):
            self._spill()  # one region per shard: its spill file
        try:
            names = {spec.shard_filename(n) for n in self._shards}
            for _ in bounded_map(lambda item: self._write(*item), list(self._shards.items())):
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
