"""Byte stores: local files, object stores (S3, Azure through obstore; GCS through gcsfs) and
any fsspec URL behind one small interface (see ``base``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import MissingDependencyError, SpecError
from .base import ANY, MAX_GAP, FileSlice, ObjectInfo, Storage, changed_on_storage, coalesce
from .chains import Chain, Head, Ranges
from .gcs import GcsStorage
from .http import HttpStorage
from .local import LocalStorage, write_all, write_buffers
from .objectstore import ObjectStorage
from .options import (
    OBJECT_STORE_SCHEMES,
    http_store,
    object_store,
    options_for,
    parse_option,
    rooted_options,
    split_options,
)
from .remote import FsspecStorage, RangesIgnoredWarning
from .retry import RetryPolicy
from .tempnames import SPILL_PREFIX, owner_tag, remove_stale
from .tensorstore_specs import spec_source
from .urls import FORMATS, Source, canonical_url, parse_url


def source_of(url: str | os.PathLike | dict) -> Source:
    """The plain storage URL and the format of any accepted URL form (see
    :mod:`ngshard.storage.urls`) or of a tensorstore spec dict (see
    :mod:`ngshard.storage.tensorstore_specs`)."""
    return spec_source(url) if isinstance(url, dict) else parse_url(url)


#: What ``storage_options=`` takes: options by name (see :mod:`ngshard.storage.options`).
StorageOptions = Mapping[str, Any]

#: Where a layer or store is: a local path, any accepted URL form, or an open Storage.
Location = str | os.PathLike | Storage


def open_source(url: str | os.PathLike | dict | Storage, *, durable: bool = True,
                storage_options: StorageOptions | None = None) -> tuple[Storage, Source]:
    """:func:`open_storage` and :func:`source_of` in one: the storage, and what the URL
    says about the format (and, for a tensorstore spec, the scale); an open Storage names
    no format."""
    if isinstance(url, Storage):
        if storage_options:
            raise SpecError(f"{url.url}: storage_options apply to URLs; this storage is "
                            f"open already (give its URL instead)")
        return url, Source(url.url)
    source = source_of(url)
    return _open(source.url, durable, url, storage_options), source


def open_storage(url: str | os.PathLike | dict | Storage, *, durable: bool = True,
                 expect: str | None = None,
                 storage_options: StorageOptions | None = None) -> Storage:
    """The storage for a local path, a ``file://`` URL, an ``s3://``, ``gs://`` or ``az://``
    URL, any other fsspec URL, a Neuroglancer data source (``precomputed://gs://...``,
    ``gs://...|zarr3:``: see :mod:`ngshard.storage.urls`) or a tensorstore spec dict (an
    open Storage is returned as it is).

    Parameters
    ----------
    url
        Where the objects are.
    durable
        False skips the fsyncs of local writes (scratch work: faster, but a power cut may
        leave a shard empty or old).
    expect
        "precomputed" or "zarr": a URL that names the other format is a SpecError.
    storage_options
        Credentials, anonymous access, endpoint, requester-pays, and ngshard's ``retries``
        and ``retry_seconds`` (see :mod:`ngshard.storage.options`).

    Returns
    -------
    Storage

    Raises
    ------
    SpecError
        A URL ngshard cannot open, or options the backend refuses.
    MissingDependencyError
        The package the URL's scheme needs is not installed (the message says which).
    """
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
          storage_options: StorageOptions | None) -> Storage:
    """The storage at a plain storage URL; errors name the URL as the user gave it."""
    if storage_options is None:
        storage_options = options_for(url)
    retry, options = split_options(storage_options)
    if "://" not in url or url.startswith("file://"):
        if options:
            raise SpecError(f"{_shown(given)}: local paths take no storage options (given: "
                            f"{', '.join(sorted(options))})")
        local = LocalStorage(url.removeprefix("file://"), durable=durable)
        local.retry = retry
        return local
    scheme = url.split("://", 1)[0].lower()
    if scheme in OBJECT_STORE_SCHEMES:
        store, prefix = object_store(url, options, _shown(given))
        return ObjectStorage(url, store, prefix, retry, options=options)
    if scheme in ("http", "https"):
        store, prefix = http_store(url, options, _shown(given))
        return HttpStorage(url, store, prefix, retry, options=options)
    kind = GcsStorage if scheme in ("gs", "gcs") else FsspecStorage
    try:
        return kind(url, options=options, retry=retry)
    except ImportError as e:
        package = _PACKAGES.get(scheme)
        hint = f"pip install {package}" if package else str(e)
        raise MissingDependencyError(f"{_shown(given)}: {scheme}:// URLs need another "
                                     f"package: {hint}") from None
    except TypeError as e:  # an option the filesystem does not take
        raise SpecError(f"{_shown(given)}: storage_options: {e}") from None
    except ValueError as e:
        if "Protocol not known" not in str(e):
            raise
        raise SpecError(f"{_shown(given)}: unknown URL scheme {scheme!r} (give a local path, "
                        f"file://, memory://, http(s)://, s3://, gs://, az://, or another "
                        f"fsspec protocol, optionally inside precomputed:// or zarr://)"
                        ) from None


# What to install for the fsspec protocols users meet most.
_PACKAGES = {"gs": "'ngshard[cloud]' (gcsfs)", "gcs": "'ngshard[cloud]' (gcsfs)"}


__all__ = ["ANY", "FORMATS", "MAX_GAP", "Chain", "FileSlice", "FsspecStorage", "GcsStorage",
           "Head", "HttpStorage", "LocalStorage", "Ranges",
           "ObjectInfo", "ObjectStorage", "RangesIgnoredWarning", "RetryPolicy", "SPILL_PREFIX",
           "Source", "Storage", "StorageOptions", "canonical_url", "changed_on_storage",
           "coalesce", "open_source", "open_storage", "owner_tag", "parse_option", "parse_url",
           "remove_stale", "require_family", "rooted_options", "source_of", "write_all",
           "write_buffers"]
