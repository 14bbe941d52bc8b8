"""Memory of large arrays lent again, so that a loop reading a large box per turn writes into
pages already faulted in, where each :func:`~ngshard._arrays.fresh` array costs the system a
zeroed page per 4 KiB (on the 2-core VM of the benchmarks about 0.7 ms per MiB: a third of a
whole zarr read's CPU). Two ways: :class:`Recycler` (:data:`RESULTS`), the memory of results
dropped lately, for any read; :class:`Scratch`, one block per thread lent again and again,
for a loop that knows its last array is done with (a pyramid task's source box: no
``MADV_FREE`` between turns).
"""

from __future__ import annotations

import contextlib
import math
import mmap
import os
import threading
import time
import weakref
from collections import deque
from typing import Any

import numpy as np

from ._arrays import MAPPED_BYTES, fresh
from .limits import RECYCLE_BYTES, RECYCLE_SECONDS, RECYCLE_SHARE
from .types import MemoryOrder


class Recycler:
    """Arrays whose memory may be that of a large array of this recycler dropped lately.

    A result lies in a mapping lent through a holder array, the base of every view of it
    (numpy collapses a view's base only down to an array of its own type that owns no data,
    never past the holder to the mapping); when the last view goes, the mapping comes back
    here, marked free (``MADV_FREE``: the system takes its pages back only if it runs short,
    else they stay in place, already faulted in). At most ``max_bytes`` wait, none longer than
    ``max_seconds`` (checked whenever a result is lent or given back). What :meth:`array`
    lends is uninitialised: read paths write every element (the fill value where nothing is
    stored)."""

    def __init__(self, max_bytes: int, max_seconds: float) -> None:
        self.max_bytes, self.max_seconds = max_bytes, max_seconds
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._free: list[tuple[float, mmap.mmap]] = []  # (given back at, mapping), oldest first
        # given back, not sorted in yet: an append, safe from any thread and from a garbage
        # collection that runs while this thread holds the lock
        self._given: deque[tuple[float, mmap.mmap]] = deque()
        self.free_bytes = 0

    def array(self, shape: tuple[int, ...], dtype: Any, order: MemoryOrder = "C"
              ) -> np.ndarray:
        """An uninitialised array, in a mapping given back lately where one fits."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if nbytes < MAPPED_BYTES or nbytes > self.max_bytes or \
                not hasattr(mmap, "MADV_FREE"):
            return fresh(shape, dtype, order)
        with self._lock:
            memory = self._take(nbytes)
        if memory is None:
            memory = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        holder = np.ndarray((len(memory),), np.uint8, buffer=memory)
        weakref.finalize(holder, self._give, memory).atexit = False
        return np.ndarray(shape, dtype, buffer=holder, order=order)

    def _take(self, nbytes: int) -> mmap.mmap | None:
        """The smallest mapping waiting that holds ``nbytes``, if it is at most twice that."""
        self._sort_in()
        best = None
        for i, (_, memory) in enumerate(self._free):
            if nbytes <= len(memory) <= 2 * nbytes and \
                    (best is None or len(memory) < len(self._free[best][1])):
                best = i
        if best is None:
            return None
        memory = self._free.pop(best)[1]
        self.free_bytes -= len(memory)
        return memory

    def _give(self, memory: mmap.mmap) -> None:
        memory.madvise(mmap.MADV_FREE)
        self._given.append((time.monotonic(), memory))
        if self._lock.acquire(blocking=False):  # else whoever holds it sorts it in
            try:
                self._sort_in()
            finally:
                self._lock.release()

    def _sort_in(self) -> None:
        """Move what was given back into the waiting list, then unmap the mappings that
        waited too long and the oldest beyond ``max_bytes``. Under the lock."""
        while self._given:
            entry = self._given.popleft()
            self._free.append(entry)
            self.free_bytes += len(entry[1])
        now = time.monotonic()
        while self._free and (self.free_bytes > self.max_bytes or
                              now - self._free[0][0] > self.max_seconds):
            _, memory = self._free.pop(0)
            self.free_bytes -= len(memory)
            with contextlib.suppress(BufferError):  # still exported: unmapped when dropped
                memory.close()


def available_memory(cgroup_root: str = "/sys/fs/cgroup") -> int | None:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit where that
    is lower (v2 ``memory.max``, v1 ``memory/memory.limit_in_bytes``); None where neither
    is known."""
    try:
        found: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows)
        found = None
    for path in (f"{cgroup_root}/memory.max", f"{cgroup_root}/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            found = int(text) if found is None else min(found, int(text))
    return found


def recycle_bytes(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """What :data:`RESULTS` keeps at most: ``RECYCLE_BYTES``, or a ``RECYCLE_SHARE``-th of
    the memory this process may use where that is less (a small container, a Dask worker)."""
    memory = available_memory(cgroup_root)
    return RECYCLE_BYTES if memory is None else min(RECYCLE_BYTES, memory // RECYCLE_SHARE)


#: The one recycler of read results (``StagedChangesArray.read``'s default allocator).
RESULTS = Recycler(recycle_bytes(), RECYCLE_SECONDS)
if hasattr(os, "register_at_fork"):  # a child starts with its own lock and nothing waiting
    os.register_at_fork(after_in_child=RESULTS._reset)


class Scratch(threading.local):
    """A block of memory per thread, lent again and again as arrays. A loop that reads a
    large box per turn (a pyramid task's source box) reuses pages already faulted in, where
    a :func:`fresh` array costs the system a zeroed page per 4 KiB: a quarter of a pyramid
    task's CPU on a segmentation. What :meth:`array` lends is valid until the same thread
    asks again."""

    block: np.ndarray | None = None

    def array(self, shape: tuple[int, ...], dtype: Any, order: MemoryOrder = "C"
              ) -> np.ndarray:
        """An uninitialised array over this thread's block, grown first if too small."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        if self.block is None or self.block.nbytes < nbytes:
            self.block = None  # the old block goes before the larger one is mapped
            self.block = fresh((max(nbytes, 1),), np.uint8)
        return np.ndarray(shape, dtype, buffer=self.block, order=order)
