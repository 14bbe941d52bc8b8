"""The HTTP front end: one event loop over non-blocking sockets, keep-alive and pipelining,
bounded heads, bodies, waits and connection counts, local file ranges sent with ``sendfile``.

One loop, not a thread per connection: ``tools/bench_serve.py`` measured both (and asyncio's
streams) over the same request handling; threads fight over the GIL at every system call
(see BENCHMARKS.md). Local files are answered on the loop (a ``stat`` and a ``pread`` or
``sendfile``: page-cache work of microseconds), the plainest requests for them in compiled
code (``quick.py``). What may block - a remote store, decoding a
compressed twin, a listing - runs on a few threads and comes back to the loop when done.

With worker processes (``workers.py``), the loop of the parent hands each connection it
accepts to the next process in turn over a Unix socket, and a worker's loop takes its
connections from there instead of accepting them.

An idle connection costs a descriptor and no thread, so thousands may be open (in each
process). Every wait is bounded: a request head must arrive within :data:`HEAD_TIMEOUT` of
its first byte, a
connection may idle :data:`IDLE_TIMEOUT` between requests, and a response must be taken at
:data:`MIN_SEND_RATE` after :data:`SEND_TIMEOUT` of grace, so a client trickling its reads
holds its slot no longer than a silent one. Past :data:`MAX_CONNECTIONS`, the connection idle
the longest makes room for a new one (as nginx drains keep-alive connections); only when none
is idle is the new one answered 503.
"""

from __future__ import annotations

import contextlib
import fcntl
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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ..limits import (
    LINGER_SECONDS,
    MAX_CONNECTIONS,
    MIN_SEND_RATE,
    SEND_TIMEOUT,
    SERVE_LOOPS,
    SERVE_THREADS,
)
from . import quick
from .exchange import BUSY, CLOSED, DRAINING, READ, READING, WRITING, Conn, Exchange, Log
from .files import Files, LocalFiles
from .protocol import format_head
from .respond import error_response

_SWEEP = 0.1  # seconds between looks at the deadlines
_WAKE = object()
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 seconds: close with a reset


class Connections:
    """Accepts connections on a listening socket and serves them from
    :data:`SERVE_LOOPS` event loops (threads) and a few threads for blocking work."""

    def __init__(self, files: Files, sock: socket.socket, *,
                 listing: bool = False, log: Log | None = None, base: str = "",
                 only: frozenset[str] | None = None, workers: Sequence[socket.socket] = (),
                 handed: bool = False) -> None:
        self.files, self.sock, self.listing, self.log = files, sock, listing, log
        self.base, self.only = base, only
        # Connections are accepted from ``sock`` and handed in turn to this process and the
        # ``workers`` (channels to worker processes); or, ``handed``, ``sock`` is a worker's
        # channel, which hands it connections and whose end means stop.
        self.workers, self.handed, self.turn = list(workers), handed, 0
        self.local = isinstance(files, LocalFiles)
        sock.setblocking(False)
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.fd_room = max(16, soft - 64) if soft != resource.RLIM_INFINITY else 1 << 20
        self.pool = ThreadPoolExecutor(SERVE_THREADS, thread_name_prefix="ngshard-serve-work")
        self.loops = [_Loop(self, f"ngshard-serve-{i}") for i in range(SERVE_LOOPS)]

    def open_count(self) -> int:
        """Connections open, over every loop."""
        return sum(len(loop.conns) for loop in self.loops)

    def wait(self) -> None:
        """Wait until the loops end (a worker's, when its channel ends)."""
        for loop in self.loops:
            loop.join()

    def close(self) -> None:
        """Stop accepting, end every open connection, and wait for the loops."""
        for loop in self.loops:
            loop.close()
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.sock.close()
        self.files.close()


