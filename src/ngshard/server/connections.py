"""The HTTP front end: one event loop over non-blocking sockets, keep-alive and pipelining,
bounded heads, bodies, waits and connection counts, local file ranges sent with ``sendfile``.

One loop, not a thread per connection: ``tools/bench_serve.py`` measured both (and asyncio's
streams) over the same request handling; threads fight over the GIL at every system call
(see BENCHMARKS.md). Local files are answered on the loop (a ``stat`` and a ``pread`` or
``sendfile``: page-cache work of microseconds). What may block - a remote store, decoding a
compressed twin, a listing - runs on a few threads and comes back to the loop when done.

An idle connection costs a descriptor and no thread, so thousands may be open. Every wait is
bounded: a request head must arrive within :data:`HEAD_TIMEOUT` of its first byte, a
connection may idle :data:`IDLE_TIMEOUT` between requests, and a response must be taken at
:data:`MIN_SEND_RATE` after :data:`SEND_TIMEOUT` of grace, so a client trickling its reads
holds its slot no longer than a silent one. Past :data:`MAX_CONNECTIONS`, the connection idle
the longest makes room for a new one (as nginx drains keep-alive connections); only when none
is idle is the new one answered 503.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import selectors
import socket
import struct
import sys
import termios
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from ..errors import NgShardError
from ..limits import (
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    LINGER_BYTES,
    LINGER_SECONDS,
    MAX_BODY,
    MAX_CONNECTIONS,
    MIN_SEND_RATE,
    SEND_TIMEOUT,
    SERVE_LOOPS,
    SERVE_PIECE_BYTES,
    SERVE_THREADS,
    SMALL_BODY,
)
from .files import File, LocalFiles, RemoteFiles
from .protocol import HttpError, Request, format_head, head_end, parse_head
from .respond import Response, error_response, respond

#: ``log(request or None, response)``, called after each response is sent.
Log = Callable[[Request | None, Response], None]

_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE
# Connection states: waiting for a request, waiting for the threads, sending, closing, closed.
_READING, _BUSY, _WRITING, _LINGERING, _CLOSED = range(5)
_SWEEP = 0.1  # seconds between looks at the deadlines
_TURN = 32  # pipelined requests answered per connection before the others get a turn
_WAKE = object()
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 seconds: close with a reset


class _Conn:
    """One client connection and where its current request stands."""

    __slots__ = ("sock", "fd", "state", "mask", "buffer", "skip", "deadline", "head_started",
                 "request", "response", "out", "file", "offset", "end", "pieces", "chunked",
                 "expected", "body_sent", "sent", "send_start", "complete", "drained")

    def __init__(self, sock: socket.socket, now: float) -> None:
        self.sock, self.fd, self.state, self.mask = sock, sock.fileno(), _READING, 0
        self.buffer, self.skip = bytearray(), 0
        self.deadline, self.head_started = now + IDLE_TIMEOUT, False
        self.request: Request | None = None
        self.response: Response | None = None
        self.out: bytes | memoryview = b""
        self.file: File | None = None  # sent with sendfile from offset to end
        self.offset = self.end = 0
        self.pieces: Iterator[bytes] | None = None  # pulled on the threads
        self.chunked, self.expected, self.body_sent = False, None, 0
        self.sent, self.send_start, self.complete, self.drained = 0, now, True, 0


class Connections:
    """Accepts connections on a listening socket and serves them from
    :data:`SERVE_LOOPS` event loops (threads) and a few threads for blocking work."""

    def __init__(self, files: LocalFiles | RemoteFiles, sock: socket.socket, *,
                 listing: bool = False, log: Log | None = None) -> None:
        self.files, self.sock, self.listing, self.log = files, sock, listing, log
        self.local = isinstance(files, LocalFiles)
        sock.setblocking(False)
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.fd_room = max(16, soft - 64) if soft != resource.RLIM_INFINITY else 1 << 20
        self.pool = ThreadPoolExecutor(SERVE_THREADS, thread_name_prefix="ngshard-serve-work")
        self.loops = [_Loop(self, f"ngshard-serve-{i}") for i in range(SERVE_LOOPS)]

    def open_count(self) -> int:
        """Connections open, over every loop."""
        return sum(len(loop.conns) for loop in self.loops)

    def close(self) -> None:
        """Stop accepting, end every open connection, and wait for the loops."""
        for loop in self.loops:
            loop.close()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.sock.close()
        self.files.close()


class _Loop:
    """One event loop: the connections it accepted, served on its thread."""

    def __init__(self, front: Connections, name: str) -> None:
        self.front, self.files, self.sock = front, front.files, front.sock
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.sock, _READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, _READ, _WAKE)
        self._posted: deque[Callable[[], None]] = deque()  # from the threads, run on the loop
        self._ready: deque[_Conn] = deque()  # connections with pipelined requests waiting
        self.conns: dict[int, _Conn] = {}
        self._rejected: deque[tuple[float, socket.socket]] = deque()  # (close at, socket)
        self._accepting, self._closed = True, False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake()
        self._thread.join()

    # --- the loop ------------------------------------------------------------------------

    def _loop(self) -> None:
        next_sweep = time.monotonic() + _SWEEP
        try:
            while not self._closed:
                for key, _ in self._selector.select(_SWEEP):
                    conn = key.data
                    if conn is None:
                        self._accept()
                    elif conn is _WAKE:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif conn.state == _READING:
                        self._on_readable(conn)
                    elif conn.state == _WRITING:
                        self._pump(conn)
                    elif conn.state == _LINGERING:
                        self._on_linger(conn)
                while self._posted:
                    self._posted.popleft()()
                for _ in range(len(self._ready)):
                    conn = self._ready.popleft()
                    if conn.state == _READING and self.conns.get(conn.fd) is conn:
                        self._answer_buffered(conn)
                if (now := time.monotonic()) >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + _SWEEP
        except Exception:  # a bug in the loop itself: say so, and end every connection
            traceback.print_exc(file=sys.stderr)
        finally:
            for conn in list(self.conns.values()):
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)
                self._drop(conn)
            for _, s in self._rejected:
                s.close()
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # a full pipe has a wake-up pending already
            self._wake_w.send(b"x")

    def _post(self, call: Callable[[], None]) -> None:
        """Run ``call`` on the loop (from a thread of the pool)."""
        self._posted.append(call)
        self._wake()

    def _want(self, conn: _Conn, mask: int) -> None:
        if conn.mask == mask:
            return
        if conn.mask == 0:
            self._selector.register(conn.sock, mask, conn)
        elif mask == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, mask, conn)
        conn.mask = mask

    def _drop(self, conn: _Conn, *, abort: bool = False) -> None:
        """Close a connection at once, and release what its response held; ``abort`` resets
        it, so that what the kernel holds unsent is dropped too (a slow reader's)."""
        if self.conns.pop(conn.fd, None) is None:
            return
        conn.state = _CLOSED
        if conn.mask:
            self._selector.unregister(conn.sock)
            conn.mask = 0
        if abort:
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        conn.sock.close()
        self._release(conn)

    @staticmethod
    def _release(conn: _Conn) -> None:
        if conn.response is not None and conn.response.file is not None:
            conn.response.file.close()
        if conn.pieces is not None and hasattr(conn.pieces, "close"):
            with contextlib.suppress(Exception):
                conn.pieces.close()
        conn.response, conn.file, conn.pieces, conn.out = None, None, None, b""

    def _sweep(self, now: float) -> None:
        """Close what waited too long: idle connections, slow heads (408), slow readers."""
        while self._rejected and self._rejected[0][0] < now:
            self._rejected.popleft()[1].close()
        if not self._accepting:  # out of descriptors a moment ago: try again
            self._selector.register(self.sock, _READ, None)
            self._accepting = True
        for conn in list(self.conns.values()):
            if conn.state == _WRITING:
                taken = conn.sent - _unsent(conn.sock)
                if now > conn.send_start + SEND_TIMEOUT + taken / MIN_SEND_RATE:
                    self._drop(conn, abort=True)
            elif conn.state != _BUSY and now > conn.deadline:
                if conn.state == _READING and conn.head_started:
                    self._respond(conn, None, error_response(
                        408, "request head took too long", close=True))
                else:
                    self._drop(conn)

    # --- accepting -----------------------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _ = self.sock.accept()
            except BlockingIOError:
                return
            except OSError:  # out of descriptors: make room, or pause accepting
                if not self._evict_idle():
                    self._selector.unregister(self.sock)
                    self._accepting = False
                return
            if self.front.open_count() >= min(MAX_CONNECTIONS, self.front.fd_room) and \
                    not self._evict_idle():
                self._reject(sock)
                continue
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                sock.close()
                continue
            conn = _Conn(sock, time.monotonic())
            self.conns[conn.fd] = conn
            self._want(conn, _READ)

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest between requests; False if none is."""
        idle = [c for c in self.conns.values()
                if c.state == _READING and not c.buffer and not c.head_started]
        if not idle:
            return False
        self._drop(min(idle, key=lambda c: c.deadline))
        return True

    def _reject(self, sock: socket.socket) -> None:
        """Answer 503 with no connection slot: the answer goes out at once, the socket is
        closed a moment later (closing with the request unread could reset the connection
        before the client reads why)."""
        response = error_response(503, "too many connections", close=True)
        try:
            sock.setblocking(False)
            sock.send(format_head(response.status, response.headers) + response.body)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            sock.close()
            return
        self._rejected.append((time.monotonic() + LINGER_SECONDS / 2, sock))
        while len(self._rejected) > MAX_CONNECTIONS:
            self._rejected.popleft()[1].close()

    # --- reading requests ----------------------------------------------------------------

    def _on_readable(self, conn: _Conn) -> None:
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
        conn.buffer += data
        self._answer_buffered(conn)

    def _answer_buffered(self, conn: _Conn) -> None:
        """Answer the requests complete in the buffer, in turn, while each answer goes out
        at once; then wait for more (with the head deadline once a head has begun)."""
        for _ in range(_TURN):
            if conn.state != _READING:
                return
            buffer = conn.buffer
            if buffer[:1] in (b"\r", b"\n"):  # blank lines before a request (RFC 9112 2.2)
                del buffer[:len(buffer) - len(buffer.lstrip(b"\r\n"))]
            request = None
            try:
                end = head_end(buffer)
                if end < 0:
                    if buffer and not conn.head_started:
                        conn.head_started = True
                        conn.deadline = time.monotonic() + HEAD_TIMEOUT
                    return
                head = bytes(buffer[:end])
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
                    response = respond(self.files, request, listing=self.front.listing, quick=True)
                except Exception as e:  # noqa: BLE001  a store failing: say so, go on
                    response = _failure(e)
                if response is not None:
                    self._respond(conn, request, response)
                    continue
            conn.state = _BUSY
            self._want(conn, 0)
            self.front.pool.submit(self._work, conn, request)
            return
        if conn.buffer:
            self._ready.append(conn)

    def _work(self, conn: _Conn, request: Request) -> None:
        """On a thread: the answer that may block, with a small body read already."""
        try:
            response = respond(self.files, request, listing=self.front.listing)
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

    def _respond(self, conn: _Conn, request: Request | None, response: Response) -> None:
        """Send ``response`` (made on the loop)."""
        try:
            plan = _plan(response)
        except OSError as e:
            if response.file is not None:
                response.file.close()
            response = _failure(e)
            plan = _plan(response)
        self._start(conn, request, response, plan)

    def _start(self, conn: _Conn, request: Request | None, response: Response,
               plan: tuple) -> None:
        if self.conns.get(conn.fd) is not conn:  # closed meanwhile
            if response.file is not None:
                response.file.close()
            return
        conn.request, conn.response = request, response
        conn.out, conn.file, conn.offset, conn.end, conn.pieces, conn.complete = plan
        conn.chunked, conn.expected, conn.body_sent = response.chunked, response.expected, 0
        conn.state, conn.sent, conn.send_start = _WRITING, 0, time.monotonic()
        self._pump(conn)

    def _pump(self, conn: _Conn) -> None:
        """Send what is ready until the socket is full, a piece must be made, or the
        response is done."""
        sock = conn.sock
        try:
            while True:
                if conn.out:
                    n = sock.send(conn.out)
                    conn.sent += n
                    if n < len(conn.out):
                        conn.out = memoryview(conn.out)[n:]
                        self._want(conn, _WRITE)
                        return
                    conn.out = b""
                if conn.file is not None and conn.offset < conn.end:
                    n = os.sendfile(conn.fd, conn.file.fileno, conn.offset,
                                    conn.end - conn.offset)
                    if n == 0:  # the file shrank under us
                        conn.complete, conn.file = False, None
                    conn.offset += n
                    conn.sent += n
                    continue
                if conn.pieces is not None:
                    conn.state = _BUSY
                    self._want(conn, 0)
                    self.front.pool.submit(self._pull, conn)
                    return
                break
        except BlockingIOError:
            self._want(conn, _WRITE)
            return
        except OSError:  # reset, or the client went away
            self._drop(conn)
            return
        self._finish(conn)

    def _pull(self, conn: _Conn) -> None:
        """On a thread: the next piece of a streamed body (None at its end, or where it
        ended early)."""
        try:
            piece, failed = next(conn.pieces, None), False
        except NgShardError as e:
            print(f"ngshard serve: {e}", file=sys.stderr)
            piece, failed = None, True
        except Exception:  # noqa: BLE001  a remote read failing mid-body
            traceback.print_exc(file=sys.stderr)
            piece, failed = None, True
        self._post(lambda: self._pulled(conn, piece, failed))

    def _pulled(self, conn: _Conn, piece: bytes | None, failed: bool) -> None:
        if self.conns.get(conn.fd) is not conn:
            return
        conn.state = _WRITING
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

    def _finish(self, conn: _Conn) -> None:
        """The response is sent: log it, then wait for the next request, or close."""
        request, response = conn.request, conn.response
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
        conn.state, conn.request = _READING, None
        conn.deadline = time.monotonic() + IDLE_TIMEOUT
        self._want(conn, _READ)
        if conn.buffer:
            self._ready.append(conn)

    # --- closing -------------------------------------------------------------------------

    def _linger(self, conn: _Conn) -> None:
        """Close gracefully: stop sending, then read and drop what the client still sends
        for a moment. Closing with unread input would reset the connection, and the client
        could lose the response (an error it is owed) before reading it."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(conn)
            return
        conn.state, conn.drained = _LINGERING, 0
        conn.deadline = time.monotonic() + LINGER_SECONDS
        self._want(conn, _READ)

    def _on_linger(self, conn: _Conn) -> None:
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
    value = request.headers.get("content-length", "0").strip()
    if not value.isdigit() or len(value) > 18:
        raise HttpError(400, "bad Content-Length", close=True)
    size = int(value)
    if size > MAX_BODY:
        raise HttpError(413, "request bodies are not accepted", close=True)
    return size


def _unsent(sock: socket.socket) -> int:
    """Bytes sent to the kernel that the client has not taken yet (0 where unknown): the
    send buffer holds megabytes, which must not count as taken."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except (OSError, AttributeError):
        return 0


def _failure(e: Exception) -> Response:
    """A store failing (network, permissions): say so, and go on with the others."""
    return error_response(500, f"{type(e).__name__}: {e}", close=True)


def _plan(response: Response) -> tuple:
    """How a response goes out: (bytes to send first, file to ``sendfile`` or None, its
    start and end, pieces to pull or None, complete). Reads a small body (on a thread for
    remote files)."""
    head = format_head(response.status, response.headers)
    file, length = response.file, response.length
    if response.stream is not None and response.send_body:
        return head, None, 0, 0, response.stream, True
    if not response.send_body or length == 0:
        return head, None, 0, 0, None, True
    if file is None:
        return head + response.body, None, 0, 0, None, True
    if length <= SMALL_BODY:
        data = file.read(response.start, response.end)
        return head + data, None, 0, 0, None, len(data) == length
    if file.fileno is not None:
        return head, file, response.start, response.end, None, True
    response.expected = length
    return head, None, 0, 0, _file_pieces(file, response.start, response.end), True


def _file_pieces(file: File, start: int, end: int) -> Iterator[bytes]:
    """A remote file's range in pieces (stopping early if the file is short)."""
    for offset in range(start, end, SERVE_PIECE_BYTES):
        data = file.read(offset, min(offset + SERVE_PIECE_BYTES, end))
        yield data
        if len(data) < min(SERVE_PIECE_BYTES, end - offset):
            return
