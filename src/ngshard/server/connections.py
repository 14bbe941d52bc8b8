"""The HTTP front end: a thread per connection over blocking sockets, keep-alive, bounded
heads, bodies, connection counts and waits, and local file ranges sent with ``sendfile``.

Threads, not asyncio: ``tools/bench_serve.py`` measured both over the same request handling
(see the README); file reads and fsspec calls block, which threads absorb without an
executor hop. A browser opens at most six connections per origin, so the thread count stays
small; :data:`MAX_CONNECTIONS` bounds it against anything else.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator

from ..errors import NgShardError
from ..limits import (
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    LINGER_BYTES,
    LINGER_SECONDS,
    MAX_BODY,
    MAX_CONNECTIONS,
    MAX_HEAD,
    SERVE_PIECE_BYTES,
    SMALL_BODY,
)
from .files import File, LocalFiles, RemoteFiles
from .protocol import HttpError, Request, format_head, head_end, parse_head
from .respond import Response, error_response, respond

#: ``log(request or None, response)``, called after each response is sent.
Log = Callable[[Request | None, Response], None]


class Connections:
    """Accepts connections on a listening socket and serves each on its own thread."""

    def __init__(self, files: LocalFiles | RemoteFiles, sock: socket.socket, *,
                 listing: bool = False, log: Log | None = None) -> None:
        self.files, self.sock, self.listing, self.log = files, sock, listing, log
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._rejected: deque[tuple[float, socket.socket]] = deque()  # (close at, socket)
        self._closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._accept_loop, name="ngshard-serve",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop accepting, end every open connection, and wait for the accept loop."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for conn in self._open:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self._wake_w.send(b"x")
        self._thread.join()
        for _, conn in self._rejected:
            conn.close()
        self.sock.close()
        self._wake_r.close()
        self._wake_w.close()

    def _accept_loop(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.sock, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._closed:
                events = selector.select(0.25 if self._rejected else None)
                while self._rejected and self._rejected[0][0] < time.monotonic():
                    self._rejected.popleft()[1].close()
                for key, _ in events:
                    if key.fileobj is self._wake_r or self._closed:
                        return
                    try:
                        conn, _ = self.sock.accept()
                    except OSError:  # the client gave up already; out of descriptors
                        time.sleep(0.01)
                        continue
                    try:
                        self._start(conn)
                    except Exception:  # no thread to be had: this client waits, not all
                        with self._lock:
                            self._open.discard(conn)
                        conn.close()
                        time.sleep(0.01)

    def _start(self, conn: socket.socket) -> None:
        with self._lock:
            busy = len(self._open) >= MAX_CONNECTIONS
            if not busy:
                self._open.add(conn)
        if busy:
            self._reject(conn)
            return
        threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _reject(self, conn: socket.socket) -> None:
        """Answer 503 without a thread: the answer goes out at once, the socket is closed
        a second later (closing with the request unread could reset the connection before
        the client reads why)."""
        response = error_response(503, "too many connections", close=True)
        try:
            conn.setblocking(False)
            conn.send(format_head(response.status, response.headers) + response.body)
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            conn.close()
            return
        self._rejected.append((time.monotonic() + LINGER_SECONDS / 2, conn))
        while len(self._rejected) > MAX_CONNECTIONS:
            self._rejected.popleft()[1].close()

    def _serve(self, conn: socket.socket) -> None:
        """Requests of one connection in turn, until it closes, errs or idles out."""
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buffer = bytearray()
            while not self._closed:
                request, response = None, None
                try:
                    head = self._read_head(conn, buffer)
                    if head is None:
                        return
                    request = parse_head(head)
                    self._skip_body(conn, buffer, request)
                except HttpError as e:
                    response = error_response(e.status, e.reason, close=True)
                else:
                    response = self._answer(request)
                complete = self._send(conn, response)
                if self.log is not None:
                    self.log(request, response)
                if response.close or not complete or request is None or \
                        not request.keep_alive:
                    _linger(conn)
                    return
        except OSError:  # reset, timed out, or shut down by close()
            pass
        except Exception:  # a bug: this connection ends, the server goes on
            traceback.print_exc(file=sys.stderr)
        finally:
            with self._lock:
                self._open.discard(conn)
            conn.close()

    def _answer(self, request: Request) -> Response:
        try:
            return respond(self.files, request, listing=self.listing)
        except Exception as e:  # a store failing (network, permissions): say so, go on
            return error_response(500, f"{type(e).__name__}: {e}", close=True)

    @staticmethod
    def _read_head(conn: socket.socket, buffer: bytearray) -> bytes | None:
        """The next request head (None at a clean end of the connection), leaving what
        follows it in ``buffer``."""
        conn.settimeout(IDLE_TIMEOUT)
        deadline = None
        while (end := head_end(buffer)) < 0:
            if buffer and deadline is None:
                deadline = time.monotonic() + HEAD_TIMEOUT
                conn.settimeout(HEAD_TIMEOUT)
            elif deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HttpError(408, "request head took too long", close=True)
                conn.settimeout(left)
            try:
                data = conn.recv(MAX_HEAD + 1)
            except TimeoutError:
                if deadline is None:
                    return None  # idle keep-alive connection
                raise HttpError(408, "request head took too long", close=True) from None
            if not data:
                if buffer.strip():
                    raise HttpError(400, "connection closed inside a request head", close=True)
                return None
            buffer += data
            if not buffer.strip():  # blank lines before a request are ignored (RFC 9112)
                buffer.clear()
        head = bytes(buffer[:end])
        del buffer[:end]
        return head

    @staticmethod
    def _skip_body(conn: socket.socket, buffer: bytearray, request: Request) -> None:
        """Read and drop a small request body, so the next request is framed right."""
        if "transfer-encoding" in request.headers:
            raise HttpError(400, "request bodies are not accepted", close=True)
        value = request.headers.get("content-length", "0").strip()
        if not value.isdigit() or len(value) > 18:
            raise HttpError(400, "bad Content-Length", close=True)
        size = int(value)
        if size > MAX_BODY:
            raise HttpError(413, "request bodies are not accepted", close=True)
        while len(buffer) < size:
            data = conn.recv(size - len(buffer))
            if not data:
                raise HttpError(400, "connection closed inside a request body", close=True)
            buffer += data
        del buffer[:size]

    @staticmethod
    def _send(conn: socket.socket, response: Response) -> bool:
        """Send a response; False if the file ended early (the connection must close)."""
        conn.settimeout(IDLE_TIMEOUT)
        head = format_head(response.status, response.headers)
        file, length = response.file, response.length
        try:
            if response.stream is not None and response.send_body:
                conn.sendall(head)
                return _send_stream(conn, response, response.stream)
            if not response.send_body or length == 0:
                conn.sendall(head)
            elif file is None:
                conn.sendall(head + response.body)
            elif length <= SMALL_BODY:
                data = file.read(response.start, response.end)
                conn.sendall(head + data)
                return len(data) == length
            else:
                conn.sendall(head)
                return _send_file(conn, file, response.start, response.end) == length
            return True
        finally:
            if file is not None:
                file.close()


def _linger(conn: socket.socket) -> None:
    """Close gracefully: stop sending, then read and drop what the client still sends for a
    moment. Closing with unread input would reset the connection, and the client could lose
    the response (an error it is owed) before reading it."""
    conn.shutdown(socket.SHUT_WR)
    deadline, drained = time.monotonic() + LINGER_SECONDS, 0
    while drained < LINGER_BYTES and (left := deadline - time.monotonic()) > 0:
        conn.settimeout(left)
        data = conn.recv(65536)
        if not data:
            return
        drained += len(data)


def _send_stream(conn: socket.socket, response: Response, stream: Iterator[bytes]) -> bool:
    """Send a streamed body (with chunked framing where the response says so); False if it
    ended early (a twin that stops decoding, a file that shrank): the connection must close,
    so the client sees an incomplete response rather than a short one."""
    sent = 0
    try:
        for piece in stream:
            if response.chunked:
                conn.sendall(b"%x\r\n%b\r\n" % (len(piece), piece))
            else:
                conn.sendall(piece)
            sent += len(piece)
    except NgShardError as e:
        print(f"ngshard serve: {e}", file=sys.stderr)
        return False
    if response.chunked:
        conn.sendall(b"0\r\n\r\n")
    return response.expected is None or sent == response.expected


def _send_file(conn: socket.socket, file: File, start: int, end: int) -> int:
    """Stream bytes ``[start, end)`` of a file: ``sendfile`` for local files, pieces
    otherwise."""
    if file.fileno is not None:
        with open(file.fileno, "rb", buffering=0, closefd=False) as f:
            return conn.sendfile(f, start, end - start)
    sent = 0
    for offset in range(start, end, SERVE_PIECE_BYTES):
        data = file.read(offset, min(offset + SERVE_PIECE_BYTES, end))
        conn.sendall(data)
        sent += len(data)
        if len(data) < min(SERVE_PIECE_BYTES, end - offset):
            break
    return sent
