"""Request targets to object names under the served root, pure and strict: a name that could
leave the root, or reach a hidden file, is refused before any file system call is made."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from typing import NamedTuple
from urllib.parse import unquote_to_bytes

from .protocol import HttpError

_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ABSOLUTE_FORM = re.compile(r"https?://[^/?#]*", re.IGNORECASE)
# Characters no name segment may hold once decoded: separators, NUL and other controls.
_FORBIDDEN = re.compile(r"[/\\\x00-\x1f\x7f]")
#: Zarr v2's metadata files: names starting with ".", but data that viewers read.
ZARR_V2_FILES = frozenset({".zarray", ".zattrs", ".zgroup", ".zmetadata"})


def hidden(name: str) -> bool:
    """Whether the server keeps ``name`` out of sight (never served or listed): a name
    starting with "." (``.git``, ``.env``, temporary files), zarr v2's metadata aside."""
    return name.startswith(".") and name not in ZARR_V2_FILES


class Target(NamedTuple):
    """What a request names: ``name`` relative to the root ("" is the root itself), and
    whether it ended with "/" (a directory was asked for)."""

    name: str
    directory: bool


def parse_target(target: str, base: str = "",
                 only: Collection[str] | None = None) -> Target:
    """The object a request target names.

    Parameters
    ----------
    target
        The request target of the request line: origin form (``/a/b?q``) or absolute form
        (``http://host/a/b``).
    base
        The folder of URL paths the tree is served under (one name, e.g. ``data``: the
        root is ``/data/``); anything outside it is 404.
    only
        The names at the top of the tree that are served (None: all); anything else is 404.

    Returns
    -------
    Target

    Raises
    ------
    HttpError
        400 for a target that is not a path from the root (``*``, relative or absolute file
        system paths, ``//``), for ``.`` and ``..`` segments whether written plainly or
        percent-encoded, for encoded separators, NUL or control characters, and for bad
        percent-encoding or UTF-8; 404 for a hidden name (see :func:`hidden`), or a path
        outside ``base``.
    """
    if len(target) <= _CACHED_TARGET and (only is None or isinstance(only, frozenset)):
        return _parse_cached(target, base, only)
    return _parse(target, base, only)


# Viewers ask for the same few hundred names over and over: their parses are kept (short
# targets only, so a hostile client cannot make the kept ones large).
_CACHED_TARGET = 512


@functools.lru_cache(maxsize=4096)
def _parse_cached(target: str, base: str, only: frozenset[str] | None) -> Target:
    return _parse(target, base, only)


def _parse(target: str, base: str, only: Collection[str] | None) -> Target:
    match = _ABSOLUTE_FORM.match(target)
    path = target[match.end():] or "/" if match else target
    path = path.split("#", 1)[0].split("?", 1)[0]
    if not path.startswith("/"):
        raise HttpError(400, "the request target must be a path starting with /")
    if "\\" in path:
        raise HttpError(400, "backslash in the request path")
    if _PERCENT.search(path):
        raise HttpError(400, "bad percent-encoding in the request path")
    segments = path[1:].split("/")
    directory = segments[-1] == ""
    if directory:
        segments.pop()
    names = []
    for raw in segments:
        if not raw:
            raise HttpError(400, "empty segment (//) in the request path")
        try:
            name = unquote_to_bytes(raw).decode("utf-8") if "%" in raw else raw
        except UnicodeDecodeError:
            raise HttpError(400, "the request path is not UTF-8") from None
        if name in (".", ".."):
            raise HttpError(400, "dot segments (. or ..) are not allowed in the request path")
        if _FORBIDDEN.search(name):
            raise HttpError(400, "separator or control character encoded in the request path")
        if hidden(name):
            raise HttpError(404, "hidden files are not served")
        names.append(name)
    if base:
        if not names or names[0] != base:
            raise HttpError(404, f"the served tree is under /{base}/")
        names = names[1:]
        directory = directory or not names
    if only is not None and (not names or names[0] not in only):
        raise HttpError(404, "not among the folders served")
    return Target("/".join(names), directory)
