"""Objects in Google Cloud Storage (``gs://``) through gcsfs, with real preconditions.

Conditional writes send GCS's ``ifGenerationMatch``: ``0`` to create an object only where
none exists, the object's generation number to replace it only while it has not changed, so
of two writers of one shard exactly one succeeds and the other gets ConflictError (412), as
tensorstore's GCS driver does. gcsfs (JSON API) rather than obstore (which speaks GCS's XML
API): the GCS emulator the tests run (``gcp-storage-emulator``) answers the JSON API only, and
a backend no test can reach is a backend nobody checked. gcsfs's own retries (six tries,
pauses of 1 to 32 s, uncounted) are taken off: the store's policy retries every request, with
its budget, and counts them in ``stats()``. The plain
``gcsfs.core.GCSFileSystem`` is used, not the "extended" one recent gcsfs registers for
``gs://``: that one first asks a gRPC control API what kind of bucket it is, which costs a
minute of timeouts wherever that API is not reachable (emulators, firewalls).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import fsspec.asyn

from .base import ObjectInfo, changed_on_storage
from .options import fsspec_options
from .remote import FsspecStorage
from .retry import RetryPolicy


class GcsStorage(FsspecStorage):
    """:class:`~ngshard.storage.FsspecStorage` on gcsfs with ``ifGenerationMatch`` writes."""

    def __init__(self, url: str, fs: Any = None, root: str | None = None, *,
                 options: dict[str, Any] | None = None,
                 retry: RetryPolicy | None = None) -> None:
        if fs is None:
            fs = _filesystem()(**fsspec_options(options or {}))
            root = fs._strip_protocol(url)
        super().__init__(url, fs, root, retry=retry)

    @staticmethod
    def _info(info: dict) -> ObjectInfo:
        # The generation number is the precondition token: keep it first.
        return ObjectInfo(int(info["size"]), (str(info.get("generation")), int(info["size"]),
                                              info.get("md5Hash") or info.get("etag")))

    def _put_if(self, name: str, data: bytes, if_generation: Any) -> None:
        # The check first costs one request: it answers at once where a server ignores
        # ifGenerationMatch (the emulator does); GCS itself decides by the precondition.
        self._check(name, if_generation)
        bucket, key, _ = self.fs.split_path(self._full(name))
        match = "0" if if_generation is None else if_generation[0]
        url = f"{self.fs._location}/upload/storage/v1/b/{quote(bucket)}/o"
        sent = 0

        # A multipart upload (metadata, then the bytes): the media upload of an empty
        # object is refused by some servers.
        body = (b"--==0==\nContent-Type: application/json; charset=UTF-8\n\n" +
                json.dumps({"name": key}).encode() +
                b"\n--==0==\nContent-Type: application/octet-stream\n\n" + data +
                b"\n--==0==--")

        def upload() -> None:
            nonlocal sent
            sent += 1
            fsspec.asyn.sync(self.fs.loop, self.fs._call, "POST", url, uploadType="multipart",
                             ifGenerationMatch=match, data=body,
                             headers={"Content-Type": 'multipart/related; boundary="==0=="'})

        try:
            self._sync_request(upload, self.path(name))
        except FileExistsError:  # gcsfs' word for 412 Precondition Failed
            if sent > 1 and self.read(name) == data:
                return  # an earlier try landed; its answer was lost
            since = "it was found absent" if if_generation is None else "it was read"
            raise changed_on_storage(self.path(name), since) from None


_ONE_TRY: type | None = None


def _filesystem() -> type:
    """gcsfs' plain filesystem, each request sent once (the store's policy retries)."""
    from gcsfs.core import GCSFileSystem  # ImportError where gcsfs is missing, every time

    global _ONE_TRY
    if _ONE_TRY is None:
        class OneTryGCSFileSystem(GCSFileSystem):
            _request = GCSFileSystem._request.__wrapped__  # without gcsfs' retry_request

        OneTryGCSFileSystem.__module__ = __name__  # pickled by name (see __getattr__)
        OneTryGCSFileSystem.__qualname__ = "OneTryGCSFileSystem"
        _ONE_TRY = OneTryGCSFileSystem
    return _ONE_TRY


def __getattr__(name: str) -> type:
    # gcsfs is imported only when a gs:// URL is opened: the class is made then, and found
    # by name when a pickled store is opened in another process
    if name == "OneTryGCSFileSystem":
        return _filesystem()
    raise AttributeError(name)
