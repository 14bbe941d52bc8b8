"""Whole shards, laid out and written: the one writer of whole shard files, used by bulk and
Dask writes, conversions, the commits that create or rewrite a shard, and the layers' writers
of whole stores.

A shard holds indexed entries (values its minishard indices point at) and may hold unindexed
entries: bytes that no index entry points at, each right before an indexed value, as
tensorstore's shard encoder allows. A store whose values refer to bytes before them keeps
them so; its rewrites and compactions keep them too (``unindexed.py``).

Layout: the shard index, the data region, then the minishard indices in minishard order. The
data region holds the entries in the order they are given, each one's unindexed bytes right
before its value. :func:`write_shard` takes values in any order and keeps the newest of each
key, in (minishard, key) order: a shard's bytes then depend on its contents alone, and each
minishard's values are one run (the offset row of its index is zeros, which gzip all but
removes). Entries laid out already (:class:`Laid`: a rewrite's kept runs, values streamed to a
spill file by :class:`ShardWriter`) are written in their own order.

A shard rewritten whole (a compaction, a conversion of the two-file form) keeps its entries in
their old order, each with its unindexed bytes (:func:`rewrite_shard`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .._arrays import uint_dtype, views
from ..compression import encode
from ..limits import DEFAULT_BUFFER_BYTES
from ..progress import progress_bar
from ..storage import ANY, SPILL_PREFIX, FileSlice, Storage, owner_tag, write_buffers
from ..threads import bounded_map, pmap
from ..types import Blob
from .format import Entries, assemble_shard, decode_all
from .inputs import Values
from .spec import ShardingSpec
from .unindexed import UnindexedSizes, kept_unindexed


class Laid(NamedTuple):
    """Entries laid out back to back, one per key, in the order of their keys: ``parts``
    (buffers, or FileSlices the storage copies or adopts) hold for entry i in turn
    ``unindexed[i]`` bytes that no index entry points at (none where ``unindexed`` is None),
    then its stored (data-encoded) value of ``sizes[i]`` bytes."""

    sizes: np.ndarray
    parts: Sequence
    unindexed: np.ndarray | None = None


def lay_out(spec: ShardingSpec, keys: np.ndarray, laid: Laid,
            minishards: np.ndarray | None = None) -> list:
    """The parts of a whole shard file (to write one after the other) holding the entries
    ``laid`` of the distinct ``keys``; their ``minishards`` may be given where known.

    Raises
    ------
    ValueError
        A key given twice.
    """
    keys = np.asarray(keys, np.uint64)
    sizes = np.asarray(laid.sizes, np.uint64)
    minishards = spec.locate(keys)[1] if minishards is None else minishards
    offsets = data_size = None
    if laid.unindexed is not None and len(keys) and laid.unindexed.any():
        spans = np.asarray(laid.unindexed, np.uint64) + sizes
        offsets = np.cumsum(spans, dtype=np.uint64) - sizes
        data_size = int(spans.sum())
    rising = (minishards[1:] > minishards[:-1]) | \
        ((minishards[1:] == minishards[:-1]) & (keys[1:] > keys[:-1]))
    if not rising.all():  # the minishard indices list keys in (minishard, key) order
        if offsets is None:
            offsets = np.cumsum(sizes, dtype=np.uint64) - sizes
            data_size = int(sizes.sum())
        order = np.lexsort((keys, minishards))
        keys, minishards, sizes, offsets = (a[order] for a in (keys, minishards, sizes,
                                                               offsets))
        twice = np.flatnonzero(keys[1:] == keys[:-1])
        if len(twice):
            raise ValueError(f"key {int(keys[twice[0]])} given twice")
    return assemble_shard(minishards, keys, sizes, list(laid.parts), spec.num_minishards,
                          spec.minishard_index_encoding, offsets, data_size)


def newest_in_index_order(spec: ShardingSpec, keys: np.ndarray,
                          minishards: np.ndarray | None = None,
                          age: np.ndarray | None = None) -> np.ndarray:
    """Positions of the newest entry of each distinct key in ``keys`` (the last one, or the
    one of greatest ``age``), in (minishard, key) order: the order of a minishard index, and
    of a new shard's data. ``minishards`` of the keys may be given where they are known."""
    if age is not None:
        order = np.lexsort((age, keys))
        ordered = keys[order]
    else:
        order = np.argsort(keys)  # quicksort; stable only matters where keys repeat
        ordered = keys[order]
        if len(keys) > 1 and (ordered[1:] == ordered[:-1]).any():
            order = np.argsort(keys, kind="stable")
            ordered = keys[order]
    newest = np.ones(len(order), bool)
    newest[:-1] = ordered[1:] != ordered[:-1]
    del ordered
    if not newest.all():
        order = order[newest]
    minishards = spec.locate(keys[order])[1] if minishards is None else minishards[order]
    # keys are in order: a stable sort by minishard alone (by radix, in a narrow dtype)
    # gives (minishard, key) order
    narrow = minishards.astype(uint_dtype(spec.num_minishards), copy=False)
    return order[np.argsort(narrow, kind="stable")]


