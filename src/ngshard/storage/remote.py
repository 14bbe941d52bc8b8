"""Objects behind any fsspec filesystem (memory, gcs, ...): every request of a batch in flight
at once on the filesystem's event loop, and whole objects written in one PUT. (``http(s)://``
is read through obstore, :mod:`ngshard.storage.http`, which lists a web server's folders
through this store.)

Servers that ignore Range requests: a plain static file server (``python3 -m http.server``,
i.e. ``http.server.SimpleHTTPRequestHandler``) answers a range request with 200 and the whole
file, and fsspec's HTTP filesystem hands that body back as if it were the range asked for. Each
ranged body is therefore checked against the object's size (every batch stats its objects after
reading): a body longer than its range, or one of the whole object's size where the range holds
less, is the whole object, and the range is sliced out of it. Reads stay correct; the store
warns once (:class:`RangesIgnoredWarning`) because each read now downloads whole files, and from
then on asks for each object once per batch instead of once per group of nearby ranges. (An
error instead would leave no way to read such a server at all, and for small stores served
from a laptop the whole-file reads cost little.) A body of neither the range's length nor the
object's (an error page answered with 200) is CorruptDataError naming the object; one shorter
than the range where the object holds more (cut short on the way) is asked for again, as a
transient failure.

Listing over HTTP rests on the server's directory pages (``python3 -m http.server``, nginx
with autoindex, ``ngshard serve --listing``); a server without them answers a folder with 404
(or 403). A folder that cannot be fetched is then either absent or unlistable: the store
asks the folders above it, and if none of them lists either, the server gives no listings
(:attr:`supports_listing` False, found once per store and the stores derived from it) and
:meth:`FsspecStorage.list` raises UnlistableError instead of claiming the folder is empty.

Every request (a stat, a whole or ranged read, a listing, a PUT, a delete) runs under the
store's retry policy (:mod:`ngshard.storage.retry`): a transient failure sends that one request
again, backing off; fsspec's HTTP filesystem does not retry by itself. The filesystem is an
instance of the store's own with no listing cache (``skip_instance_cache``,
``use_listings_cache=False``): a size or a listing is never one another store cached hours
ago. Range reads cannot say which version they read, so each batch asks the objects'
generations afterwards (a generation that still matches the caller's means the bytes came
from that version).

Writes are one PUT of the whole object. Conditional writes (``if_generation``) are exact
where the backend has a precondition: on ``gs://`` (:mod:`ngshard.storage.gcs`) and for
``memory://`` (one process: under a lock). Elsewhere the generation is checked just before
the PUT, which narrows, but cannot close, the window in which another writer's update can be
lost (object stores with preconditions go through :mod:`ngshard.storage.objectstore`).

Generations over HTTP rest on the size and the ETag, or where the server sends none (plain
``http.server``), the size and Last-Modified: there a replacement of the same size within the
same second goes unseen.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import warnings
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

import fsspec
import fsspec.asyn
import numpy as np

from ..errors import CorruptDataError, ReadOnlyError, RequestError, UnlistableError
from ..limits import REQUEST_CONCURRENCY
from ..threads import pmap
from ..types import Blob
from .base import ANY, MAX_GAP, FileSlice, ObjectInfo, Storage, coalesce, split_merged
from .options import fsspec_options
from .retry import RetryPolicy
from .transient import BodyLengthError

# Protocols with no way to write (fsspec's HTTP filesystem would try a POST).
_READ_ONLY_PROTOCOLS = frozenset({"http", "https"})
#: The gap that merges every range of an object into one read: for servers that send whole
#: files anyway.
WHOLE = 1 << 62
# Conditional writes to memory:// are made exact by holding this while checking and putting.
_MEMORY_LOCK = threading.Lock()


class RangesIgnoredWarning(UserWarning):
    """The server answers range requests with whole files: reads are right but slow."""


def ranges_ignored(url: str) -> RangesIgnoredWarning:
    """The warning of a store at ``url`` whose server was seen to ignore Range requests."""
    return RangesIgnoredWarning(f"{url}: the server ignores Range requests and sends whole "
                                f"files; reads stay right, but each one downloads whole shard "
                                f"files")


class _Listing:
    """Whether a server gives directory listings: None until found out; shared by a store
    and the stores derived from it (``child``, ``parent``)."""

    def __init__(self, known: bool | None) -> None:
        self.known = known


class FsspecStorage(Storage):
    """Objects behind any fsspec filesystem (memory, http, gcs, ...).

    ``options``: the filesystem's keyword arguments (see :mod:`ngshard.storage.options`);
    ``retry``: the policy every request runs under."""

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem | None = None,
                 root: str | None = None, *, options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None) -> None:
        if fs is None:
            fs, root = fsspec.core.url_to_fs(url, **fsspec_options(options or {}))
        elif root is None:  # the path in fs that url names
            root = fs._strip_protocol(url)
        self.fs, self.root, self.url = fs, root.rstrip("/"), url.rstrip("/")
        self.retry = retry if retry is not None else RetryPolicy()
        protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
        self.supports_writes = not protocols & _READ_ONLY_PROTOCOLS
        self._max_gap = MAX_GAP  # WHOLE once the server is seen to ignore Range requests
        # object stores and memory always list; a web server may not
        self._listing = _Listing(None if protocols & _READ_ONLY_PROTOCOLS else True)

    @property
    def max_gap(self) -> int:
        return self._max_gap

    @property
    def supports_listing(self) -> bool:  # type: ignore[override]
        if self._listing.known is None:
            self._listing.known = any(self._ls(s) is not None for s in self._and_above())
        return self._listing.known

    def _and_above(self):
        """This store, then the folders above it up to the server's root."""
        node: FsspecStorage | None = self
        while node is not None:
            yield node
            node = node.parent()

    def _ls(self, store: FsspecStorage) -> list[dict] | None:
        """The entries of ``store``'s folder, None where the server would not list it."""
        try:
            entries = self._sync_request(lambda: self.fs.ls(store.root, detail=True),
                                         store.url)
        except FileNotFoundError:
            return None
        except RequestError as e:  # 403 and the like from a web server: no listing either
            if self._listing.known is True or not 400 <= (e.status or 0) < 500:
                raise
            return None
        self._listing.known = True
        return entries

    def _sync_request(self, fn: Callable[[], Any], url: str) -> Any:
        """One request of the synchronous API under the retry policy."""
        return self.retry.request(fn, url=url)

    async def _request(self, fn: Callable[..., Awaitable[Any]], name: str, *args: Any) -> Any:
        """One request of the filesystem's async API under the retry policy."""
        return await self.retry.arequest(fn, *args, url=self.path(name))

    def _writable(self) -> None:
        if not self.supports_writes:
            raise ReadOnlyError(f"{self.url}: HTTP URLs are read-only (write to a local path "
                                f"or an object store, then serve that)")

    def _full(self, name: str) -> str:
        return f"{self.root}/{self.inside(name)}"

    @staticmethod
    def _info(info: dict) -> ObjectInfo:
        token = tuple(info.get(k) for k in ("ETag", "etag", "generation", "mtime",
                                             "LastModified", "last_modified", "Last-Modified",
                                             "created"))
        return ObjectInfo(int(info["size"]), (info["size"], token))

    @classmethod
    def _file_info(cls, info: dict) -> ObjectInfo | None:
        if info.get("type") == "directory" or info.get("size") is None:
            return None
        return cls._info(info)

    def stat(self, name: str) -> ObjectInfo | None:
        try:
            return self._file_info(self._sync_request(lambda: self.fs.info(self._full(name)),
                                                      self.path(name)))
        except FileNotFoundError:
            return None

    def read(self, name: str) -> bytes | None:
        try:
            return self._sync_request(lambda: self.fs.cat_file(self._full(name)),
                                      self.path(name))
        except FileNotFoundError:
            return None

    def _all_at_once(self, run: Callable[[Any], Awaitable], items: Sequence,
                     run_sync: Callable[[Any], Any]) -> list:
        """``run`` over ``items`` with every request in flight at once (within a bound), on
        the filesystem's own event loop; ``run_sync`` on threads for filesystems that are
        not async."""
        if not items:
            return []
        if not getattr(self.fs, "async_impl", False):
            return pmap(run_sync, items, min_items=2)

        async def every() -> list:
            gate = asyncio.Semaphore(REQUEST_CONCURRENCY)

            async def one(item: Any) -> Any:
                async with gate:
                    return await run(item)

            return list(await asyncio.gather(*map(one, items)))

        return fsspec.asyn.sync(self.fs.loop, every)

    def stat_many(self, names: Sequence[str]) -> list[ObjectInfo | None]:
        async def one(name: str) -> ObjectInfo | None:
            try:
                return self._file_info(await self._request(self.fs._info, name,
                                                           self._full(name)))
            except FileNotFoundError:
                return None

        return self._all_at_once(one, names, self.stat)

    def read_many(self, names: Sequence[str]) -> list[bytes | None]:
        async def one(name: str) -> bytes | None:
            try:
                return await self._request(self.fs._cat_file, name, self._full(name))
            except FileNotFoundError:
                return None

        return self._all_at_once(one, names, self.read)

    def write_many(self, items: Sequence[tuple[str, Blob]]) -> None:
        self._writable()

        async def one(item: tuple[str, Blob]) -> None:
            await self._request(self.fs._pipe_file, item[0], self._full(item[0]), item[1])

        self._all_at_once(one, items, lambda item: self.write(item[0], [item[1]]))

    def _cat_range(self, name: str, start: int, end: int) -> bytes | BaseException:
        """Bytes [start, end) of one object as the server sent them (see _range_body), or
        the FileNotFoundError or 416 error it answered with."""
        try:
            return self._sync_request(lambda: self.fs.cat_file(self._full(name), start, end),
                                      self.path(name))
        except (FileNotFoundError, RequestError) as e:
            return e

    def read_ranges(self, requests: Sequence[tuple[str, np.ndarray]]
                    ) -> list[tuple[Hashable | None, list[Blob] | None]]:
        asks: list[tuple[str, int, int]] = []
        plans = []
        for name, ranges in requests:
            ranges = np.asarray(ranges, np.int64).reshape(-1, 2)
            merged, assignment = coalesce(ranges, self._max_gap)
            plans.append((len(asks), merged, ranges, assignment))
            asks += [(name, s, e) for s, e in merged.tolist()]

        async def one(ask: tuple[str, int, int]) -> bytes | BaseException:
            name, start, end = ask
            try:
                return await self._request(self.fs._cat_file, name, self._full(name),
                                           start, end)
            except (FileNotFoundError, RequestError) as e:
                return e

        blobs = self._all_at_once(one, asks, lambda ask: self._cat_range(*ask))
        # Range reads cannot say which version they read, so ask afterwards: a generation
        # that still matches the caller's means the bytes came from that version.
        infos = self.stat_many([name for name, _ in requests])
        results: list[tuple[Hashable | None, list[Blob] | None]] = []
        for (name, _), (first, merged, ranges, assignment), info in zip(requests, plans, infos):
            mine = blobs[first:first + len(merged)]
            if info is None or any(isinstance(b, FileNotFoundError) for b in mine):
                results.append((None, None))
                continue
            mine = [self._range_body(blob, start, end, info.size, name)
                    for blob, (start, end) in zip(mine, merged.tolist())]
            results.append((info.generation, split_merged(merged, mine, ranges, assignment)))
        return results

    def _range_body(self, blob: bytes | BaseException, start: int, end: int, size: int,
                    name: str) -> bytes:
        """The bytes of [start, end) out of what the server answered to a request for them
        (see the module docstring for servers that send the whole object)."""
        if isinstance(blob, BaseException):
            if getattr(blob, "status", None) == 416:  # the range starts at or past the end
                return b""
            raise blob
        expected = max(0, min(end, size) - start)
        if len(blob) > end - start or (len(blob) == size != expected):
            if len(blob) != size:  # neither the range nor the object: an error page?
                raise CorruptDataError(
                    f"{self.path(name)}: the server sent {len(blob)} bytes for bytes "
                    f"[{start}, {end}) of an object of {size} bytes (an error page, or a "
                    f"proxy that rewrites answers?)")
            self._ranges_ignored()
            return blob[start:end]
        if len(blob) < expected:  # cut short on the way: ask again, under the policy
            return self._sync_request(lambda: self._range_of(name, start, end, expected, size),
                                      self.path(name))
        return blob

    def _range_of(self, name: str, start: int, end: int, expected: int, size: int) -> bytes:
        """Bytes [start, end) of an object of ``size`` bytes, asked for again after a body
        came cut short; one cut short again is BodyLengthError (transient)."""
        blob = self.fs.cat_file(self._full(name), start, end)
        if len(blob) < expected:
            raise BodyLengthError(f"{self.path(name)}: {len(blob)} bytes came for bytes "
                                  f"[{start}, {end}) of an object of {size} bytes")
        return self._range_body(blob, start, end, size, name)

    def _ranges_ignored(self) -> None:
        if self._max_gap != WHOLE:
            self._max_gap = WHOLE
            warnings.warn(ranges_ignored(self.url), stacklevel=2)

    def write(self, name: str, parts: Sequence[Blob | FileSlice], if_generation: Any = ANY
              ) -> None:
        self._writable()
        data = b"".join(p.read() if isinstance(p, FileSlice) else p for p in parts)
        if if_generation is ANY:
            self._put(name, data)
        elif self.fs.protocol in ("memory", ("memory",)):
            with _MEMORY_LOCK:  # one process holds memory://: the lock makes it exact
                self._check(name, if_generation)
                self._put(name, data)
        else:
            self._put_if(name, data, if_generation)

    def _put(self, name: str, data: bytes) -> None:
        """One PUT of the whole object: object stores make it visible atomically."""
        self._sync_request(lambda: self.fs.pipe_file(self._full(name), data), self.path(name))

    def _put_if(self, name: str, data: bytes, if_generation: Any) -> None:
        """A PUT only if the object still has ``if_generation`` (None: does not exist).
        Without a precondition of the backend, the check before the PUT narrows, but cannot
        close, the window for a conflict; backends with one override this."""
        self._check(name, if_generation)
        self._put(name, data)

    def delete(self, name: str, if_generation: Any = ANY) -> None:
        self._writable()
        self._check(name, if_generation)
        with contextlib.suppress(FileNotFoundError):
            self._sync_request(lambda: self.fs.rm_file(self._full(name)), self.path(name))

    def delete_many(self, names: Sequence[str]) -> None:
        self._writable()
        if not names:
            return
        try:  # one call: s3fs sends a DeleteObjects request per thousand names
            self.fs.rm([self._full(n) for n in names])
        except FileNotFoundError:  # some were gone already (filesystems that mind that)
            super().delete_many(names)

    def list(self, *, dirs: bool = False) -> list[str]:
        entries = self._ls(self)
        if entries is None:
            if self._listing.known is None:  # absent here, or no listings anywhere?
                self._listing.known = any(self._ls(s) is not None
                                          for s in itertools.islice(self._and_above(), 1, None))
            if not self._listing.known:
                raise UnlistableError(
                    f"{self.url}: the server gives no directory listings, so what this "
                    f"folder holds cannot be listed (every object of a known name still "
                    f"reads)")
            return []
        names = (e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries
                 if dirs or e.get("type") != "directory")
        return sorted(n for n in names if n)

    def child(self, name: str) -> FsspecStorage:
        name = self.inside(name, folder=True)
        return self._like(f"{self.url}/{name}", self._full(name))

    def _like(self, url: str, root: str) -> FsspecStorage:
        """A store on the same filesystem (and server, as far as Range goes, and retry
        policy) at ``root``."""
        other = type(self)(url, self.fs, root, retry=self.retry)
        other._max_gap, other._listing = self._max_gap, self._listing
        return other

    def parent(self) -> FsspecStorage | None:
        root, url = self.root.rpartition("/")[0], self.url.rpartition("/")[0]
        if not root or url.endswith(":/") or url.endswith(":"):
            return None
        return self._like(url, root)

