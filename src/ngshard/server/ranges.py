"""The ``Range`` request header (RFC 9110 section 14), pure: which bytes of a representation
of a given size a request selects, for every single-range form."""

from __future__ import annotations

import re

_SIMPLE = re.compile(r"bytes=(\d{1,18})-(\d{1,18})")
_SPEC = re.compile(r"\s*(\d*)\s*-\s*(\d*)\s*")
# Longer numbers are not parsed (Python refuses ints of 4300+ digits): they exceed any size.
_MAX_DIGITS = 30


class Unsatisfiable(Exception):
    """The range selects no byte of the representation, or is invalid (answered 416 with
    ``Content-Range: bytes */size``)."""


def _number(digits: str) -> int:
    return int(digits) if len(digits) <= _MAX_DIGITS else 1 << 128


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The ``[start, end)`` bytes a ``Range`` header selects from ``size`` bytes.

    Parameters
    ----------
    header
        The header's value, or None when the request has none.
    size
        The length of the selected representation.

    Returns
    -------
    tuple of int or None
        ``(start, end)`` for ``bytes=a-b`` (``end = min(b + 1, size)``), ``bytes=a-``
        (to the end) and ``bytes=-n`` (the last ``n`` bytes, all of them if fewer); None
        where the whole representation is sent with 200: no header, a unit other than
        bytes (which must be ignored), several ranges (which a server may ignore), or a
        suffix range of an empty representation.

    Raises
    ------
    Unsatisfiable
        A start at or past the end, a zero-length suffix, a last position before the
        first, or a malformed byte range set.
    """
    if header is None:
        return None
    if (simple := _SIMPLE.fullmatch(header)) is not None:  # what viewers send: bytes=a-b
        start, last = int(simple.group(1)), int(simple.group(2))
        if last < start:
            raise Unsatisfiable(f"range {header!r} ends before it starts")
        if start >= size:
            raise Unsatisfiable(f"range starts at {start}, past the {size} bytes")
        return start, min(last + 1, size)
    unit, eq, spec = header.partition("=")
    if not eq or unit.strip().lower() != "bytes":
        return None
    if "," in spec:
        return None if any(p.strip() for p in spec.split(",")[1:]) else \
            byte_range(f"bytes={spec.split(',')[0]}", size)
    match = _SPEC.fullmatch(spec)
    if match is None or match.group(0).strip() == "-":
        raise Unsatisfiable(f"malformed range {header!r}")
    first, last = match.groups()
    if not first:  # suffix range: the last n bytes
        n = _number(last)
        if n == 0:
            raise Unsatisfiable("zero-length suffix range")
        return None if size == 0 else (max(0, size - n), size)
    start = _number(first)
    if last and _number(last) < start:
        raise Unsatisfiable(f"range {header!r} ends before it starts")
    if start >= size:
        raise Unsatisfiable(f"range starts at {start}, past the {size} bytes")
    return start, size if not last else min(_number(last) + 1, size)