def in_index_order(spec: ShardingSpec, keys: np.ndarray, values: Values | Sequence, *,
                   rows: np.ndarray | None = None, age: np.ndarray | None = None,
                   minishards: np.ndarray | None = None, encoded: bool = True
                   ) -> tuple[np.ndarray, np.ndarray | None, Laid]:
    """The newest entry of each key, laid out in (minishard, key) order: (keys, their
    minishards where given, entries). See :func:`write_shard`."""
    local = newest_in_index_order(spec, keys, minishards, age)
    picked = local if rows is None else rows[local]
    encoding = "raw" if encoded else spec.data_encoding
    chosen: Sequence[Any]  # buffers
    if isinstance(values, Values):
        data, lengths = values.take(picked)
        chosen = [data] if encoding == "raw" and len(lengths) else views(data, lengths)
    else:
        chosen = values[picked].tolist() if isinstance(values, np.ndarray) else \
            list(map(values.__getitem__, picked.tolist()))
        lengths = None
    if encoding != "raw":
        chosen = pmap(lambda v: encode(v, encoding), chosen)
        lengths = None
    if lengths is None:
        lengths = np.fromiter(map(len, chosen), np.int64, len(chosen))
    return keys[local], None if minishards is None else minishards[local], \
        Laid(lengths.astype(np.uint64), chosen)


def write_shard(storage: Storage, spec: ShardingSpec, shard: int, keys: np.ndarray,
                values: Laid | Values | Sequence, *, rows: np.ndarray | None = None,
                age: np.ndarray | None = None, minishards: np.ndarray | None = None,
                encoded: bool = True, if_generation: Any = ANY) -> int:
    """Write shard number ``shard`` whole, in one atomic write (a temporary file renamed
    into place locally, one PUT on object stores); a shard left with no entry is removed.

    Parameters
    ----------
    storage, spec
        The store.
    shard
        The shard's number: every key belongs to it.
    keys
        The entries' uint64 keys, in any order; of a key given more than once the newest
        value is kept (the last one, or the one of greatest ``age``).
    values
        Their values: a sequence of bytes-like, or :class:`~.inputs.Values` (value i is
        ``values[rows[i]]``, row i by default); or entries :class:`Laid` out already, one per
        key in the order of ``keys``, unindexed bytes and all (written in that order).
    age
        See ``keys``.
    minishards
        The keys' minishards, where known already.
    encoded
        The values are stored as they are (already data-encoded); False: they are raw, and
        encoded here as the spec's ``data_encoding`` says. Laid entries are always stored as
        they are.
    if_generation
        As for :meth:`Storage.write`: the generation the shard must still have.

    Returns
    -------
    int
        Bytes of the indexed values written, as stored.

    Raises
    ------
    ValueError
        Laid entries with a key given twice.
    ConflictError
        The shard's generation is not ``if_generation``.
    """
    name = spec.shard_filename(shard)
    keys = np.asarray(keys, np.uint64)
    if not len(keys):
        storage.delete(name, if_generation=if_generation)
        return 0
    if not isinstance(values, Laid):
        keys, minishards, values = in_index_order(spec, keys, values, rows=rows, age=age,
                                                  minishards=minishards, encoded=encoded)
    storage.write(name, lay_out(spec, keys, values, minishards), if_generation=if_generation)
    return int(np.sum(values.sizes, dtype=np.uint64))


