"""One shared thread pool for CPU work that releases the GIL (numpy, zlib) and for I/O."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

WORKERS = max(2, os.cpu_count() or 1)
_pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="ngshard")


def pool() -> ThreadPoolExecutor:
    """The shared executor (never shut down: it lives as long as the process)."""
    return _pool


def pmap(fn: Callable[[T], R], items: Iterable[T], *, min_items: int = 64) -> list[R]:
    """``list(map(fn, items))``, spread over the pool when there are enough items to pay off."""
    items = list(items)
    if len(items) < min_items:
        return list(map(fn, items))
    chunk = -(-len(items) // (4 * WORKERS))
    return list(_pool.map(fn, items, chunksize=chunk))
