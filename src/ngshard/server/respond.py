"""What the server answers to a parsed request, independent of how bytes reach the socket:
read-only GET and HEAD of files under the root with byte ranges, conditional requests, CORS,
the compressed twins of unsharded files (``twins.py``) and, only when asked, directory
listings."""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload
from urllib.parse import quote

from ..errors import CorruptDataError
from ..limits import TWIN_WHOLE_BYTES
from .conditional import http_date, precondition, range_applies
from .files import DIRECTORY, File, Files
from .paths import parse_target
from .protocol import REASONS, HttpError, Request, format_fields
from .ranges import Unsatisfiable, byte_range
from .twins import CODINGS, decoded, decoded_size, open_twin, sent_encoded

ALLOW = "GET, HEAD, OPTIONS"
#: Headers a viewer on another origin may read: the range and length ones, and validators.
EXPOSE = "Accept-Ranges, Content-Encoding, Content-Length, Content-Range, ETag, Last-Modified"
CORS = [("Access-Control-Allow-Origin", "*"), ("Access-Control-Expose-Headers", EXPOSE)]
# Past any size a file could have: probes which end a range asks for without knowing the size.
_UNBOUNDED = 1 << 62
_FIELD_LIST = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z, \t]*")


@dataclass
class Response:
    """A response: status, header fields, and the content: ``body`` bytes, bytes
    ``[start, end)`` of ``file``, or the pieces of ``stream`` (then ``file`` is only closed;
    sent with chunked framing where ``chunked``, else as they come). The sender closes
    ``file``. ``send_body`` is False for HEAD and bodiless statuses; ``close`` ends the
    connection after it."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    file: File | None = None
    start: int = 0
    end: int = 0
    send_body: bool = True
    close: bool = False
    stream: Iterator[bytes] | None = None
    chunked: bool = False
    expected: int | None = None  # the bytes a stream must give (its Content-Length)
    fixed: bytes = b""  # more fields, formatted already (see protocol.format_fields)

    @property
    def length(self) -> int:
        return self.end - self.start if self.file is not None else len(self.body)


def error_response(status: int, reason: str, *, close: bool = False,
                   extra: Sequence[tuple[str, str]] = ()) -> Response:
    """A short plain-text error (with the CORS fields, so a viewer can read why)."""
    body = f"{status} {REASONS.get(status, '')}: {reason}\n".encode()
    headers = [*CORS, *extra, ("Content-Type", "text/plain; charset=utf-8"),
               ("Content-Length", str(len(body))), ("X-Content-Type-Options", "nosniff")]
    return Response(status, headers, body, close=close)


@overload
def respond(files: Files, request: Request, *, listing: bool = False,
            quick: Literal[False] = False, base: str = "",
            only: Collection[str] | None = None) -> Response: ...
@overload
def respond(files: Files, request: Request, *, listing: bool = False,
            quick: bool, base: str = "", only: Collection[str] | None = None
            ) -> Response | None: ...
def respond(files: Files, request: Request, *,
            listing: bool = False, quick: bool = False, base: str = "",
            only: Collection[str] | None = None) -> Response | None:
    """The response to ``request`` for the files under ``files``' root.

    Parameters
    ----------
    files
        What may be served.
    request
        A parsed request head.
    listing
        Answer GET of a directory with an HTML list of what it holds (else 404).
    quick
        Give up (return None) where the answer takes more than a few file system calls:
        a listing, or a range of a compressed twin (decoded to find its size).
    base, only
        The folder of URL paths the tree is served under, the names at its top that are
        served (see :func:`~ngshard.server.paths.parse_target`).

    Returns
    -------
    Response or None
        200 or 206 with the bytes; 204 for OPTIONS (CORS preflight); 304 or 412 for
        conditional requests; 400, 404, 405 or 416 with a one-line reason otherwise; None
        when ``quick`` and the answer is slow.
    """
    try:
        if request.method == "OPTIONS":
            return _options(request)
        if request.method not in ("GET", "HEAD"):
            raise HttpError(405, f"{request.method} is not allowed: this server is read-only")
        return _get(files, request, listing, quick, base, only)
    except HttpError as e:
        extra = [("Allow", ALLOW)] if e.status == 405 else []
        return error_response(e.status, e.reason, close=e.close, extra=extra)


def _options(request: Request) -> Response:
    """CORS preflight (any path: what it may ask does not depend on the file)."""
    headers = [*CORS, ("Allow", ALLOW), ("Access-Control-Allow-Methods", ALLOW),
               ("Access-Control-Max-Age", "86400"), ("Content-Length", "0")]
    asked = request.headers.get("access-control-request-headers", "")
    if asked and _FIELD_LIST.fullmatch(asked):
        headers.append(("Access-Control-Allow-Headers", asked))
    return Response(204, headers)


def _get(files: Files, request: Request, listing: bool,
         quick: bool, base: str, only: Collection[str] | None) -> Response | None:
    target = parse_target(request.target, base, only)
    found, twin = files.open(target.name), ""
    if found is None and target.name and not target.directory:
        found, twin = open_twin(files, target.name) or (None, "")
        if isinstance(found, File) and quick and ("range" in request.headers or
                                                  not sent_encoded(request.headers, twin)):
            found.close()  # a twin decoded (a range of it, or for this client): takes time
            return None
    if found == DIRECTORY:
        if not listing:
            raise HttpError(404, "directory listing is off")
        if quick:
            return None
        return _listing(files, target.name, request.method == "GET")
    if not isinstance(found, File) or target.directory:  # None: no such file
        raise HttpError(404, "no such file")
    try:
        return _file(found, target.name, twin, request)
    except BaseException:
        found.close()
        raise


def _file(file: File, name: str, twin: str, request: Request) -> Response:
    head = request.method == "HEAD"
    etag, decode, ranged = file.etag, False, False
    if twin:  # the encoded file as it is, or decoded: two representations, two tags
        decoded_tag = f'{file.etag[:-1]}-{twin[1:]}-decoded"'
        ranged = not head and "range" in request.headers and \
            range_applies(request.headers, decoded_tag, file.mtime)
        decode = ranged or not sent_encoded(request.headers, twin)
        etag = decoded_tag if decode else f'{file.etag[:-1]}-{twin[1:]}"'
    status = precondition(request.method, request.headers, etag, file.mtime)
    if status is not None:
        file.close()
        if status == 412:
            return error_response(412, "precondition failed", extra=_validators(file, etag))
        return Response(304, _fields(file, etag), send_body=False)
    content_type = "application/json" if name.rsplit("/", 1)[-1] == "info" or \
        name.endswith(".json") else "application/octet-stream"
    if twin:
        headers = [*_fields(file, etag), ("Content-Type", content_type),
                   ("Vary", "Accept-Encoding")]
        if decode:
            return _decoded(file, name, twin, request, headers, _validators(file, etag),
                            ranged)
        headers.append(("Content-Encoding", CODINGS[twin]))
        fixed = b""
    else:  # the fields of the file itself, formatted once per file kept open
        headers, fixed = [], file.fields or _file_fields(file, content_type)
    size = file.size
    try:  # a twin sent encoded is sent whole (a range asked of it is decoded, above)
        rng = byte_range(request.headers.get("range"), size) if not (head or twin) and \
            range_applies(request.headers, etag, file.mtime) else None
    except Unsatisfiable as e:
        file.close()
        return error_response(416, str(e), extra=[("Content-Range", f"bytes */{size}"),
                                                  ("Accept-Ranges", "bytes"),
                                                  *_validators(file, etag)])
    start, end = rng if rng is not None else (0, size)
    status = 200 if rng is None else 206
    if rng is not None:
        headers.append(("Content-Range", f"bytes {start}-{end - 1}/{size}"))
    headers.append(("Content-Length", str(end - start)))
    if head:
        file.close()
        return Response(status, headers, send_body=False, fixed=fixed)
    return Response(status, headers, file=file, start=start, end=end, fixed=fixed)


def _validators(file: File, etag: str) -> list[tuple[str, str]]:
    """ETag and (where known) Last-Modified of a representation of ``file``."""
    if file.mtime is None:
        return [("ETag", etag)]
    if file.last_modified is None:
        file.last_modified = http_date(file.mtime)
    return [("ETag", etag), ("Last-Modified", file.last_modified)]


def _fields(file: File, etag: str) -> list[tuple[str, str]]:
    """The fields of every answer about a representation of ``file``."""
    return [*CORS, ("Accept-Ranges", "bytes"), *_validators(file, etag),
            ("Cache-Control", "no-cache"), ("X-Content-Type-Options", "nosniff")]


def _file_fields(file: File, content_type: str) -> bytes:
    file.fields = format_fields([*_fields(file, file.etag), ("Content-Type", content_type)])
    return file.fields


def _decoded(file: File, name: str, twin: str, request: Request,
             headers: list[tuple[str, str]], validators: list[tuple[str, str]],
             ranged: bool) -> Response:
    """A twin decoded for this client: its whole content (decoded whole, with its length,
    where it holds at most TWIN_WHOLE_BYTES; else as a stream without one: chunked, or to the
    close for HTTP/1.0; HEAD decodes nothing), or the range asked for. A range's end is found
    by decoding up to it, or to TWIN_WHOLE_BYTES if that is further (to the end for open and
    suffix ranges), then the range is decoded again as it is sent: twice the work, memory
    bounded by one piece."""
    head = request.method == "HEAD"
    start, end, status = 0, None, 200
    try:
        if ranged:
            wanted = request.headers["range"]
            try:
                probe = byte_range(wanted, _UNBOUNDED)
            except Unsatisfiable:
                probe = None
            known = probe[1] if probe is not None and probe[1] < _UNBOUNDED else None
            # decoded to the range's end, or on to TWIN_WHOLE_BYTES to give a small twin's
            # whole length (clients such as obstore's take no "bytes a-b/*")
            size, whole = decoded_size(file, name, twin, None if known is None else
                                       max(known, TWIN_WHOLE_BYTES))
            try:
                rng = byte_range(wanted, size if whole or known is None else known)
            except Unsatisfiable as e:
                file.close()
                return error_response(416, str(e), extra=[
                    ("Content-Range", f"bytes */{size}"), ("Accept-Ranges", "bytes"),
                    *validators])
            if rng is not None:
                (start, end), status = rng, 206
                headers += [("Content-Range", f"bytes {start}-{end - 1}/"
                                              f"{size if whole else '*'}"),
                            ("Content-Length", str(end - start))]
        if head:
            file.close()
            return Response(status, headers, send_body=False)
        stream = decoded(file, name, twin, start, end)
        # the start of a stream, where most damage shows (answered 500); the whole of a
        # small twin, sent with its length
        held = [next(stream, b"")]
        size = len(held[0])
        while end is None and size <= TWIN_WHOLE_BYTES:
            piece = next(stream, None)
            if piece is None:
                file.close()
                body = b"".join(held)
                headers.append(("Content-Length", str(len(body))))
                return Response(status, headers, body)
            held.append(piece)
            size += len(piece)
    except CorruptDataError as e:
        file.close()
        raise HttpError(500, str(e)) from None
    response = Response(status, headers, file=file,
                        stream=filter(None, itertools.chain(held, stream)),
                        expected=None if end is None else end - start)
    if end is None:  # the decoded length is not known before the end
        if request.version >= (1, 1):
            headers.append(("Transfer-Encoding", "chunked"))
            response.chunked = True
        else:
            response.close = True
    return response


def _listing(files: Files, name: str, send_body: bool) -> Response:
    entries = files.listdir(name)
    if entries is None:
        raise HttpError(404, "no such directory")
    base = f"/{name}/" if name else "/"
    rows = "".join(f'<li><a href="{html.escape(quote(base + n) + ("/" if d else ""))}">'
                   f'{html.escape(n)}{"/" if d else ""}</a></li>\n' for n, d in entries)
    body = (f"<!doctype html><meta charset=utf-8><title>{html.escape(base)}</title>\n"
            f"<h1>{html.escape(base)}</h1>\n<ul>\n{rows}</ul>\n").encode()
    headers = [*CORS, ("Content-Type", "text/html; charset=utf-8"),
               ("Content-Length", str(len(body))), ("Cache-Control", "no-cache"),
               ("X-Content-Type-Options", "nosniff")]
    return Response(200, headers, body, send_body=send_body)