def rewrite_shard(spec: ShardingSpec, old: Blob | None, keys: np.ndarray,
                  deleted: np.ndarray, sizes: np.ndarray, data: Sequence,
                  where: str = "", unindexed: UnindexedSizes | None = None
                  ) -> tuple[np.ndarray, np.ndarray, Laid]:
    """The entries of the new shard file after the changes, as (keys, their minishards,
    entries laid out): ``keys[i]`` set, or deleted where ``deleted[i]``; the set keys'
    data-encoded values, ``sizes`` bytes each, lie back to back in that order in the parts
    ``data``.

    Kept entries stay in the order they had in ``old``, each with the unindexed bytes before
    it (their lengths by ``unindexed``; none without it), each run of them that lay back to
    back there copied as one slice; new entries follow them. (Only the minishard indices must
    be sorted by key; data may lie in any order.)
    """
    view = memoryview(old if old is not None else b"")
    kept = Entries.of(decode_all(spec, view, where)).without(np.sort(keys)) \
        if len(view) else Entries.of({})
    by_place = np.argsort(kept.starts, kind="stable")
    kept = Entries(*(col[by_place] for col in kept))
    new_keys = keys[~deleted]
    sizes = np.asarray(sizes, np.uint64)
    before = None
    if unindexed is not None and len(kept.keys):
        before = np.concatenate([kept_unindexed(spec, view, kept, unindexed, where),
                                 np.zeros(len(new_keys), np.uint64)])
    runs = []
    if len(kept.keys):
        begins = kept.starts - (before[:len(kept.keys)] if before is not None else 0)
        ends = kept.starts + kept.sizes
        joins = np.zeros(len(kept.keys), bool)
        joins[1:] = begins[1:] == ends[:-1]
        first = np.flatnonzero(~joins)
        last = np.append(first[1:], len(joins)) - 1
        runs = [view[s:e] for s, e in zip(begins[first].tolist(), ends[last].tolist())]
    return (np.concatenate([kept.keys, new_keys]),
            np.concatenate([kept.minishards, spec.locate(new_keys)[1]]),
            Laid(np.concatenate([kept.sizes, sizes]), [*runs, *data], before))


class _Pending:
    """One shard's entries in :class:`ShardWriter`: held, or spilled to a file."""

    def __init__(self) -> None:
        self.keys: list[int] = []
        self.unindexed: list[int] = []
        self.sizes: list[int] = []
        self.held: list = []  # [unindexed,] value, [unindexed,] value, ...
        self.spill: str | None = None
        self.spilled = 0  # bytes in the spill file after its header hole


class ShardWriter:
    """Writes a whole store from entries given a batch at a time, in any number: each shard
    once, on :meth:`close`, by :func:`write_shard`, its entries in the order given.

    Values are held as given (no copy) up to ``buffer_bytes``, then appended to one spill
    file per shard (beside local shards, so that each becomes its shard by a rename). Shard
    files of an earlier store there that get no key are removed at the end."""

    def __init__(self, storage: Storage, spec: ShardingSpec,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES) -> None:
        self.storage, self.spec, self.buffer_bytes = storage, spec, buffer_bytes
        self._shards: dict[int, _Pending] = {}
        self._held = 0
        self._tmp: str | None = None

    def add_many(self, keys: np.ndarray, values: list, unindexed: list | None = None) -> None:
        """Add stored values (bytes-like) of keys not given before, each after its unindexed
        bytes (``unindexed[i]``; none by default); the batch is grouped by shard at once."""
        keys = np.asarray(keys, np.uint64)
        shards = self.spec.locate(keys)[0]
        order = np.argsort(shards, kind="stable")
        cuts = np.flatnonzero(np.diff(shards[order])) + 1
        sizes = np.fromiter(map(len, values), np.int64, len(values))
        before = np.zeros(len(keys), np.int64) if unindexed is None else \
            np.fromiter(map(len, unindexed), np.int64, len(unindexed))
        for rows in np.split(order, cuts) if len(order) else []:
            s = self._shards.setdefault(int(shards[rows[0]]), _Pending())
            s.keys += keys[rows].tolist()
            s.unindexed += before[rows].tolist()
            s.sizes += sizes[rows].tolist()
            ints = rows.tolist()
            if unindexed is None:
                s.held += [values[i] for i in ints]
            else:
                s.held += [b for i in ints for b in (unindexed[i], values[i])]
        self._held += int(sizes.sum() + before.sum())
        if self._held > self.buffer_bytes:
            self._spill()

    def _spill(self) -> None:
        if self._tmp is None:
            root = self.storage.local_root
            if root is not None:  # a new store's directory: made by the first write otherwise
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
        stale shards and spill files.

        Raises
        ------
        ValueError
            A key given twice (its shard is not written).
        """
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

    def _write(self, number: int, s: _Pending) -> None:
        data = s.held if s.spill is None else \
            [FileSlice(s.spill, self.spec.shard_index_size, s.spilled, owned=True)]
        laid = Laid(np.array(s.sizes, np.uint64), data, np.array(s.unindexed, np.uint64))
        write_shard(self.storage, self.spec, number, np.array(s.keys, np.uint64), laid)