class _Loop(Exchange):
    """One event loop: the connections it accepted, served on its thread."""

    def __init__(self, front: Connections, name: str) -> None:
        self.front, self.files, self.sock = front, front.files, front.sock
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.sock, READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, READ, _WAKE)
        self._posted: deque[Callable[[], None]] = deque()  # from the threads, run on the loop
        self._ready: deque[Conn] = deque()  # connections with pipelined requests waiting
        self.conns: dict[int, Conn] = {}
        self._rejected: deque[tuple[float, socket.socket]] = deque()  # (close at, socket)
        self._accepting, self._closed = True, False
        # Plain requests answered in compiled code (quick.py): local files, no request log.
        self.quick = quick.answer
        self.quick_files = self.files if self.quick is not None and front.log is None and \
            isinstance(self.files, LocalFiles) else None
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake()
        self._thread.join()

    def join(self) -> None:
        self._thread.join()

    # --- the loop ------------------------------------------------------------------------

    def _loop(self) -> None:
        next_sweep = time.monotonic() + _SWEEP
        try:
            while not self._closed:
                for key, _ in self._selector.select(_SWEEP):
                    conn = key.data
                    if conn is None:
                        self._take() if self.front.handed else self._accept()
                    elif conn is _WAKE:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif conn.state == READING:
                        self._on_readable(conn)
                    elif conn.state == WRITING:
                        self._pump(conn)
                    elif conn.state == DRAINING:
                        self._on_linger(conn)
                while self._posted:
                    self._posted.popleft()()
                for _ in range(len(self._ready)):
                    conn = self._ready.popleft()
                    if conn.state == READING and self.conns.get(conn.fd) is conn:
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

    def _want(self, conn: Conn, mask: int) -> None:
        if conn.mask == mask:
            return
        if conn.mask == 0:
            self._selector.register(conn.sock, mask, conn)
        elif mask == 0:
            self._selector.unregister(conn.sock)
        else:
            self._selector.modify(conn.sock, mask, conn)
        conn.mask = mask

    def _drop(self, conn: Conn, *, abort: bool = False) -> None:
        """Close a connection at once, and release what its response held; ``abort`` resets
        it, so that what the kernel holds unsent is dropped too (a slow reader's)."""
        if self.conns.pop(conn.fd, None) is None:
            return
        conn.state = CLOSED
        if conn.mask:
            self._selector.unregister(conn.sock)
            conn.mask = 0
        if abort:
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
        conn.sock.close()
        self._release(conn)

    def _sweep(self, now: float) -> None:
        """Close what waited too long: idle connections, slow heads (408), slow readers."""
        while self._rejected and self._rejected[0][0] < now:
            self._rejected.popleft()[1].close()
        if not self._accepting:  # out of descriptors a moment ago: try again
            self._selector.register(self.sock, READ, None)
            self._accepting = True
        for conn in list(self.conns.values()):
            if conn.state == WRITING:
                taken = conn.sent - _unsent(conn.sock)
                if now > conn.send_start + SEND_TIMEOUT + taken / MIN_SEND_RATE:
                    self._drop(conn, abort=True)
            elif conn.state != BUSY and now > conn.deadline:
                if conn.state == READING and conn.head_started:
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
            if not self._hand_on(sock):
                self._adopt(sock)

    def _hand_on(self, sock: socket.socket) -> bool:
        """Hand a new connection to the next worker process in turn (this process takes
        its turn too: round robin, as a shared listening socket is raced for unevenly);
        False when it is this process's turn, or the worker cannot take it."""
        front = self.front
        if not front.workers:
            return False
        front.turn = (front.turn + 1) % (len(front.workers) + 1)
        if front.turn == 0:
            return False
        channel = front.workers[front.turn - 1]
        try:
            socket.send_fds(channel, [b"c"], [sock.fileno()])
        except BlockingIOError:  # that worker is behind: keep this one
            return False
        except OSError:  # that worker is gone: hand it no more
            front.workers.remove(channel)
            return False
        sock.close()
        return True

    def _take(self) -> None:
        """A worker's: adopt the connections handed over its channel; at the channel's
        end (the parent closed it, or died), stop."""
        for _ in range(64):
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            for fd in fds:
                self._adopt(socket.socket(fileno=fd))
            if not data:
                self._closed = True
                return

    def _adopt(self, sock: socket.socket) -> None:
        """Serve a new connection: in a free slot, in the slot of the connection idle the
        longest, or answered 503."""
        if self.front.open_count() >= min(MAX_CONNECTIONS, self.front.fd_room) and \
                not self._evict_idle():
            self._reject(sock)
            return
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            sock.close()
            return
        conn = Conn(sock, time.monotonic())
        self.conns[conn.fd] = conn
        self._want(conn, READ)

    def _evict_idle(self) -> bool:
        """Close the connection idle the longest between requests; False if none is."""
        idle = [c for c in self.conns.values()
                if c.state == READING and not c.buffer and not c.head_started]
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


def _unsent(sock: socket.socket) -> int:
    """Bytes sent to the kernel that the client has not taken yet (0 where unknown): the
    send buffer holds megabytes, which must not count as taken."""
    try:
        return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]
    except (OSError, AttributeError):
        return 0


