"""The URL forms users bring from Neuroglancer, cloud-volume and tensorstore, turned into the
plain storage URL ngshard opens and the format the URL names.

Accepted (``KVSTORE`` is a local path, ``file://``, ``memory://``, ``gs://``, ``s3://``,
``http(s)://`` or any other fsspec URL):

- ``KVSTORE``: no format named (found from what is there);
- ``precomputed://KVSTORE``, ``zarr://KVSTORE``, ``zarr2://KVSTORE``, ``zarr3://KVSTORE``:
  Neuroglancer's (and cloud-volume's) data source prefixes;
- ``KVSTORE|neuroglancer-precomputed:``, ``KVSTORE|zarr:``, ``KVSTORE|zarr2:``,
  ``KVSTORE|zarr3:`` (and ``KVSTORE/|...``): Neuroglancer's URL pipelines; the zarr ones may
  carry a path inside the hierarchy after the colon (``KVSTORE/|zarr3:level/0/``);
- ``gs+ngauth+https://HOST/BUCKET/PATH``: Neuroglancer's authenticated GCS form, read as
  ``gs://BUCKET/PATH`` with this machine's credentials (as neuroglancer's Python API does).

Formats: "precomputed", "zarr" (either version), "zarr2", "zarr3", or None. Everything here
is string work: opening the storage is :func:`ngshard.storage.open_storage`'s.
"""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

from ..errors import SpecError

#: The formats a URL can name; also the legacy ``NAME://`` prefixes that name them.
FORMATS = ("precomputed", "zarr", "zarr2", "zarr3")
# The formats as Neuroglancer's ``|NAME:`` pipeline components name them.
_PIPELINE = {"neuroglancer-precomputed": "precomputed", "zarr": "zarr", "zarr2": "zarr2",
             "zarr3": "zarr3"}
# Neuroglancer data sources and kvstore adapters ngshard does not read: named in the error.
_OTHER_SOURCES = {"n5", "nifti", "graphene", "boss", "dvid", "render", "python", "brainmaps",
                  "deepzoom", "nggraph", "obj", "vtk", "ngauth"}
_ADAPTERS = {"zip", "ocdbt", "icechunk", "gzip", "byte-range", "n5", "nifti", "deepzoom"}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://(.*)", re.DOTALL)
_COMPONENT = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(.*)", re.DOTALL)
_NGAUTH = re.compile(r"gs\+ngauth\+https?://[^/]+/(.*)", re.DOTALL | re.IGNORECASE)


class Source(NamedTuple):
    """What a URL names: ``url``, the plain storage URL (or path) to open; ``format``, one of
    :data:`FORMATS` or None; ``scale``, a scale a tensorstore spec selects (its
    ``scale_index``, a key, or ``("resolution", [x, y, z])``), None otherwise; ``checks``,
    members of a tensorstore spec the layer must agree with (``{"dtype": ...,
    "scale_metadata": {...}, "multiscale_metadata": {...}}``)."""

    url: str
    format: str | None = None
    scale: int | str | tuple[str, Any] | None = None
    checks: dict | None = None

    @property
    def family(self) -> str | None:
        """"precomputed", "zarr" or None."""
        return None if self.format is None else "precomputed" if \
            self.format == "precomputed" else "zarr"


def parse_url(url: str | os.PathLike) -> Source:
    """The plain storage URL and the format of any accepted URL form (see the module
    docstring).

    Parameters
    ----------
    url
        A path, a storage URL, or a Neuroglancer data source URL.

    Returns
    -------
    Source
        ``scale`` and ``checks`` are None.

    Raises
    ------
    SpecError
        An empty URL or path, a pipeline part or data source ngshard does not read, a
        format prefix around another one, or Neuroglancer options it cannot honour; the
        message names the URL.
    """
    try:
        text = os.fspath(url)
    except TypeError:
        text = None
    if not isinstance(text, str):
        raise SpecError(f"{url!r}: a URL or path must be text")
    if "|" in text:
        return _pipeline(text)
    m = _SCHEME.fullmatch(text)
    if m is not None and m.group(1).lower() in FORMATS:
        fmt = m.group(1).lower()
        inner, fragment = _split_fragment(m.group(2))
        _fragment(fmt, fragment, text)
        return Source(_kvstore(inner, text), fmt)
    return Source(_kvstore(text, text))


def _pipeline(text: str) -> Source:
    """``KVSTORE|format:`` (Neuroglancer's URL pipeline)."""
    parts = text.rstrip("|").split("|")  # trailing "|" are dropped, as Neuroglancer does
    root, rest = parts[0], parts[1:]
    if not rest:
        return Source(_kvstore(root, text))
    m = _SCHEME.fullmatch(root)
    if m is not None and m.group(1).lower() in FORMATS:
        raise SpecError(f"{text}: a {root.split(':', 1)[0]}:// prefix cannot start a "
                        f"|-pipeline (give KVSTORE|format: or format://KVSTORE)")
    comps = []
    for part in rest:
        m = _COMPONENT.fullmatch(part)
        if m is None:
            raise SpecError(f"{text}: {part!r} is not a pipeline part (expected "
                            f"'scheme:', e.g. '|zarr3:')")
        comps.append((m.group(1).lower(), m.group(2)))
    scheme, suffix = comps[-1]
    for name, _ in comps:
        if name not in _PIPELINE:
            kind = "adapter" if name in _ADAPTERS else "pipeline part"
            raise SpecError(f"{text}: the |{name}: {kind} is not supported (ngshard reads "
                            f"KVSTORE|neuroglancer-precomputed:, KVSTORE|zarr:, |zarr2:, "
                            f"|zarr3:)")
    if len(comps) > 1:
        raise SpecError(f"{text}: more than one format in one pipeline")
    fmt = _PIPELINE[scheme]
    path, fragment = _split_fragment(suffix)
    if "?" in path:
        raise SpecError(f"{text}: query parameters after |{scheme}: are not supported")
    _fragment(fmt, fragment, text)
    if path and fmt == "precomputed":
        raise SpecError(f"{text}: |neuroglancer-precomputed: takes no path after it (put "
                        f"the path in the URL before the '|')")
    base = _kvstore(root, text)
    if path.strip("/"):
        base = f"{base.rstrip('/')}/{path.strip('/')}"
    return Source(base, fmt)


