"""The one index cache of the readers: what was decoded from objects' indices (a precomputed
shard's index and minishard indices, a zarr shard's index), by object name, each entry tied to
the generation of the object it was read from, all of it bounded by bytes.

The rules every reader follows through it:

- An entry serves only while its object keeps the generation it was read from
  (:attr:`~ngshard.storage.ObjectInfo.generation`: inode, size and times locally, the ETag or
  generation remotely), so a replaced shard is read again, never at stale offsets.
- Where timestamps are coarse (:attr:`~ngshard.storage.ObjectInfo.modified` given), an object
  changed within ``COARSE_TIMES`` seconds may keep its generation through one more change: such
  an object's index is read again rather than trusted (:func:`changed_lately`), and an entry
  read while its object was that recent is never trusted later either.
- Least recently used entries go first once the bytes pass ``max_bytes``; the entry in use is
  kept (a batch over one shard larger than the budget still works).
- Hits, misses and evictions are counted for the stores' ``stats()``.

A reader that finds an entry's object changed under a read calls :meth:`IndexCache.stale`,
which forgets the entry and gives the :class:`~ngshard.storage.retry.Stale` signal that its
retry policy answers by running the read again. Not thread-safe: each reader owns its cache.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, NamedTuple, TypeVar

from ..limits import COARSE_TIMES, DEFAULT_CACHE_BYTES
from .base import ObjectInfo
from .retry import Stale

V = TypeVar("V")


def changed_lately(*infos: ObjectInfo | None, now: float | None = None) -> bool:
    """True if an object was changed so recently (within ``COARSE_TIMES`` seconds, on a
    filesystem with coarse timestamps) that its generation may yet survive another change."""
    now = time.time() if now is None else now
    return any(i is not None and i.modified is not None and now - i.modified < COARSE_TIMES
               for i in infos)


class _Entry(NamedTuple):
    value: object
    generation: Hashable
    nbytes: int
    recent: bool  # read while its object had just changed: never trusted again


class IndexCache(Generic[V]):
    """Decoded indices by object name, tied to generations, within ``max_bytes``."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        #: Bytes held (at most ``max_bytes``, beyond the entry in use).
        self.nbytes = 0
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, name: str, generation: Hashable, recent: bool = False) -> V | None:
        """The value cached for ``name`` if it was read from ``generation`` and neither the
        object now (``recent``, see :func:`changed_lately`) nor then had changed just before;
        None otherwise (a miss: read it and :meth:`put` it)."""
        entry = self._entries.get(name)
        if entry is None or entry.generation != generation or recent or entry.recent:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(name)
        return entry.value  # type: ignore[return-value]

    def unchecked(self, name: str) -> V | None:
        """The value cached for ``name`` without asking the object's generation, for a read
        that reports the generation it read and so confirms the entry itself (None: no entry
        that could be trusted so)."""
        entry = self._entries.get(name)
        if entry is None or entry.recent:
            return None
        self.hits += 1
        self._entries.move_to_end(name)
        return entry.value  # type: ignore[return-value]

    def peek(self, name: str) -> V | None:
        """The value cached for ``name`` whatever its generation (counted nowhere): what was
        known, for a caller that compares it with what it has just read."""
        entry = self._entries.get(name)
        return None if entry is None else entry.value  # type: ignore[return-value]

    def put(self, name: str, value: V, generation: Hashable, nbytes: int,
            recent: bool = False) -> None:
        """Cache ``value`` (``nbytes`` of it) for ``name`` as read from ``generation``
        (``recent``: while the object had just changed); older entries beyond the budget go."""
        self.forget(name)
        self._entries[name] = _Entry(value, generation, nbytes, recent)
        self.nbytes += nbytes
        self._evict(name)

    def grow(self, name: str, value: V, nbytes: int) -> None:
        """``nbytes`` more were decoded into ``value``, the entry of ``name`` (more of a
        shard's minishard indices); other entries beyond the budget go. A value that is no
        longer the entry (evicted by a later one of its batch) counts nothing."""
        entry = self._entries.get(name)
        if entry is None or entry.value is not value:
            return
        self._entries[name] = entry._replace(nbytes=entry.nbytes + nbytes)
        self.nbytes += nbytes
        self._evict(name)

    def forget(self, name: str | None = None) -> None:
        """Drop one object's entry (every entry, with no name)."""
        if name is None:
            self._entries.clear()
            self.nbytes = 0
            return
        old = self._entries.pop(name, None)
        if old is not None:
            self.nbytes -= old.nbytes

    def stale(self, name: str, where: str) -> Stale:
        """Forget ``name``, found changed under a read, and return the signal to raise so the
        read runs again (``where``: the object's location, for messages)."""
        self.forget(name)
        return Stale(name, where)

    def stats(self) -> dict[str, int]:
        """``cache_bytes``, ``cache_max_bytes``, ``cache_entries``, ``cache_hits``,
        ``cache_misses`` and ``cache_evictions``."""
        return {"cache_bytes": self.nbytes, "cache_max_bytes": self.max_bytes,
                "cache_entries": len(self._entries), "cache_hits": self.hits,
                "cache_misses": self.misses, "cache_evictions": self.evictions}

    def _evict(self, in_use: str) -> None:
        while self.nbytes > self.max_bytes and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            if oldest == in_use:
                self._entries.move_to_end(oldest)
                oldest = next(iter(self._entries))
            self.forget(oldest)
            self.evictions += 1
