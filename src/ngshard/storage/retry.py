"""The one retry policy of ngshard's storage: run a request again when it fails transiently,
and an operation again when it finds an object changed under it, backing off, within a number
of tries and a total time budget, counting what it did.

Two kinds of failure are tried again, each where it is best repeated:

- A request that fails transiently (HTTP 408/429/5xx, a reset or refused connection, a
  timeout, a body cut short: :func:`~ngshard.storage.transient.is_transient`) is sent again
  by the remote storage that sent it (:meth:`RetryPolicy.request`, or
  :meth:`RetryPolicy.arequest` on an event loop), so a 503 repeats one range read or one PUT,
  not a whole batch. One that still fails after ``retries`` more tries, or past ``budget``
  seconds, raises :class:`~ngshard.errors.RequestError` naming the URL, the HTTP status and
  the number of tries; a failure that is an answer (403, 400) raises it at once, and a
  missing object or a failed precondition is left to the caller (FileNotFoundError, a
  conflict).
- A read through an index (a shard index, then the bytes it points at) can meet another
  writer's commit between the two reads. The reader notices (the bytes came from another
  generation of the object) and raises :class:`Stale`; :meth:`RetryPolicy.run` runs the whole
  operation again, each object allowed ``retries`` changes during one operation. An object
  that goes on changing gives :class:`~ngshard.errors.ChangedError` naming it and the number
  of tries, from every reader alike.

Both back off exponentially with jitter (pause n drawn from ``[p / 2, p]``, ``p`` doubling
from ``first`` up to ``longest``; requests start from ``request_first``, as a server that
sheds load needs longer than a writer finishing a commit), and both are run by tenacity. A
storage owns one policy (``storage.retry``, set by the ``retries`` and ``retry_seconds``
storage options); its readers share it, so their ``stats()`` count both kinds of retries.
The first try costs one ``try``: single-key reads run under the policy on their hot path.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import tenacity
import tenacity.stop

from ..errors import ChangedError, RequestError
from ..limits import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    DEFAULT_READ_RETRIES,
    REQUEST_BACKOFF_FIRST,
    REQUEST_BACKOFF_MAX,
    RETRY_SECONDS,
)
from .transient import describe, http_status, is_request_failure, is_transient

R = TypeVar("R")


class Stale(Exception):
    """Raised inside an operation run by :meth:`RetryPolicy.run`: the object ``name`` (at
    ``where``, for messages) changed under it, so what the operation knew of it is stale and
    the operation must run again. Raise it through :meth:`IndexCache.stale
    <ngshard.storage.index_cache.IndexCache.stale>`, which forgets the cached entry first."""

    def __init__(self, name: str, where: str) -> None:
        super().__init__(where)
        self.name, self.where = name, where


class _TooOften(tenacity.stop.stop_base):
    """Stop once one object has been found changed ``retries + 1`` times."""

    def __init__(self, retries: int) -> None:
        self.retries = retries
        self.changes: Counter[str] = Counter()

    def __call__(self, state: tenacity.RetryCallState) -> bool:
        where = state.outcome.exception().where  # type: ignore[union-attr]
        self.changes[where] += 1
        return self.changes[where] > self.retries


class RetryPolicy:
    """How often and how long a request or an operation is tried again, and counts of what
    happened.

    Parameters
    ----------
    retries
        How many times one request may be sent again after a transient failure, and one
        object may be found changed during one operation, before giving up (``retries + 1``
        tries).
    first, longest
        The first pause and the longest before an operation runs again over a changed
        object, in seconds: pause n is drawn from ``[p / 2, p]`` with
        ``p = min(longest, first * 2**n)``.
    budget
        Seconds all the tries of one operation, or of one request, may take: no pause starts
        that would end past it.
    request_first, request_longest
        The same pauses before a request is sent again after a transient failure.

    One policy may be shared by the readers and requests of one store, on several threads
    and an event loop (the counts are kept under a lock).
    """

    def __init__(self, retries: int = DEFAULT_READ_RETRIES, *, first: float = BACKOFF_FIRST,
                 longest: float = BACKOFF_MAX, budget: float = RETRY_SECONDS,
                 request_first: float = REQUEST_BACKOFF_FIRST,
                 request_longest: float = REQUEST_BACKOFF_MAX) -> None:
        self.retries, self.first, self.longest, self.budget = retries, first, longest, budget
        self.request_first, self.request_longest = request_first, request_longest
        #: Tries run again (of operations over changed objects and of failed requests), of
        #: them the requests sent again, and operations or requests given up.
        self.retried = self.resent = self.gave_up = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"RetryPolicy(retries={self.retries}, first={self.first}, "
                f"longest={self.longest}, budget={self.budget}, "
                f"request_first={self.request_first}, request_longest={self.request_longest})")

    def __getstate__(self) -> dict:  # crosses process boundaries (pools, Dask): no lock
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

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
            first: list[BaseException] = [e]

        def again() -> R:
            if first:  # the failed fast try counts as tenacity's first attempt
                raise first.pop()
            return fn(*args)

        too_often = _TooOften(self.retries)
        try:
            return tenacity.Retrying(
                retry=tenacity.retry_if_exception_type(Stale),
                stop=tenacity.stop_before_delay(self.budget) | too_often,
                wait=lambda state: self.pause(state.attempt_number),
                before_sleep=self._count(resent=False))(again)
        except tenacity.RetryError as e:
            self._give_up()
            stale = e.last_attempt.exception()
            assert isinstance(stale, Stale)
            n = too_often.changes[stale.where]
            why = "" if n > self.retries else f" in the {self.budget:g} s retry budget"
            raise ChangedError(f"{stale.where}: changed under each of {n} tries of one "
                               f"read{why} (another writer commits to it without "
                               f"pause)") from None

    def request(self, fn: Callable[..., R], *args: Any, url: str) -> R:
        """``fn(*args)``, one storage request to ``url``, sent again after each transient
        failure as the policy says.

        Raises
        ------
        RequestError
            The request failed with an error that is not transient, or failed transiently
            ``retries + 1`` times or until the budget ran out; the message names ``url``,
            the HTTP status and the number of tries.
        """
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - sorted by _first_failure
            first = self._first_failure(e, url)

        def again() -> R:
            if first:
                raise first.pop()
            return fn(*args)

        retrying = tenacity.Retrying(**self._request_rules())
        with self._settled(retrying, url):
            return retrying(again)

    async def arequest(self, fn: Callable[..., Awaitable[R]], *args: Any, url: str) -> R:
        """:meth:`request` for a request made by a coroutine function, on an event loop."""
        try:
            return await fn(*args)
        except Exception as e:  # noqa: BLE001 - sorted by _first_failure
            first = self._first_failure(e, url)

        async def again() -> R:
            if first:
                raise first.pop()
            return await fn(*args)

        retrying = tenacity.AsyncRetrying(**self._request_rules())
        with self._settled(retrying, url):
            return await retrying(again)

    def pause(self, n: int, first: float | None = None, longest: float | None = None
              ) -> float:
        """Seconds to wait before try ``n + 1`` (n >= 1), jittered: of an operation over a
        changed object, or, given the request pauses, of a request."""
        first = self.first if first is None else first
        longest = self.longest if longest is None else longest
        most = min(longest, first * 2 ** min(n, 60))
        return random.uniform(most / 2, most)

    def stats(self) -> dict[str, int]:
        """``retries`` (tries run again: operations over a changed object and requests sent
        again), ``retries_requests`` (of them, requests sent again after a transient
        failure) and ``retries_gave_up`` (operations and requests given up)."""
        return {"retries": self.retried, "retries_requests": self.resent,
                "retries_gave_up": self.gave_up}

    # --- the request rules ----------------------------------------------------------------

    def _first_failure(self, e: Exception, url: str) -> list[BaseException]:
        """The failure of a request's fast first try, to hand to tenacity; raised on where
        it is an answer (a missing object, a conflict) or not a request's failure at all."""
        if not is_request_failure(e):
            raise e
        if not is_transient(e):
            raise RequestError(f"{url}: {describe(e)}", url, http_status(e), 1) from e
        return [e]

    def _request_rules(self) -> dict[str, Any]:
        return {"retry": tenacity.retry_if_exception(is_transient),
                "stop": tenacity.stop_after_attempt(self.retries + 1) |
                tenacity.stop_before_delay(self.budget),
                "wait": lambda state: self.pause(state.attempt_number, self.request_first,
                                                 self.request_longest),
                "before_sleep": self._count(resent=True)}

    def _count(self, resent: bool) -> Callable[[tenacity.RetryCallState], None]:
        def count(state: tenacity.RetryCallState) -> None:
            with self._lock:
                self.retried += 1
                self.resent += resent
        return count

    def _give_up(self) -> None:
        with self._lock:
            self.gave_up += 1

    @contextmanager
    def _settled(self, retrying: tenacity.BaseRetrying, url: str) -> Iterator[None]:
        """Turns what ``retrying`` gave up with into the error :meth:`request` raises."""
        try:
            yield
        except tenacity.RetryError as e:
            raise self._failed(e, url) from None
        except Exception as e:
            final = self._final(e, url, retrying.statistics)
            if final is e:
                raise
            raise final from e

    def _failed(self, e: tenacity.RetryError, url: str) -> RequestError:
        """The error of a request that failed transiently on every try."""
        self._give_up()
        last = e.last_attempt.exception()
        assert last is not None
        tries = e.last_attempt.attempt_number
        budget = "" if tries > self.retries else f" within the {self.budget:g} s retry budget"
        return RequestError(f"{url}: {describe(last)}, on each of {tries} tries{budget} "
                            f"(transient failures are retried: see the retries and "
                            f"retry_seconds storage options)", url, http_status(last), tries)

    def _final(self, e: Exception, url: str, statistics: dict) -> Exception:
        """A retried request's failure that is not transient: an answer (a missing object,
        a conflict) as it is; else a RequestError naming the tries."""
        if not is_request_failure(e):
            return e
        tries = statistics.get("attempt_number", 1)
        return RequestError(f"{url}: {describe(e)} (on try {tries})", url, http_status(e),
                            tries)