def _split_fragment(text: str) -> tuple[str, str | None]:
    inner, sep, fragment = text.partition("#")
    return inner, fragment if sep else None


def _fragment(fmt: str, fragment: str | None, text: str) -> None:
    """Neuroglancer's ``#...`` options: ``type=mesh`` (a legacy mesh folder without an info,
    which ngshard finds by its manifests anyway) is accepted; the rest are refused rather
    than silently ignored."""
    if fragment is None or fragment == "" or (fmt == "precomputed" and fragment == "type=mesh"):
        return
    if fmt in ("zarr", "zarr2") and fragment.startswith("dimension_separator="):
        raise SpecError(f"{text}: #{fragment} is not supported: ngshard reads the separator "
                        f"from .zarray (set \"dimension_separator\" there)")
    raise SpecError(f"{text}: the URL option #{fragment} is not supported")


def _kvstore(text: str, whole: str) -> str:
    """The plain storage URL of a kvstore URL (no format in it)."""
    if not text:
        raise SpecError(f"{whole!r}: empty URL (give a path or a URL)")
    m = _SCHEME.fullmatch(text)
    if m is None:
        return _strip_slash(text)
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme in FORMATS:
        raise SpecError(f"{whole}: a {scheme}:// prefix inside another URL (give one format "
                        f"around a storage URL, e.g. precomputed://gs://bucket/path)")
    if scheme in _OTHER_SOURCES:
        raise SpecError(f"{whole}: {scheme}:// is a Neuroglancer data source ngshard does "
                        f"not read (it reads precomputed:// and zarr:// sources)")
    ngauth = _NGAUTH.fullmatch(text)
    if ngauth is not None:
        return _kvstore(f"gs://{ngauth.group(1)}", whole)
    if scheme.startswith("s3+"):
        raise SpecError(f"{whole}: {scheme}:// (an S3-compatible server) is not supported: "
                        f"give s3://BUCKET/PATH and the server as a storage option "
                        f"(endpoint_url=..., or the environment variable AWS_ENDPOINT_URL)")
    if not rest.strip("/") and scheme not in ("file", "memory"):
        raise SpecError(f"{whole}: no bucket or path after {scheme}://")
    if scheme == "file" and not rest:
        raise SpecError(f"{whole}: no path after file://")
    return f"{text[:len(scheme)]}://{_strip_slash(rest)}"


def canonical_url(url: str) -> str:
    """One spelling per place, for a plain storage URL (:attr:`Source.url`): a local path or
    ``file://`` URL as an absolute normalized path (``data/out``, ``./data/out/`` and
    ``file:///home/me/data/out`` are one folder, wherever a worker's working directory
    is); another URL with its scheme in lower case and no trailing slash. Jobs that ship
    work to other processes and machines name every place this way."""
    m = _SCHEME.fullmatch(url)
    if m is None or m.group(1).lower() == "file":
        path = url if m is None else m.group(2)
        return os.path.abspath(os.path.expanduser(path))
    return f"{m.group(1).lower()}://{_strip_slash(m.group(2))}"


def _strip_slash(path: str) -> str:
    """``path`` without trailing slashes (``KVSTORE/`` names the same folder), but a root
    stays a root."""
    stripped = path.rstrip("/")
    return stripped if stripped else path[:1]


_HOLDS = {"precomputed": "a precomputed layer (an info file)",
          "zarr3": "a Zarr v3 array or group (zarr.json)",
          "zarr2": "a Zarr v2 array or group (.zarray, .zattrs or .zgroup)"}


def check_format(source: Source, found: set[str], url: object, where: str) -> None:
    """SpecError when the format a URL names contradicts what is stored.

    Parameters
    ----------
    source
        What the URL named.
    found
        The formats whose metadata lies at the URL ("precomputed", "zarr2", "zarr3"); empty
        when there is nothing (not a contradiction: the caller's NotFoundError says so).
    url, where
        The URL as given, and the storage location, for the message.
    """
    named = source.format
    if named is None or not found:
        return
    fits = {"precomputed": {"precomputed"}, "zarr": {"zarr2", "zarr3"}, "zarr2": {"zarr2"},
            "zarr3": {"zarr3"}}[named]
    if not fits & found:
        holds = " and ".join(_HOLDS[f] for f in sorted(found))
        if isinstance(url, (str, os.PathLike)):
            raise SpecError(f"{os.fspath(url)}: the URL says {named}, but {where} holds "
                            f"{holds}")
        raise SpecError(f"tensorstore spec {url!r}: its driver says {named}, but {where} "
                        f"holds {holds}")
