"""tensorstore spec dicts for the ``neuroglancer_precomputed`` and zarr drivers, turned into
the :class:`~ngshard.storage.urls.Source` the same data has as a URL.

``{"driver": "neuroglancer_precomputed", "kvstore": KVSTORE, "path": "sub", "scale_index": 0,
"scale_metadata": {...}}`` and ``{"driver": "zarr3" | "zarr" | "zarr2", "kvstore": ...}``
(tensorstore's "zarr" driver is Zarr v2). ``KVSTORE`` is a kvstore URL (``"gs://b/p/"``,
``"file:///x/"``, ...) or a kvstore dict of the drivers ``file``, ``gcs``, ``s3``, ``http``
and ``memory``; the spec's ``path`` is joined onto it, as tensorstore does.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ..errors import SpecError
from .urls import Source, parse_url

_DRIVERS = {"neuroglancer_precomputed": "precomputed", "zarr3": "zarr3", "zarr": "zarr2",
            "zarr2": "zarr2"}
# Members that change nothing about what is read (caching, concurrency, the default "open").
_HARMLESS = {"context", "recheck_cached_data", "recheck_cached_metadata", "cache_pool",
             "data_copy_concurrency", "open"}
_KVSTORE_MEMBERS = {"file": {"path"}, "gcs": {"bucket", "path", "user_project"},
                    "s3": {"bucket", "path", "aws_region", "requester_pays"},
                    "http": {"base_url", "path"}, "memory": {"path", "atomic"}}


def spec_source(spec: dict) -> Source:
    """The source a tensorstore spec dict opens.

    Parameters
    ----------
    spec
        A tensorstore spec (JSON as a dict) of the precomputed or a zarr driver.

    Returns
    -------
    Source
        ``scale``: the ``scale_index`` or ``scale_metadata`` key (or ``("resolution",
        [x, y, z])``), None for the first scale; ``checks``: ``dtype``, the rest of
        ``scale_metadata`` and ``multiscale_metadata``, which the layer must agree with.

    Raises
    ------
    SpecError
        No driver, a driver, kvstore or member ngshard does not support (named).
    """
    where = f"tensorstore spec {_short(spec)}"
    driver = spec.get("driver")
    if driver is None:
        raise SpecError(f"{where}: no \"driver\" (expected neuroglancer_precomputed, zarr3, "
                        f"zarr or zarr2)")
    if driver not in _DRIVERS:
        raise SpecError(f"{where}: driver {driver!r} is not supported (ngshard opens "
                        f"neuroglancer_precomputed, zarr3, zarr and zarr2)")
    fmt = _DRIVERS[driver]
    allowed = {"driver", "kvstore", "path", "dtype"} | _HARMLESS
    if fmt == "precomputed":
        allowed |= {"scale_index", "scale_metadata", "multiscale_metadata"}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise SpecError(f"{where}: member {unknown[0]!r} is not supported for driver "
                        f"{driver} (ngshard takes {', '.join(sorted(allowed - _HARMLESS))})")
    if spec.get("open", True) is not True:
        raise SpecError(f"{where}: \"open\" must be true (ngshard opens what is there)")
    if "kvstore" not in spec:
        raise SpecError(f"{where}: no \"kvstore\" (where the data is)")
    try:
        url = _join(_kvstore_url(spec["kvstore"], where), _text(spec.get("path", ""), "path",
                                                                    where))
    except SpecError as e:
        message = str(e)
        raise SpecError(message if message.startswith(where) else f"{where}: {message}"
                        ) from None
    scale, checks = _scale(spec, where) if fmt == "precomputed" else (None, {})
    if "dtype" in spec:
        checks["dtype"] = _text(spec["dtype"], "dtype", where)
    return Source(url, fmt, scale, checks or None)


def _short(spec: Any) -> str:
    text = repr(spec)
    return text if len(text) <= 200 else text[:197] + "..."


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise SpecError(f"{where}: {what} must be a string, not {value!r}")
    return value


def _join(base: str, path: str) -> str:
    path = path.strip("/")
    return base if not path else f"{base.rstrip('/')}/{path}"


def _kvstore_url(kvstore: Any, where: str) -> str:
    """The storage URL of a tensorstore kvstore (a URL, or a dict of a supported driver)."""
    if isinstance(kvstore, str):
        source = parse_url(kvstore)
        if source.format is not None:
            raise SpecError(f"{where}: the kvstore {kvstore!r} names a format; the driver "
                            f"says which")
        return source.url
    if not isinstance(kvstore, dict):
        raise SpecError(f"{where}: kvstore must be a URL or an object, not {kvstore!r}")
    driver = kvstore.get("driver")
    if driver not in _KVSTORE_MEMBERS:
        raise SpecError(f"{where}: kvstore driver {driver!r} is not supported (ngshard reads "
                        f"file, gcs, s3, http and memory kvstores)")
    unknown = sorted(set(kvstore) - _KVSTORE_MEMBERS[driver] - {"driver", "context"})
    if unknown:
        raise SpecError(f"{where}: kvstore member {unknown[0]!r} is not supported for the "
                        f"{driver} kvstore")
    path = _text(kvstore.get("path", ""), "kvstore path", where)
    if driver == "file":
        if not path:
            raise SpecError(f"{where}: the file kvstore has no path")
        return parse_url(f"file://{path}" if path.startswith("/") else path).url
    if driver == "memory":
        return f"memory://{path.strip('/')}"
    if driver == "http":
        base = _text(kvstore.get("base_url", ""), "base_url", where)
        if not base.lower().startswith(("http://", "https://")):
            raise SpecError(f"{where}: the http kvstore's base_url {base!r} is not an "
                            f"http(s) URL")
        # tensorstore's http paths are unescaped; the URL needs them escaped
        return parse_url(_join(base, quote(path, safe="/"))).url
    bucket = _text(kvstore.get("bucket", ""), "bucket", where)
    if not bucket:
        raise SpecError(f"{where}: the {driver} kvstore has no bucket")
    if kvstore.get("requester_pays"):
        raise SpecError(f"{where}: requester_pays buckets are not supported")
    scheme = "gs" if driver == "gcs" else "s3"
    return parse_url(_join(f"{scheme}://{bucket}", path)).url


def _scale(spec: dict, where: str) -> tuple[Any, dict]:
    """The scale a precomputed spec selects, and the constraints it sets."""
    checks: dict = {}
    scale = spec.get("scale_index")
    if scale is not None and (not isinstance(scale, int) or isinstance(scale, bool)
                              or scale < 0):
        raise SpecError(f"{where}: scale_index must be an integer >= 0, not {scale!r}")
    meta = spec.get("scale_metadata")
    if meta is not None:
        if not isinstance(meta, dict):
            raise SpecError(f"{where}: scale_metadata must be an object")
        meta = dict(meta)
        key, resolution = meta.pop("key", None), meta.get("resolution")
        if scale is None:
            scale = _text(key, "scale_metadata.key", where) if key is not None else \
                ("resolution", resolution) if resolution is not None else None
        elif key is not None:
            meta["key"] = key
        if meta:
            checks["scale_metadata"] = meta
    multi = spec.get("multiscale_metadata")
    if multi is not None:
        if not isinstance(multi, dict):
            raise SpecError(f"{where}: multiscale_metadata must be an object")
        checks["multiscale_metadata"] = multi
    return scale, checks
