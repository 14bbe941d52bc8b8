"""One connection's exchanges, for the event loop of ``connections.py``: request heads read
and answered in turn (pipelined ones too), responses sent as the socket takes them (a small
body with its head, a local file with ``sendfile``, a stream a piece at a time from the
threads), and the graceful close."""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ..errors import NgShardError
from ..limits import (
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    LINGER_BYTES,
    LINGER_SECONDS,
    MAX_BODY,
    SERVE_PIECE_BYTES,
    SMALL_BODY,
)
from .files import File, Files, LocalFile, LocalFiles
from .protocol import HttpError, Request, format_head, head_end, parse_head
from .respond import Response, error_response, respond

#: ``log(request or None, response)``, called after each response is sent.
Log = Callable[[Request | None, Response], None]

READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
# Connection states: waiting for a request, waiting for the threads, sending, closing, closed.
READING, BUSY, WRITING, DRAINING, CLOSED = range(5)
_TURN = 32  # pipelined requests answered per connection before the others get a turn
# Linux: a head sent with this waits for the body that sendfile sends after it, and both
# leave in one packet (with TCP_NODELAY the head would go alone, and the client wake twice)
_MORE = getattr(socket, "MSG_MORE", 0)
_QUICK = Request("GET", "", (1, 1), {})  # what a response begun by quick.answer was for


class Conn:
    """One client connection and where its current request stands."""

    __slots__ = ("sock", "fd", "state", "mask", "buffer", "skip", "deadline", "head_started",
                 "request", "response", "out", "file", "offset", "end", "pieces", "chunked",
                 "expected", "body_sent", "sent", "send_start", "complete", "drained")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock, self.fd, self.state, self.mask = sock, sock.fileno(), READING, 0
        self.buffer, self.skip = bytearray(), 0
        self.deadline, self.head_started = now + IDLE_TIMEOUT, False
        self.request: Request | None = None
        self.response: Response | None = None
        self.out: bytes | memoryview = b""
        self.file: File | None = None  # sent with sendfile from offset to end
        self.offset = self.end = 0
        self.pieces: Iterator[bytes] | None = None  # pulled on the threads
        self.chunked, self.body_sent = False, 0
        self.expected: int | None = None
        self.sent, self.send_start, self.complete, self.drained = 0, now, True, 0



class Front(Protocol):
    """What the exchanges take from the server's front (``connections.Connections``)."""

    local: bool
    listing: bool
    base: str
    only: frozenset[str] | None
    log: Log | None
    pool: ThreadPoolExecutor
    fd_room: int
    workers: list  # channels to worker processes (connections.Connections)
    handed: bool
    turn: int

    def open_count(self) -> int: ...


