"""The one retry policy of the readers: run an operation again, backing off, when it finds an
object changed under it, within a number of tries per object and a total time budget.

A read through an index (a shard index, then the bytes it points at) can meet another
writer's commit between the two reads. The reader notices (the bytes came from another
generation of the object) and raises :class:`Stale`; :meth:`RetryPolicy.run` runs the whole
operation again after a pause: exponential backoff with jitter (readers beside a busy writer
spread out), each object allowed ``retries`` changes during one operation, all retries within
``budget`` seconds. An object that goes on changing gives :class:`~ngshard.errors.ChangedError`
naming it and the number of tries, from every reader alike.

The first try costs one ``try``: single-key reads run under the policy on their hot path.

Transient I/O errors (issue 21)
-------------------------------
Retries of transient storage errors (HTTP 408/429/5xx, connection resets, timeouts, the cloud
SDKs' retryable errors) belong here too, as a second retryable class of the same policy, so
every reader and writer gets them at once. The plan: :meth:`RetryPolicy.run` keeps its fast
first try and catches ``(Stale, *TRANSIENT)``; its loop becomes a ``tenacity.Retrying`` with
``retry=retry_if_exception(self.retryable)``, ``wait=wait_exponential_jitter(self.first,
self.longest)``, ``stop=stop_after_delay(self.budget) | self._stop`` (the per-object count
of :meth:`_again`, keyed by ``Stale.where`` or the failing URL) and ``before_sleep`` counting
``retried``; ``retryable`` tells the two classes apart, and a transient error that is still
failing when the policy gives up raises an error naming the URL, the status and the tries
rather than :class:`ChangedError`. A transient error is best repeated where it happens: the
remote storage runs each request (a range read, a stat, a PUT) under the store's policy, so
a 503 repeats one request, not a whole batched read. Settings stay the fields below
(``open_*`` passes them); ``stats()`` adds a count of transient retries.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import ChangedError
from ..limits import BACKOFF_FIRST, BACKOFF_MAX, DEFAULT_READ_RETRIES, RETRY_SECONDS

R = TypeVar("R")


class Stale(Exception):
    """Raised inside an operation run by :meth:`RetryPolicy.run`: the object ``name`` (at
    ``where``, for messages) changed under it, so what the operation knew of it is stale and
    the operation must run again. Raise it through :meth:`IndexCache.stale
    <ngshard.storage.index_cache.IndexCache.stale>`, which forgets the cached entry first."""

    def __init__(self, name: str, where: str) -> None:
        super().__init__(where)
        self.name, self.where = name, where


class RetryPolicy:
    """How often and how long an operation is tried again, and counts of what happened.

    Parameters
    ----------
    retries
        How many times one object may be found changed during one operation before the
        operation gives up (``retries + 1`` tries of it).
    first, longest
        The first pause and the longest, in seconds: pause n is drawn from
        ``[p / 2, p]`` with ``p = min(longest, first * 2**n)``.
    budget
        Seconds all the tries of one operation may take: no pause starts that would end
        past it.

    One policy may be shared by the readers of one store, on several threads (the counts are
    kept under a lock).
    """

    def __init__(self, retries: int = DEFAULT_READ_RETRIES, *, first: float = BACKOFF_FIRST,
                 longest: float = BACKOFF_MAX, budget: float = RETRY_SECONDS) -> None:
        self.retries, self.first, self.longest, self.budget = retries, first, longest, budget
        #: Tries run again, and operations given up, since the policy was made.
        self.retried = self.gave_up = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"RetryPolicy(retries={self.retries}, first={self.first}, "
                f"longest={self.longest}, budget={self.budget})")

    def run(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)``, run again after each :class:`Stale` it raises, as the policy says.

        Raises
        ------
        ChangedError
            One object changed under more than ``retries`` tries, or the budget ran out.
        """
        try:
            return fn(*args)
        except Stale as e:
            return self._again(fn, args, e)

    def pause(self, n: int) -> float:
        """Seconds to wait before try ``n + 1`` of an object (n >= 1), jittered."""
        longest = min(self.longest, self.first * 2 ** min(n, 60))
        return random.uniform(longest / 2, longest)

    def stats(self) -> dict[str, int]:
        """``retries`` (tries run again) and ``retries_gave_up`` (operations given up)."""
        return {"retries": self.retried, "retries_gave_up": self.gave_up}

    def _again(self, fn: Callable[..., R], args: tuple, stale: Stale) -> R:
        start = time.monotonic()
        changes: Counter[str] = Counter()
        while True:
            changes[stale.where] += 1
            n = changes[stale.where]
            pause = self.pause(n)
            if n > self.retries or time.monotonic() - start + pause > self.budget:
                with self._lock:
                    self.gave_up += 1
                why = "" if n > self.retries else f" in the {self.budget:g} s retry budget"
                raise ChangedError(f"{stale.where}: changed under each of {n} tries of one "
                                   f"read{why} (another writer commits to it without "
                                   f"pause)") from None
            with self._lock:
                self.retried += 1
            time.sleep(pause)
            try:
                return fn(*args)
            except Stale as e:
                stale = e
