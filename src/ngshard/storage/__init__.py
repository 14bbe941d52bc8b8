"""Byte stores: local files and any fsspec URL behind one small interface (see ``base``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import MissingDependencyError, SpecError
from .base import ANY, MAX_GAP, FileSlice, ObjectInfo, Storage, changed_on_storage, coalesce
from .local import LocalStorage, write_all, write_buffers
from .remote import FsspecStorage, RangesIgnoredWarning
from .tempnames import SPILL_PREFIX, owner_tag, remove_stale
from .tensorstore_specs import spec_source
from .urls import FORMATS, Source, canonical_url, parse_url


def source_of(url: str | os.PathLike | dict) -> Source:
    """The plain storage URL and the format of any accepted URL form (see
    :mod:`ngshard.storage.urls`) or of a tensorstore spec dict (see
    :mod:`ngshard.storage.tensorstore_specs`)."""
    return spec_source(url) if isinstance(url, dict) else parse_url(url)


def open_source(url: str | os.PathLike | dict | Storage, *, durable: bool = True,
                storage_options: Mapping[str, Any] | None = None) -> tuple[Storage, Source]:
    """:func:`open_storage` and :func:`source_of` in one: the storage, and what the URL
    says about the format (and, for a tensorstore spec, the scale); an open Storage names
    no format."""
    if isinstance(url, Storage):
        return url, Source(url.url)
    source = source_of(url)
    return _open(source.url, durable, url, storage_options), source


def open_storage(url: str | os.PathLike | dict | Storage, *, durable: bool = True,
                 expect: str | None = None,
                 storage_options: Mapping[str, Any] | None = None) -> Storage:
    """The storage for a local path, a ``file://`` URL, any fsspec URL, a Neuroglancer
    data source (``precomputed://gs://...``, ``gs://...|zarr3:``: see
    :mod:`ngshard.storage.urls`) or a tensorstore spec dict (an open Storage is returned as
    it is). ``durable=False`` skips the fsyncs of local writes (scratch work: faster, but a
    power cut may leave a shard empty or old). ``expect`` ("precomputed" or "zarr"): a URL
    that names the other format is a SpecError. ``storage_options``: the fsspec filesystem's
    options (credentials, endpoint) for a remote URL."""
    storage, source = open_source(url, durable=durable, storage_options=storage_options)
    if expect is not None:
        require_family(source, url, expect)
    return storage


def require_family(source: Source, url: object, expect: str) -> None:
    """SpecError when the URL names a format of the other family than ``expect``
    ("precomputed" or "zarr")."""
    if source.family not in (None, expect):
        raise SpecError(f"{_shown(url)}: the URL names {source.format}, but this opens "
                        f"{expect} data")


def _shown(url: object) -> str:
    return os.fspath(url) if isinstance(url, (str, os.PathLike)) else repr(url)


def _open(url: str, durable: bool, given: object,
          storage_options: Mapping[str, Any] | None = None) -> Storage:
    """The storage at a plain storage URL; errors name the URL as the user gave it."""
    if "://" not in url:
        return LocalStorage(url, durable=durable)
    if url.startswith("file://"):
        return LocalStorage(url[len("file://"):], durable=durable)
    scheme = url.split("://", 1)[0].lower()
    try:
        return FsspecStorage(url, options=storage_options)
    except ImportError as e:
        package = _PACKAGES.get(scheme)
        hint = f"pip install {package}" if package else str(e)
        raise MissingDependencyError(f"{_shown(given)}: {scheme}:// URLs need another "
                                     f"package: {hint}") from None
    except ValueError as e:
        if "Protocol not known" not in str(e):
            raise
        raise SpecError(f"{_shown(given)}: unknown URL scheme {scheme!r} (give a local path, "
                        f"file://, memory://, http(s)://, s3://, gs://, or another fsspec "
                        f"protocol, optionally inside precomputed:// or zarr://)") from None


# What to install for the fsspec protocols users meet most.
_PACKAGES = {"http": "'ngshard[http]' (aiohttp)", "https": "'ngshard[http]' (aiohttp)",
             "s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs",
             "abfs": "adlfs", "abfss": "adlfs"}


__all__ = ["ANY", "FORMATS", "MAX_GAP", "FileSlice", "FsspecStorage", "LocalStorage",
           "ObjectInfo", "RangesIgnoredWarning", "SPILL_PREFIX", "Source", "Storage",
           "canonical_url", "changed_on_storage", "coalesce", "open_source", "open_storage",
           "owner_tag", "parse_url", "remove_stale", "require_family", "source_of",
           "write_all", "write_buffers"]
