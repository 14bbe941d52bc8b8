"""ShardedKV: a MutableMapping from uint64 keys to bytes over the shard files of one directory.

The facade over the parts of this package: reads go through the :class:`ShardReader` (index
cache, batched lookups), changes are staged (:class:`Staging`), planned (``plan.py``) and
written shard by shard (``commit.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import replace
from typing import Any, Literal, get_args, overload

import numpy as np

from .._arrays import member, unique
from ..errors import InvalidKeyError, NgShardError, NotFoundError, ReadOnlyError, SpecError
from ..limits import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_STAGED_BYTES,
    ITEMS_BATCH,
)
from ..storage import Storage, remove_stale
from ..types import Blob, Mode, Strategy
from . import commit as committing
from . import listing
from .infofile import record_spec
from .inputs import as_bytes, pair_batches, value_arrays
from .plan import CommitPlan, plan_commit, with_pending
from .reader import ShardReader
from .spec import ShardingSpec, as_key_array, check_key
from .staging import DELETED, Staging
from .unindexed import UnindexedSizes, read_with_unindexed

MODES: tuple[str, ...] = get_args(Mode)
STRATEGIES: tuple[str, ...] = get_args(Strategy)


class ShardedKV(MutableMapping):
    """uint64 -> bytes over a directory of shard files. Open with :func:`open_kv`.

    Values are ``bytes``. Reads see the staged changes; :meth:`commit` writes them shard by
    shard (see :func:`open_kv` for the modes and strategies).
    """

    def __init__(self, storage: Storage, spec: ShardingSpec, mode: Mode = "r", *,
                 strategy: Strategy = "auto", compact_ratio: float | None = 0.5,
                 staged_bytes: int = DEFAULT_STAGED_BYTES, spill_dir: str | None = None,
                 cache_bytes: int = DEFAULT_CACHE_BYTES, info: bool = False,
                 max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
                 unindexed: UnindexedSizes | None = None) -> None:
        if mode not in MODES:
            raise SpecError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if strategy not in STRATEGIES:
            raise SpecError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if mode != "r" and not storage.supports_writes:
            raise ReadOnlyError(f"{storage.url}: read-only storage; open it with mode 'r'")
        if strategy == "auto":
            strategy = "append" if storage.supports_append else "rewrite"
        if strategy == "append" and not storage.supports_append:
            raise SpecError(f"{storage.url}: strategy 'append' needs local files; use 'rewrite'")
        if mode == "r+" and not storage.list():
            raise NotFoundError(f"{storage.url}: no store here (mode 'a' or 'w' creates one)")
        self.storage, self.spec, self.mode = storage, spec, mode
        self.strategy, self.compact_ratio = strategy, compact_ratio
        #: The reads, the index cache and the retry policy (``reader.cached_bytes``,
        #: ``reader.forget()``, ``reader.stats()``).
        self.reader = ShardReader(storage, spec, cache_bytes, max_value_bytes)
        self._stored: ShardReader | None = None  # reads without the data_encoding undone
        #: ``unindexed(keys, values)``: lengths of the unindexed entries stored right before
        #: values, which rewrites and compactions keep.
        self.unindexed = unindexed
        self._write_info = info and mode != "r"
        local = storage.local_root
        if spill_dir is None and local is not None and mode != "r":
            # beside the shards: a spilled shard is then renamed into place, not copied
            os.makedirs(local, exist_ok=True)
            spill_dir = local
        if mode != "r":  # what killed writers left behind
            for folder in {f for f in (spill_dir, local) if f is not None}:
                remove_stale(folder)
        # spill files beside durable shards become shards: written to disk as they are spilled
        durable = getattr(storage, "durable", False) and spill_dir == local
        self._staging = None if mode == "r" else Staging(spec, staged_bytes, spill_dir,
                                                         durable)

    def __repr__(self) -> str:
        return f"ShardedKV({self.storage.url!r}, mode={self.mode!r})"

    # --- reads -----------------------------------------------------------------------------

    def get_many(self, keys: Iterable[int] | np.ndarray, *, copy: bool = True
                 ) -> dict[int, Blob]:
        """Values of many keys at once, as {key: value}; absent keys are left out.

        ``copy=False`` may return memoryviews into the batch's read buffers instead of bytes,
        saving a copy of every value (they keep those buffers alive)."""
        wanted = unique(as_key_array(keys))
        out: dict[int, Blob] = {}
        if self._staging:
            staged = self._staging.lookup_many(wanted)
            out.update((k, v) for k, v in staged.items() if v is not None)
            wanted = wanted[~member(wanted, np.sort(np.fromiter(staged, np.uint64,
                                                                len(staged))))]
        if self.mode != "w":
            out.update(self.reader.get_many(wanted))
        if copy:
            out = {k: v if type(v) is bytes else bytes(v) for k, v in out.items()}
        return out

    def get_many_stored(self, keys: Iterable[int] | np.ndarray) -> dict[int, Blob]:
        """Committed values as stored, their ``data_encoding`` not undone (so a writer of the
        same encoding may carry them), as {key: value}; absent keys left out, staged changes
        not seen. A stored value is not checked here: decode it before trusting it."""
        if self._stored is None:  # the same shards read without decoding, one index cache
            self._stored = ShardReader(self.storage, replace(self.spec, data_encoding="raw"),
                                       max_value_bytes=self.reader.max_value_bytes,
                                       retry=self.reader.retry)
            self._stored.cache, self._stored.capacity = self.reader.cache, self.reader.capacity
        return self._stored.get_many(unique(as_key_array(keys)))

    def get_many_with_unindexed(self, keys: Iterable[int] | np.ndarray,
                                span: Callable[[int, Blob], tuple[int, int]] | None = None
                                ) -> dict[int, tuple[Blob, Blob]]:
        """Stored values with bytes from right before them, as {key: (before, value)}:
        ``span(key, value)`` gives ``(begin, end)`` relative to the value's start (by
        default the unindexed entry before it). See :func:`.unindexed.read_with_unindexed`."""
        return read_with_unindexed(self.reader, as_key_array(keys), span, self.unindexed)

    def _get(self, k: int) -> Blob | None:
        if self._staging:
            staged, value = self._staging.lookup(k)
            if staged:
                return value
        return None if self.mode == "w" else self.reader.get_one(k)

    def __getitem__(self, key: int) -> bytes:
        value = self._get(check_key(key))
        if value is None:
            raise KeyError(key)
        return value if type(value) is bytes else bytes(value)

    def __contains__(self, key: object) -> bool:
        try:
            k = check_key(key)
        except InvalidKeyError:  # a key this mapping cannot hold is not in it
            return False
        if self._staging:
            staged, value = self._staging.lookup(k)
            if staged:
                return value is not None
        return self.mode != "w" and self.reader.contains(k)

    # --- listing ---------------------------------------------------------------------------

    def shard_names(self) -> list[str]:
        """Names of the shards present, in shard order (an obsolete two-file shard is listed
        under the name of the single file it stands for)."""
        return listing.shard_names(self.reader)

    def keys_array(self) -> np.ndarray:
        """All keys as a uint64 array: stored keys sorted by shard and key, then staged
        additions. Reads only the shard and minishard indices (a few shards at a time, in
        parallel); memory is O(keys), 8 bytes each: for huge stores, :meth:`iter_keys`.
        Like tensorstore's listing, it reports every key the minishard indices hold without
        hashing them: a copy a writer put in a minishard the key does not hash to is listed
        but never read (the key reads as absent, unless its own minishard holds it too: then
        it is listed twice)."""
        stored = listing.keys_array(self.reader) if self.mode != "w" else np.zeros(0, np.uint64)
        if not self._staging:
            return stored
        staged, lengths = self._staging.status()
        stored = stored[~member(stored, staged)]
        return np.concatenate([stored, staged[lengths != DELETED]])

    @overload
    def iter_keys(self, *, arrays: Literal[False] = False, progress: bool = False
                  ) -> Iterator[int]: ...

    @overload
    def iter_keys(self, *, arrays: Literal[True], progress: bool = False
                  ) -> Iterator[np.ndarray]: ...

    def iter_keys(self, *, arrays: bool = False, progress: bool = False
                  ) -> Iterator[int] | Iterator[np.ndarray]:
        """The stored keys shard by shard, each shard's sorted: memory is a few shards'
        indices (read ahead on threads), however large the store. Staged changes are not
        included (commit them first).

        Parameters
        ----------
        arrays
            Yield one uint64 array per shard instead of one int per key.
        progress
            Show a progress bar (over shards).

        Returns
        -------
        Iterator of int, or of numpy.ndarray with ``arrays``.
        """
        shards = listing.iter_shard_keys(self.reader, self.shard_names(), progress=progress)
        return shards if arrays else (k for keys in shards for k in keys.tolist())

    def iter_items(self, *, batch: int = ITEMS_BATCH, progress: bool = False
                   ) -> Iterator[tuple[int, bytes]]:
        """(key, value) of every stored key, shard by shard in key order: memory is a few
        shards' indices and one batch of values. Staged changes are not included (commit
        them first).

        Parameters
        ----------
        batch
            How many keys' values are read at once (one batched read per shard).
        progress
            Show a progress bar (over shards).

        Returns
        -------
        Iterator of (int, bytes).
        """
        for keys in self.iter_keys(arrays=True, progress=progress):
            for first in range(0, len(keys), batch):
                part = keys[first:first + batch]
                found = self.reader.get_many(part)
                for k in part.tolist():
                    if k in found:  # gone since it was listed: a writer changed the shard
                        v = found[k]
                        yield k, v if type(v) is bytes else bytes(v)

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys_array().tolist())

    def __len__(self) -> int:
        return len(self.keys_array())

    def stats(self, *, progress: bool = False) -> listing.StoreStats:
        """Per shard file present: name, size in bytes, number of keys, garbage fraction
        (read a few shards at a time, in parallel), as a list; and as its ``reads``, the
        figures of this store's reads so far (``reader.stats()``, which gives them alone
        without reading every shard): ``cache_bytes``, ``cache_max_bytes``,
        ``cache_entries``, ``cache_hits``, ``cache_misses``, ``cache_evictions`` of the
        index cache, ``retries`` (reads run again after a shard changed under them) and
        ``retries_gave_up``."""
        return listing.store_stats(self.reader, self.shard_names(), progress=progress)

    # --- staged changes ----------------------------------------------------------------------

    def _writable(self) -> Staging:
        if self._staging is None:
            raise ReadOnlyError(f"{self.storage.url}: store is open read-only (mode {self.mode!r})")
        return self._staging

    def __setitem__(self, key: int, value: bytes) -> None:
        self._writable().set(check_key(key), as_bytes(value, key))

    def __delitem__(self, key: int) -> None:
        staging = self._writable()
        k = check_key(key)
        if k not in self:
            raise KeyError(key)
        staging.set(k, None)

    def update(self, other: Any = (), /, **kwargs: Any) -> None:
        """Stage many values (a mapping or (key, value) pairs) at once."""
        staging = self._writable()
        if kwargs:
            raise TypeError("keys must be integers, not keyword arguments")
        for batch in pair_batches(other):
            staging.set_many(*batch)
            del batch  # before the next batch is read

    def set_many(self, keys: Iterable[int] | np.ndarray, values: Any,
                 offsets: Any = None, *, adopt: bool = False) -> None:
        """Stage ``values[i]`` for ``keys[i]`` with no per-key Python work.

        Parameters
        ----------
        keys
            n keys (a uint64 array, say).
        values, offsets
            A list of n bytes; or as :func:`write_kv` takes them, one buffer with n + 1
            ``offsets`` (value i is ``values[offsets[i]:offsets[i + 1]]``), or a 2-D array
            whose rows are the values.
        adopt
            The one buffer (a uint8 numpy array) is handed over: kept as it is rather than
            copied (the caller no longer changes it). Laid out in :meth:`commit_order`, a
            shard's values are then written without another copy.

        Raises
        ------
        InvalidKeyError
            A key outside [0, 2**64).
        TypeError, ValueError
            Values that are not bytes, or do not fit the keys.
        """
        staging = self._writable()
        if not isinstance(values, list) or offsets is not None:
            staging.set_arrays(*value_arrays(keys, values, offsets), adopt=adopt)
            return
        keys = as_key_array(keys)
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        if not set(map(type, values)) <= {bytes, memoryview}:  # views are joined, not kept
            values = [as_bytes(v, k) for k, v in zip(keys.tolist(), values)]
        staging.set_many(keys, values)

    def commit_order(self, keys: np.ndarray) -> np.ndarray:
        """The order (indices into ``keys``) in which a commit writes the keys' values: by
        shard, minishard and key."""
        return self._writable().commit_order(as_key_array(keys))

    def delete_many(self, keys: Iterable[int] | np.ndarray) -> None:
        """Stage the removal of ``keys``; keys that are not there are ignored."""
        keys = as_key_array(keys)
        self._writable().set_many(keys, [None] * len(keys))

    def spill(self) -> None:
        """Move the staged values held in memory to the spill files now."""
        self._writable().spill()

    def abort(self) -> None:
        """Drop the staged changes; the store is left as it was."""
        if self._staging is not None:
            self._staging.clear()

    # --- commit ------------------------------------------------------------------------------

    def plan(self, *, pending: tuple[np.ndarray, np.ndarray] | None = None) -> CommitPlan:
        """What :meth:`commit` would do to each shard, decided from the indices alone;
        ``pending`` (keys, value lengths) counts values not staged yet as if they were."""
        staging = self._writable()
        changes = staging.iter_changes(data=False)
        if pending is not None and len(pending[0]):
            changes = with_pending(self.spec, changes, *pending)
        return plan_commit(self.reader, changes, mode=self.mode, strategy=self.strategy,
                           compact_ratio=self.compact_ratio,
                           version=staging.version if pending is None else -1)

    def commit(self, plan: CommitPlan | None = None, *, progress: bool = False) -> CommitPlan:
        """Apply the staged changes shard by shard, following ``plan`` (by default each
        shard is planned as its turn comes); returns the plan followed.

        Each shard file is replaced atomically (create, rewrite, compact) or appended to and
        then patched (append), so a crash leaves every shard readable, old or new. A shard that
        changed on storage since the plan was made raises ConflictError before it is written.
        """
        staging = self._writable()
        plan = committing.commit_staged(self.reader, staging, plan, self.mode, self.strategy,
                                        self.compact_ratio, progress=progress,
                                        unindexed=self.unindexed)
        if self._write_info:
            record_spec(self.storage, self.spec)
            self._write_info = False
        if self.mode == "w":
            self.mode = "a"  # the store exists now: later commits update it
        return plan

    def compact(self, names: Iterable[str] | None = None, *, progress: bool = False
                ) -> CommitPlan:
        """Rewrite shards without the garbage of earlier appends (all shards with garbage by
        default, or the named ones). Nothing else may be staged."""
        if self._writable():
            raise NgShardError(f"{self.storage.url}: commit or abort staged changes before "
                               f"compacting")
        return committing.compact(self.reader, self.shard_names() if names is None else names,
                                  progress=progress, unindexed=self.unindexed)

    def close(self) -> None:
        """Drop the caches and any staged changes not committed."""
        self.reader.forget()
        if self._staging is not None:
            self._staging.clear()

    def __enter__(self) -> ShardedKV:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._staging is not None and exc_type is None:
            self.commit()
        self.close()