class Exchange:
    """The request and response side of an event loop (``connections._Loop``, which holds
    the connections, the selector and the threads, and defines the methods declared here)."""

    front: Front
    files: Files
    conns: dict[int, Conn]
    quick: Callable | None  # quick.answer
    quick_files: LocalFiles | None  # the files it answers from, where it is used
    _ready: deque[Conn]

    def _want(self, conn: Conn, mask: int) -> None:
        raise NotImplementedError

    def _drop(self, conn: Conn, *, abort: bool = False) -> None:
        raise NotImplementedError

    def _post(self, call: Callable[[], None]) -> None:
        raise NotImplementedError

    @staticmethod
    def _release(conn: Conn) -> None:
        """Release what a connection's response held (its file, its stream)."""
        if conn.response is not None and conn.response.file is not None:
            conn.response.file.close()
        if conn.pieces is not None and hasattr(conn.pieces, "close"):
            with contextlib.suppress(Exception):
                conn.pieces.close()
        conn.response, conn.file, conn.pieces, conn.out = None, None, None, b""

    # --- reading requests ----------------------------------------------------------------

    def _on_readable(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:  # reset
            self._drop(conn)
            return
        if not data:
            if conn.buffer.strip() or conn.skip:
                self._respond(conn, None, error_response(
                    400, "connection closed inside a request", close=True))
            else:
                self._drop(conn)
            return
        if conn.skip:  # the rest of a request body, dropped
            dropped = min(conn.skip, len(data))
            conn.skip -= dropped
            data = data[dropped:]
        if (local := self.quick_files) is not None and (answer := self.quick) is not None \
                and not conn.buffer and data:
            done, outcome = answer(conn.fd, data, local.quick)  # see quick.py
            if done:
                conn.deadline = time.monotonic() + IDLE_TIMEOUT
                data = data[done:]
                if outcome is False:  # the connection failed
                    self._drop(conn)
                    return
                if outcome is not None:  # the socket took part of a response
                    conn.buffer += data
                    self._send_rest(conn, *outcome)
                    return
        conn.buffer += data
        self._answer_buffered(conn)

    def _send_rest(self, conn: Conn, file: LocalFile, head: bytes, start: int, end: int) -> None:
        """Send the rest of a response ``quick.answer`` began: ``head``, then bytes
        ``[start, end)`` of ``file``."""
        if not file.use():  # closed since, on another thread
            self._drop(conn, abort=True)
            return
        response = Response(200, file=file, start=start, end=end)
        self._start(conn, _QUICK, response, (head, file, start, end, None, True))

    def _answer_buffered(self, conn: Conn) -> None:
        """Answer the requests complete in the buffer, in turn, while each answer goes out
        at once; then wait for more (with the head deadline once a head has begun)."""
        for _ in range(_TURN):
            if conn.state != READING:
                return
            buffer = conn.buffer
            if not buffer:
                return
            if buffer.startswith((b"\r", b"\n")):  # blank lines before a request (RFC 9112 2.2)
                del buffer[:len(buffer) - len(buffer.lstrip(b"\r\n"))]
            request = None
            try:
                end = head_end(buffer)
                if end < 0:
                    if buffer and not conn.head_started:
                        conn.head_started = True
                        conn.deadline = time.monotonic() + HEAD_TIMEOUT
                    return
                head = buffer[:end]
                del buffer[:end]
                conn.head_started = False
                request = parse_head(head)
                size = _body_size(request)
                dropped = min(size, len(buffer))
                del buffer[:dropped]
                conn.skip = size - dropped
            except HttpError as e:
                self._respond(conn, request, error_response(e.status, e.reason, close=True))
                continue
            if self.front.local:
                try:
                    response = respond(self.files, request, listing=self.front.listing, quick=True,
                                       base=self.front.base, only=self.front.only)
                except Exception as e:  # noqa: BLE001  a store failing: say so, go on
                    response = _failure(e)
                if response is not None:
                    if (local := self.quick_files) is not None and response.fixed and \
                            request.method == "GET" and response.status in (200, 206):
                        local.remember(request.target, response.file)
                    self._respond(conn, request, response)
                    continue
            conn.state = BUSY
            self._want(conn, 0)
            self.front.pool.submit(self._work, conn, request)
            return
        if conn.buffer:
            self._ready.append(conn)

    def _work(self, conn: Conn, request: Request) -> None:
        """On a thread: the answer that may block, with a small body read already."""
        try:
            response = respond(self.files, request, listing=self.front.listing,
                               base=self.front.base, only=self.front.only)
        except Exception as e:  # noqa: BLE001
            response = _failure(e)
        try:
            plan = _plan(response)
        except Exception as e:  # noqa: BLE001  a remote read failing
            if response.file is not None:
                response.file.close()
            response = _failure(e)
            plan = _plan(response)
        self._post(lambda: self._start(conn, request, response, plan))

    # --- sending responses ---------------------------------------------------------------

    def _respond(self, conn: Conn, request: Request | None, response: Response) -> None:
        """Send ``response`` (made on the loop)."""
        try:
            plan = _plan(response)
        except OSError as e:
            if response.file is not None:
                response.file.close()
            response = _failure(e)
            plan = _plan(response)
        self._start(conn, request, response, plan)

    def _start(self, conn: Conn, request: Request | None, response: Response,
               plan: tuple) -> None:
        if self.conns.get(conn.fd) is not conn:  # closed meanwhile
            if response.file is not None:
                response.file.close()
            return
        conn.request, conn.response = request, response
        conn.out, conn.file, conn.offset, conn.end, conn.pieces, conn.complete = plan
        conn.chunked, conn.expected, conn.body_sent = response.chunked, response.expected, 0
        conn.state, conn.sent, conn.send_start = WRITING, 0, time.monotonic()
        self._pump(conn)

    def _pump(self, conn: Conn) -> None:
        """Send what is ready until the socket is full, a piece must be made, or the
        response is done."""
        sock = conn.sock
        try:
            while True:
                if conn.out:  # held back for the file's bytes where they follow
                    n = sock.send(conn.out, _MORE if conn.offset < conn.end else 0)
                    conn.sent += n
                    if n < len(conn.out):
                        conn.out = memoryview(conn.out)[n:]
                        self._want(conn, WRITE)
                        return
                    conn.out = b""
                fd = conn.file.fileno if conn.file is not None else None
                if fd is not None and conn.offset < conn.end:
                    n = os.sendfile(conn.fd, fd, conn.offset, conn.end - conn.offset)
                    if n == 0:  # the file shrank under us
                        conn.complete, conn.file = False, None
                    conn.offset += n
                    conn.sent += n
                    continue
                if conn.pieces is not None:
                    conn.state = BUSY
                    self._want(conn, 0)
                    self.front.pool.submit(self._pull, conn)
                    return
                break
        except BlockingIOError:
            self._want(conn, WRITE)
            return
        except OSError:  # reset, or the client went away
            self._drop(conn)
            return
        self._finish(conn)

    def _pull(self, conn: Conn) -> None:
        """On a thread: the next piece of a streamed body (None at its end, or where it
        ended early)."""
        pieces = conn.pieces
        if pieces is None:  # pulled only while there are pieces
            return
        try:
            piece, failed = next(pieces, None), False
        except NgShardError as e:
            print(f"ngshard serve: {e}", file=sys.stderr)
            piece, failed = None, True
        except Exception:  # noqa: BLE001  a remote read failing mid-body
            traceback.print_exc(file=sys.stderr)
            piece, failed = None, True
        self._post(lambda: self._pulled(conn, piece, failed))

    def _pulled(self, conn: Conn, piece: bytes | None, failed: bool) -> None:
        if self.conns.get(conn.fd) is not conn:
            return
        conn.state = WRITING
        if piece is None:
            conn.pieces = None
            if failed or conn.expected is not None and conn.body_sent != conn.expected:
                conn.complete = False
            elif conn.chunked:
                conn.out = b"0\r\n\r\n"
        elif piece:
            conn.body_sent += len(piece)
            conn.out = b"%x\r\n%b\r\n" % (len(piece), piece) if conn.chunked else piece
        self._pump(conn)

    def _finish(self, conn: Conn) -> None:
        """The response is sent: log it, then wait for the next request, or close."""
        request, response = conn.request, conn.response
        if response is None:  # a response is being sent
            return
        keep = conn.complete and not response.close and request is not None and \
            request.keep_alive
        self._release(conn)
        if self.front.log is not None:
            try:
                self.front.log(request, response)
            except Exception:  # noqa: BLE001  the caller's logger: its bug, not the client's
                traceback.print_exc(file=sys.stderr)
        if not keep:
            self._linger(conn)
            return
        conn.state, conn.request = READING, None
        conn.deadline = time.monotonic() + IDLE_TIMEOUT
        self._want(conn, READ)
        if conn.buffer:
            self._ready.append(conn)

    # --- closing -------------------------------------------------------------------------

    def _linger(self, conn: Conn) -> None:
        """Close gracefully: stop sending, then read and drop what the client still sends
        for a moment. Closing with unread input would reset the connection, and the client
        could lose the response (an error it is owed) before reading it."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(conn)
            return
        conn.state, conn.drained = DRAINING, 0
        conn.deadline = time.monotonic() + LINGER_SECONDS
        self._want(conn, READ)

    def _on_linger(self, conn: Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        conn.drained += len(data)
        if not data or conn.drained >= LINGER_BYTES:
            self._drop(conn)



def _body_size(request: Request) -> int:
    """The length of a request body, to be read and dropped (bodies mean nothing here)."""
    if "transfer-encoding" in request.headers:
        raise HttpError(400, "request bodies are not accepted", close=True)
    value = request.headers.get("content-length")
    if value is None:
        return 0
    value = value.strip()
    if not value.isdigit() or len(value) > 18:
        raise HttpError(400, "bad Content-Length", close=True)
    size = int(value)
    if size > MAX_BODY:
        raise HttpError(413, "request bodies are not accepted", close=True)
    return size


def _failure(e: Exception) -> Response:
    """A store failing (network, permissions): say so, and go on with the others."""
    return error_response(500, f"{type(e).__name__}: {e}", close=True)


def _plan(response: Response) -> tuple:
    """How a response goes out: (bytes to send first, file to ``sendfile`` or None, its
    start and end, pieces to pull or None, complete). Reads a remote file's small body (on
    a thread)."""
    head = format_head(response.status, response.headers, response.fixed)
    file, length = response.file, response.length
    if response.stream is not None and response.send_body:
        return head, None, 0, 0, response.stream, True
    if not response.send_body or length == 0:
        return head, None, 0, 0, None, True
    if file is None:
        return head + response.body, None, 0, 0, None, True
    if file.fileno is not None:  # local: the body by sendfile, in the head's packet
        return head, file, response.start, response.end, None, True
    if length <= SMALL_BODY:
        data = file.read(response.start, response.end)
        return head + data, None, 0, 0, None, len(data) == length
    response.expected = length
    return head, None, 0, 0, _file_pieces(file, response.start, response.end), True


def _file_pieces(file: File, start: int, end: int) -> Iterator[bytes]:
    """A remote file's range in pieces (stopping early if the file is short)."""
    for offset in range(start, end, SERVE_PIECE_BYTES):
        data = file.read(offset, min(offset + SERVE_PIECE_BYTES, end))
        yield data
        if len(data) < min(SERVE_PIECE_BYTES, end - offset):
            return
