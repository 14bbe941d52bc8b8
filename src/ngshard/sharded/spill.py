"""Staged changes past the memory limit, on disk: per shard a values file and a records file.

Each spill appends one run to every shard it touches: that shard's changes of the spill in
(minishard, key) order (each key once, its newest value), the values to ``<shard>.spill``
(after room left for a shard index) and 16-byte records (key, length) to ``<shard>.keys``.
Nothing per key stays in memory, only a byte count per shard.

A shard's net changes are worked out when its turn comes: its records are read (one shard's
index), the runs merged by stable sorts, the newest of each key kept. A new shard's data is its
values in (minishard, key) order, as every ngshard writer lays them out, so the bytes of a
shard depend on its contents alone. A spill file that holds exactly that (one run, nothing
replaced or deleted) becomes the data as it is; otherwise the values are copied in order into
a new file, a few MiB at a time, one read per run and window.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from concurrent.futures import Future, wait

import numpy as np

from .._arrays import gather, member, unique, views
from ..compression import encode
from ..limits import FLUSH_RUN_BYTES, SPILL_COPY_BYTES
from ..storage import SPILL_PREFIX, FileSlice, coalesce, owner_tag, write_buffers
from ..threads import pmap, start_job
from .changes import DELETED, ShardChanges
from .shard_writer import newest_in_index_order
from .spec import ShardingSpec

RECORD = np.dtype([("key", "<u8"), ("length", "<i8")])


class SpillFiles:
    """The spill files of one staging, in a temporary directory made on first use.

    ``durable``: the values files may become durable shards (beside them, taken over by a
    rename, then fsynced): a run of ``FLUSH_RUN_BYTES`` or more is then flushed to the disk
    on a job thread while the caller goes on (encoding the next batch, say), rather than
    all of it by the fsync at the commit; one flush at a time a file (each takes whatever
    was written before it). A failed flush is raised by the next run's or when the shard's
    data is taken."""

    def __init__(self, spec: ShardingSpec, parent: str | None, durable: bool = False) -> None:
        self.spec, self.parent, self.header = spec, parent, spec.shard_index_size
        self.durable = durable
        self.dir: str | None = None
        self._ends: dict[int, int] = {}  # shard -> size of its values file
        self._flushes: dict[int, Future] = {}  # shard -> its last flush

    def __bool__(self) -> bool:
        return bool(self._ends)

    def shards(self) -> list[int]:
        """The shards with spilled changes, in order."""
        return sorted(self._ends)

    def _path(self, shard: int, kind: str) -> str:
        return f"{self.dir}/{shard}.{kind}"

    def append(self, shard: int, keys: np.ndarray, lengths: np.ndarray,
               data: np.ndarray) -> None:
        """Add one run: distinct ``keys`` in (minishard, key) order, ``lengths`` (DELETED for
        deletions), and the set values back to back in that order in ``data``."""
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix=SPILL_PREFIX + owner_tag(), dir=self.parent)
        end = self._ends.get(shard)
        if end is None:
            with open(self._path(shard, "spill"), "wb") as f:
                f.truncate(self.header)  # a hole, never written unless the file is adopted
            end = self.header
        records = np.empty(len(keys), RECORD)
        records["key"], records["length"] = keys, lengths
        _append(self._path(shard, "spill"), data)
        _append(self._path(shard, "keys"), records.view(np.uint8))
        self._ends[shard] = end + len(data)
        if self.durable and len(data) >= FLUSH_RUN_BYTES:
            flushing = self._flushes.get(shard)
            if flushing is None or flushing.done():  # one at a time: it takes all written
                if flushing is not None:
                    flushing.result()
                path = self._path(shard, "spill")
                self._flushes[shard] = start_job(lambda: _flush(path))

    def changes(self, shard: int, only: np.ndarray | None = None) -> ShardChanges:
        """The net spilled changes of one shard (of the sorted keys ``only``, if given)."""
        records = np.fromfile(self._path(shard, "keys"), RECORD)
        keys, lengths = records["key"].copy(), records["length"].copy()
        del records
        sizes = np.maximum(lengths, 0)
        offsets = np.cumsum(sizes) - sizes + self.header
        # runs are in (minishard, key) order, older runs first: a stable sort keeps the
        # newest change of a key last
        pick = newest_in_index_order(self.spec, keys)
        if only is not None:
            pick = pick[member(keys[pick], only)]
        return ShardChanges(shard, keys[pick], lengths[pick], source=self._path(shard, "spill"),
                            offsets=offsets[pick], spill=self)

    def region(self, changes: ShardChanges, encoding: str) -> tuple[np.ndarray, list]:
        """The data of ``changes`` ready for a shard: the encoded sizes of the set values and
        one owned FileSlice holding them back to back in the changes' order (the writer may
        take the file over)."""
        shard, source = changes.shard, changes.source
        assert source is not None and changes.offsets is not None, "changes not spilled"
        self._settle(shard)
        is_set = changes.lengths != DELETED
        sizes, offsets = changes.lengths[is_set], changes.offsets[is_set]
        total = int(sizes.sum())
        if encoding == "raw" and self._ends[shard] == self.header + total and \
                (offsets == np.cumsum(sizes) - sizes + self.header).all():
            return sizes, [FileSlice(source, self.header, total, owned=True)]
        out_path = self._path(shard, "net")
        out_sizes = sizes.copy()
        with open(source, "rb") as src, open(out_path, "wb") as out:
            out.truncate(self.header)
            fd = out.fileno()
            os.lseek(fd, self.header, os.SEEK_SET)
            ends = np.cumsum(sizes)
            step = SPILL_COPY_BYTES
            cuts = unique(np.searchsorted(ends, np.arange(step, total, step), side="right"))
            for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(sizes)]):
                data = _read_values(src.fileno(), offsets[a:b], sizes[a:b])
                if encoding == "raw":
                    write_buffers(fd, [data])
                    continue
                encoded = pmap(lambda v: encode(v, encoding), views(data, sizes[a:b]))
                out_sizes[a:b] = np.fromiter(map(len, encoded), np.int64, len(encoded))
                write_buffers(fd, encoded)
        os.unlink(source)  # copied: only the new file is needed now
        return out_sizes, [FileSlice(out_path, self.header, int(out_sizes.sum()), owned=True)]

    def _settle(self, shard: int, check: bool = True) -> None:
        """Wait for the last flush of one shard's values file (raising its failure)."""
        flush = self._flushes.pop(shard, None)
        if flush is not None:
            if check:
                flush.result()
            else:
                wait([flush])

    def discard(self, shard: int) -> None:
        """Remove what is left of one shard's spill files (its changes are committed)."""
        self._settle(shard, check=False)
        if self._ends.pop(shard, None) is not None:
            for kind in ("spill", "keys", "net"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._path(shard, kind))

    def clear(self) -> None:
        for shard in list(self._flushes):
            self._settle(shard, check=False)
        self._ends.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def _append(path: str, data: np.ndarray) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        write_buffers(fd, [data.data])
    finally:
        os.close(fd)


def _flush(path: str) -> None:
    """Write a file's data to the disk (fdatasync where there is one)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        getattr(os, "fdatasync", os.fsync)(fd)
    finally:
        os.close(fd)


def _read_values(fd: int, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The values at ``offsets`` of a file, back to back: the ranges each run contributes are
    read whole (one read per run, not per value), then gathered in order."""
    spans, owner = coalesce(np.stack([offsets, offsets + sizes], axis=1), max_gap=0)
    lengths = spans[:, 1] - spans[:, 0]
    base = np.cumsum(lengths) - lengths
    buf = np.empty(int(lengths.sum()), np.uint8)
    view = buf.data
    for (start, end), b in zip(spans.tolist(), base.tolist()):
        done = 0
        while done < end - start:  # a read may stop short of a large range
            n = os.preadv(fd, [view[b + done:b + end - start]], start + done)
            if n == 0:
                raise OSError(f"spill file ended before byte {end}")
            done += n
    if len(spans) == 1 and (offsets[1:] == offsets[:-1] + sizes[:-1]).all():
        return buf  # already in order (a single value, or one untouched run)
    return gather(buf, base[owner] + offsets - spans[owner, 0], sizes)

