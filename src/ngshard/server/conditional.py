"""Conditional requests (RFC 9110 section 13), pure: ``If-Match``, ``If-Unmodified-Since``,
``If-None-Match``, ``If-Modified-Since`` and ``If-Range`` against a file's entity tag and
modification time."""

from __future__ import annotations

import re
from email.utils import formatdate, parsedate_to_datetime

_TAG = re.compile(r'\s*(W/)?("[^"]*")\s*(?:,|$)')


def http_date(mtime: float) -> str:
    """An IMF-fixdate (``Last-Modified``) for seconds since the epoch."""
    return formatdate(int(mtime), usegmt=True)


def _parse_date(value: str) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _tags(value: str) -> list[tuple[bool, str]] | None:
    """``(weak, opaque tag)`` pairs of an entity-tag list; None for a malformed list."""
    tags, pos = [], 0
    value = value.strip()
    while pos < len(value):
        match = _TAG.match(value, pos)
        if match is None:
            return None
        tags.append((bool(match.group(1)), match.group(2)))
        pos = match.end()
    return tags


def _matches(value: str, etag: str, weak_ok: bool) -> bool:
    """Whether a field value (``*`` or a list of entity tags) matches ``etag`` (strong),
    by weak comparison (either side may be weak) or strong (neither may)."""
    if value.strip() == "*":
        return True
    tags = _tags(value) or []
    return any(tag == etag and (weak_ok or not weak) for weak, tag in tags)


def precondition(method: str, headers: dict[str, str], etag: str,
                 mtime: float | None) -> int | None:
    """The status a conditional request ends with before its content is sent.

    Parameters
    ----------
    method
        GET or HEAD.
    headers
        The request's fields (lower-case names).
    etag, mtime
        The selected file's strong entity tag and modification time (None if unknown).

    Returns
    -------
    int or None
        412 when ``If-Match`` or ``If-Unmodified-Since`` fails, 304 when ``If-None-Match``
        or ``If-Modified-Since`` says the client's copy is current, None to go on. The
        fields are evaluated in the order of RFC 9110 section 13.2.2; a date field gives way
        to its entity-tag counterpart, and an unparsable date is ignored.
    """
    if "if-match" in headers:
        if not _matches(headers["if-match"], etag, weak_ok=False):
            return 412
    elif "if-unmodified-since" in headers and mtime is not None:
        date = _parse_date(headers["if-unmodified-since"])
        if date is not None and int(mtime) > date:
            return 412
    if "if-none-match" in headers:
        if _matches(headers["if-none-match"], etag, weak_ok=True):
            return 304 if method in ("GET", "HEAD") else 412
    elif "if-modified-since" in headers and mtime is not None and method in ("GET", "HEAD"):
        date = _parse_date(headers["if-modified-since"])
        if date is not None and int(mtime) <= date:
            return 304
    return None


def range_applies(headers: dict[str, str], etag: str, mtime: float | None) -> bool:
    """Whether the ``Range`` field is to be honoured: always without ``If-Range``; with it,
    only if its entity tag matches strongly or its date is exactly the modification time
    (otherwise the whole, changed file is sent)."""
    value = headers.get("if-range")
    if value is None:
        return True
    value = value.strip()
    if value.startswith(('"', "W/")):
        return _matches(value, etag, weak_ok=False) and "," not in value
    date = _parse_date(value)
    return date is not None and mtime is not None and int(mtime) == date
