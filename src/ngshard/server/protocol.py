"""HTTP/1.1 message framing, pure: a request head (bytes) parsed into a :class:`Request` under
fixed size bounds, and response heads formatted. Everything the server refuses is an
:class:`HttpError` carrying the status to answer with."""

from __future__ import annotations

import re
import time
from email.utils import formatdate
from typing import NamedTuple

from ..limits import MAX_FIELDS, MAX_HEAD, MAX_TARGET

REASONS = {200: "OK", 204: "No Content", 206: "Partial Content", 304: "Not Modified",
           400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 412: "Precondition Failed", 413: "Content Too Large",
           414: "URI Too Long", 416: "Range Not Satisfiable",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           501: "Not Implemented", 503: "Service Unavailable",
           505: "HTTP Version Not Supported"}

# Patterns over the head decoded as latin-1 (one character per byte, as it came), ASCII
# classes only.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", re.ASCII)
_REQUEST_LINE = re.compile(r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+) (\S+) HTTP/(\d)\.(\d)", re.ASCII)
# Field values: visible ASCII, obs-text, spaces and tabs (no CR, LF, NUL or other controls).
_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")
# Every field line of a head at once (joined by LF): token, colon, value.
_FIELDS = re.compile(r"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*(?:\n|\Z))*")


class HttpError(Exception):
    """A request the server answers with ``status`` and a short reason (and, where the
    framing can no longer be trusted, by closing the connection)."""

    def __init__(self, status: int, reason: str, *, close: bool = False) -> None:
        super().__init__(reason)
        self.status, self.reason, self.close = status, reason, close


class Request(NamedTuple):
    """A parsed request head. Field names are lower case; repeated fields are joined with
    ", " as RFC 9110 section 5.3 allows."""

    method: str
    target: str
    version: tuple[int, int]
    headers: dict[str, str]

    @property
    def keep_alive(self) -> bool:
        """Whether the connection stays open after the response (HTTP/1.1 unless "close";
        HTTP/1.0 only with "keep-alive")."""
        value = self.headers.get("connection")
        if value is None:
            return self.version >= (1, 1)
        tokens = {t.strip().lower() for t in value.split(",")}
        if self.version >= (1, 1):
            return "close" not in tokens
        return "keep-alive" in tokens


def head_end(buffer: bytes | bytearray) -> int:
    """The offset just past the blank line that ends a request head in ``buffer``, or -1
    while it is incomplete. Bare LF line ends are accepted (RFC 9112 section 2.2).

    Raises
    ------
    HttpError
        414 or 431 once the head is incomplete past its bounds.
    """
    crlf, lf = buffer.find(b"\r\n\r\n"), buffer.find(b"\n\n")
    if crlf >= 0 or lf >= 0:
        end = crlf + 4 if lf < 0 else lf + 2 if crlf < 0 else min(crlf + 4, lf + 2)
        if end > MAX_HEAD:
            raise HttpError(431, "request head too large", close=True)
        return end
    if len(buffer) > MAX_HEAD:
        raise HttpError(431, "request head too large", close=True)
    if b"\n" not in buffer and len(buffer) > MAX_TARGET + 64:
        raise HttpError(414, "request target too long", close=True)
    return -1


def parse_head(head: bytes | bytearray) -> Request:
    """Parse a request head (the request line and header fields, with its blank line).

    Parameters
    ----------
    head
        The bytes up to and including the blank line (see :func:`head_end`).

    Returns
    -------
    Request

    Raises
    ------
    HttpError
        400 for anything malformed (RFC 9112: whitespace before a colon, folded lines,
        control characters), 414 for a target past :data:`MAX_TARGET`, 431 for more than
        :data:`MAX_FIELDS` fields, 505 for an HTTP major version other than 1.
    """
    lines = head.decode("latin-1").replace("\r\n", "\n").split("\n")
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        raise HttpError(400, "empty request", close=True)
    first = lines[0].split(" ")
    if len(first) >= 2 and len(first[1]) > MAX_TARGET:
        raise HttpError(414, "request target too long", close=True)
    match = _REQUEST_LINE.fullmatch(lines[0])
    if match is None:
        raise HttpError(400, "malformed request line", close=True)
    method, target, major, minor = match.groups()
    if major != "1":
        raise HttpError(505, "only HTTP/1.x is spoken here", close=True)
    if len(lines) - 1 > MAX_FIELDS:
        raise HttpError(431, f"more than {MAX_FIELDS} header fields", close=True)
    fields = lines[1:]
    if not _FIELDS.fullmatch("\n".join(fields)):  # one check of all, the reason per line
        _refuse(fields)
    headers: dict[str, str] = {}
    for line in fields:
        name, _, value = line.partition(":")
        key, value = name.lower(), value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if not target.isascii():
        raise HttpError(400, "request target is not ASCII", close=True)
    return Request(method, target, (1, int(minor)), headers)


def _refuse(fields: list[str]) -> None:
    """Raise for the first malformed field line."""
    for line in fields:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, "malformed header field", close=True)
        if not _VALUE.fullmatch(value.strip(" \t")):
            raise HttpError(400, "control character in a header field", close=True)
    raise HttpError(400, "malformed header field", close=True)


_date = (0, b"")  # (second, its Date field): one formatdate per second, not per response


def format_head(status: int, headers: list[tuple[str, str]], fixed: bytes = b"") -> bytes:
    """The status line and header fields of a response, then the fields ``fixed`` (formatted
    already by :func:`format_fields`), with its blank line; a Date field is added (RFC 9110
    section 6.6.1)."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, f"Date: {formatdate(now, usegmt=True)}\r\n".encode())
    return b"".join((_STATUS_LINES.get(status) or
                     f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\n".encode(),
                     _date[1], format_fields(headers), fixed, b"\r\n"))


def format_fields(headers: list[tuple[str, str]]) -> bytes:
    """Header fields as sent, each line with its CRLF."""
    return "".join([f"{name}: {value}\r\n" for name, value in headers]).encode("latin-1")


_STATUS_LINES = {status: f"HTTP/1.1 {status} {reason}\r\n".encode()
                 for status, reason in REASONS.items()}
