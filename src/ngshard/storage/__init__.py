"""Byte stores: local files and any fsspec URL behind one small interface (see ``base``)."""

from __future__ import annotations

import os

from ..errors import MissingDependencyError, SpecError
from .base import ANY, MAX_GAP, FileSlice, ObjectInfo, Storage, changed_on_storage, coalesce
from .local import LocalStorage, write_all, write_buffers
from .remote import FsspecStorage, RangesIgnoredWarning
from .tempnames import SPILL_PREFIX, owner_tag, remove_stale


def open_storage(url: str | os.PathLike | Storage, *, durable: bool = True) -> Storage:
    """The storage for a local path, a ``file://`` URL or any fsspec URL (an open Storage is
    returned as it is). ``durable=False`` skips the fsyncs of local writes (scratch work:
    faster, but a power cut may leave a shard empty or old)."""
    if isinstance(url, Storage):
        return url
    url = os.fspath(url)
    if "://" not in url:
        return LocalStorage(url, durable=durable)
    if url.startswith("file://"):
        return LocalStorage(url[len("file://"):], durable=durable)
    scheme = url.split("://", 1)[0].lower()
    try:
        return FsspecStorage(url)
    except ImportError as e:
        package = _PACKAGES.get(scheme)
        hint = f"pip install {package}" if package else str(e)
        raise MissingDependencyError(f"{url}: {scheme}:// URLs need another package: "
                                     f"{hint}") from None
    except ValueError as e:
        if "Protocol not known" not in str(e):
            raise
        raise SpecError(f"{url}: unknown URL scheme {scheme!r} (give a local path, file://, "
                        f"memory://, http(s)://, s3://, gs://, or another fsspec "
                        f"protocol)") from None


# What to install for the fsspec protocols users meet most.
_PACKAGES = {"http": "'ngshard[http]' (aiohttp)", "https": "'ngshard[http]' (aiohttp)",
             "s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
             "abfs": "adlfs", "abfss": "adlfs"}


__all__ = ["ANY", "MAX_GAP", "FileSlice", "FsspecStorage", "LocalStorage", "ObjectInfo",
           "RangesIgnoredWarning", "SPILL_PREFIX", "Storage", "changed_on_storage", "coalesce",
           "open_storage", "owner_tag", "remove_stale", "write_all", "write_buffers"]
