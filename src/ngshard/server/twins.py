"""Serving a file stored only as its compressed twin (``name.gz``, ``.br``, ``.zstd``, ``.xz``,
``.bz2``, as cloud-files writes them): found in cloud-files' order; sent as it is with a
``Content-Encoding`` to a client that accepts the coding, decoded as a stream for one that
does not, and decoded for any ``Range`` (a range selects bytes of the decoded file, and a
browser would not take a slice of an encoded stream). Memory stays bounded by one piece of
decoded output (:data:`TWIN_PIECE_BYTES`), whatever the file's size.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..compression import COMPRESS, TWINS, iter_decompress
from ..limits import TWIN_PIECE_BYTES
from .files import File, Files

#: The twins a browser may take as they are: suffix -> Content-Encoding.
CODINGS = {suffix: coding for coding, suffix in COMPRESS.items()}


def open_twin(files: Files, name: str) -> tuple[File, str] | None:
    """The first twin of ``name`` present, in cloud-files' order, and its suffix."""
    for suffix in TWINS:
        found = files.open(f"{name}{suffix}")
        if isinstance(found, File):
            return found, suffix
    return None


def sent_encoded(headers: dict[str, str], suffix: str) -> bool:
    """Whether the whole of a ``suffix`` twin goes to this client as it is stored, with a
    Content-Encoding (else it is decoded for it)."""
    coding = CODINGS.get(suffix)
    return coding is not None and accepts(headers, coding)


def accepts(headers: dict[str, str], coding: str) -> bool:
    """Whether ``Accept-Encoding`` allows ``coding``. Without the field any coding is
    acceptable (RFC 9110 12.5.3), but clients that send none rarely decode more than gzip:
    they get gzip only."""
    value = headers.get("accept-encoding")
    if value is None:
        return coding == "gzip"
    quality: dict[str, float] = {}
    for item in value.split(","):
        name, _, params = item.strip().lower().partition(";")
        q = 1.0
        for param in params.split(";"):
            key, _, number = param.strip().partition("=")
            if key == "q":
                try:
                    q = float(number)
                except ValueError:
                    q = 0.0
        quality[name.strip()] = q
    for name in (coding, f"x-{coding}") if coding == "gzip" else (coding,):
        if name in quality:
            return quality[name] > 0
    return quality.get("*", 0) > 0


def decoded(file: File, name: str, suffix: str, start: int = 0, end: int | None = None
            ) -> Iterator[bytes]:
    """The decoded bytes ``[start, end)`` of a twin, in pieces (CorruptDataError naming
    ``name`` plus the suffix if it does not decode)."""
    at = 0
    for piece in iter_decompress(lambda offset, n: file.read(offset, min(offset + n, file.size)),
                                 suffix, f"{name}{suffix}", piece=TWIN_PIECE_BYTES):
        lo, hi = max(start - at, 0), len(piece) if end is None else min(end - at, len(piece))
        at += len(piece)
        if lo < hi:
            yield piece[lo:hi] if (lo, hi) != (0, len(piece)) else piece
        if end is not None and at >= end:
            return


def decoded_size(file: File, name: str, suffix: str, enough: int | None = None
                 ) -> tuple[int, bool]:
    """(bytes counted, whether that is the whole decoded size): the twin is decoded and
    dropped piece by piece, stopping once more than ``enough`` bytes are known to exist."""
    size = 0
    for piece in decoded(file, name, suffix):
        size += len(piece)
        if enough is not None and size > enough:
            return size, False
    return size, True
