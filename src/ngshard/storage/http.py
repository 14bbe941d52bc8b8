"""Objects behind a web server (``http://``, ``https://``): read through obstore's HTTP store,
the same request path as S3 and Azure (:mod:`ngshard.storage.objectstore`), read-only.

Why obstore here (measured with ``tools/bench_http.py``, 1,000 random keys with 20 ms per
request): through fsspec and aiohttp two thirds of the reading process's CPU went to
aiohttp and asyncio per range, and range reads could not say which version of an object they
read, so each batch asked every object's size and ETag again with a HEAD. obstore answers
each ranged GET with the object's size (``Content-Range``) and ETag (or Last-Modified) from
the response's own headers, so a shard's index is one GET from offset 0 and its data reads
confirm themselves (:attr:`reads_report_generation`).

Servers that ignore Range requests (``python3 -m http.server`` answers 200 and the whole file):
obstore refuses such an answer to a range request; the object is then asked for whole, its
size confirmed with a HEAD (a body of another size is an error page or was cut on the way:
CorruptDataError naming the object), and the range sliced out of it. Reads stay correct; the
store warns once (:class:`~ngshard.storage.RangesIgnoredWarning`) because each read now
downloads whole files, and from then on (the store and those derived from it) asks for each
object once per batch, whole, instead of once per group of nearby ranges.

Listing rests on the server's directory pages (``python3 -m http.server``, nginx with
autoindex, ``ngshard serve --listing``), which obstore does not read (it speaks WebDAV):
:meth:`HttpStorage.list` and :attr:`~HttpStorage.supports_listing` are those of
:class:`~ngshard.storage.FsspecStorage` on the same URL (see :mod:`ngshard.storage.remote`).

Generations rest on the size and the ETag, or where the server sends none (plain
``http.server``), the size and Last-Modified: there a replacement of the same size within the
same second goes unseen.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from ..errors import CorruptDataError, ReadOnlyError
from ..types import Blob
from .base import ANY, FileSlice, ObjectInfo
from .objectstore import ObjectStorage, _Shared
from .remote import WHOLE, FsspecStorage, ranges_ignored
from .retry import RetryPolicy


class HttpStorage(ObjectStorage):
    """The files under a URL of a web server, read-only; made by
    :func:`~ngshard.storage.open_storage` for ``http://`` and ``https://`` URLs."""

    supports_writes = False

    def __init__(self, url: str, store: Any, prefix: str, retry: RetryPolicy, *,
                 options: dict[str, Any] | None = None, shared: _Shared | None = None) -> None:
        super().__init__(url, store, prefix, retry, options=options, shared=shared)
        self._pages: FsspecStorage | None = None

    def __reduce__(self) -> tuple:
        return _reopen, (self.url, self._shared.options, self.retry)

    @property
    def max_gap(self) -> int:
        return WHOLE if self._shared.ranges_ignored else super().max_gap

    async def _get(self, name: str, start: int | None = None, end: int | None = None
                   ) -> tuple[ObjectInfo, memoryview] | None:
        if start is not None and not self._shared.ranges_ignored:
            try:
                return await super()._get(name, start, end)
            except self._obs.exceptions.NotSupportedError:  # 200 and the whole object
                self._ranges_ignored()
        got = await super()._get(name)
        if got is None or start is None:
            return got
        # A range answered with a whole body: only a HEAD tells the whole object from an
        # error page or a body padded or cut on the way (this path only, never the usual).
        info = await self._head(name)
        if info is not None and info.size != len(got[1]):
            raise CorruptDataError(
                f"{self.path(name)}: the server sent {len(got[1])} bytes for bytes [{start}, "
                f"{end}) of an object of {info.size} bytes (an error page, or a proxy that "
                f"rewrites answers?)")
        return got[0], got[1][start:end]

    def _ranges_ignored(self) -> None:
        if not self._shared.ranges_ignored:
            self._shared.ranges_ignored = True
            warnings.warn(ranges_ignored(self.url), stacklevel=2)

    # --- listing: the server's directory pages, through fsspec ----------------------------

    @property
    def _listing(self) -> FsspecStorage:
        if self._pages is None:
            headers = self._shared.options.get("headers")  # the rest are obstore's
            self._pages = FsspecStorage(self.url, options={"headers": headers} if headers
                                        else {}, retry=self.retry)
        return self._pages

    @property
    def supports_listing(self) -> bool:  # type: ignore[override]
        return self._listing.supports_listing

    def list(self, *, dirs: bool = False) -> list[str]:
        return self._listing.list(dirs=dirs)

    # --- no writes ------------------------------------------------------------------------

    def _read_only(self) -> ReadOnlyError:
        return ReadOnlyError(f"{self.url}: HTTP URLs are read-only (write to a local path or "
                             f"an object store, then serve that)")

    def write(self, name: str, parts: Sequence[Blob | FileSlice], if_generation: Any = ANY
              ) -> None:
        raise self._read_only()

    def write_many(self, items: Sequence[tuple[str, Blob]]) -> None:
        raise self._read_only()

    def delete(self, name: str, if_generation: Any = ANY) -> None:
        raise self._read_only()

    def delete_many(self, names: Sequence[str]) -> None:
        raise self._read_only()


def _reopen(url: str, options: dict[str, Any], retry: RetryPolicy) -> HttpStorage:
    from .options import http_store

    store, prefix = http_store(url, options, url)
    return HttpStorage(url, store, prefix, retry, options=options)
