"""An HTTP proxy on 127.0.0.1 in front of an object-store server, for the tests and
tools/bench_cloud.py: it fails a fraction of requests (HTTP 503, or a connection reset before
or after the server saw the request), delays each request (a distant bucket), or rewrites
answers (``mangle``: a truncated body, an HTML error page, a changed ETag).

Clients reach it as they would the server (the Host header is passed on as sent, so signed
requests stay valid).
"""

from __future__ import annotations

import http.client
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

#: ``mangle(method, path, status, headers, body)`` -> (status, headers, body, send): what
#: to answer instead; ``send`` None sends the body whole, a number sends that many bytes of
#: it and closes the connection (a body cut short).
Mangle = Callable[[str, str, int, list[tuple[str, str]], bytes],
                  tuple[int, list[tuple[str, str]], bytes, int | None]]
_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer",
        "upgrade"}


class FaultProxy:
    """A proxy to ``upstream`` (http://host:port); ``fail``: the fraction of requests
    failed (half with 503, half with a reset connection, of these half after the server
    handled the request: a PUT that landed but whose answer was lost); ``delay``: seconds
    added to each request. ``counts``: requests seen, and of them failed."""

    def __init__(self, upstream: str, *, fail: float = 0.0, delay: float = 0.0,
                 mangle: Mangle | None = None, seed: int = 0) -> None:
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname, parts.port
        self.fail, self.delay, self.mangle = fail, delay, mangle
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._local = threading.local()
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def roll(self) -> str | None:
        """The failure of the next request: "503", "reset", "reset-after" or None."""
        with self._lock:
            self.counts["requests"] += 1
            if self._rng.random() >= self.fail:
                return None
            kind = self._rng.choice(["503", "503", "reset", "reset-after"])
            self.counts[kind] += 1
            return kind

    def upstream(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self.host, self.port,
                                                                 timeout=60)
        return conn

    def forget_upstream(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FaultProxy

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _reset(self) -> None:
        """Close the connection with a TCP reset, no answer."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                   struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in _HOP and k.lower() != "content-length"}
        if body or self.command in ("PUT", "POST") or "Content-Length" in self.headers:
            headers["Content-Length"] = str(len(body))
        for attempt in range(2):  # a kept-alive upstream connection may have gone stale
            conn = self.owner.upstream()
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                return response.status, [(k, v) for k, v in response.getheaders()
                                         if k.lower() not in _HOP], data
            except (ConnectionError, http.client.HTTPException):
                self.owner.forget_upstream()
                if attempt:
                    raise
        raise AssertionError  # unreachable

    def _handle(self) -> None:
        body = self._body()
        if self.owner.delay:
            time.sleep(self.owner.delay)
        failure = self.owner.roll()
        if failure == "reset":
            return self._reset()
        if failure == "503":
            page = b"<Error><Code>SlowDown</Code></Error>"
            self.send_response(503)
            self.send_header("Content-Length", str(len(page)))
            self.send_header("Content-Type", "application/xml")
            self.end_headers()
            self.wfile.write(page)
            return
        status, headers, data = self._forward(body)
        if failure == "reset-after":
            return self._reset()
        send = None
        if self.owner.mangle is not None:
            status, headers, data, send = self.owner.mangle(self.command, self.path, status,
                                                            headers, data)
        self.send_response(status)
        head = self.command == "HEAD"  # its Content-Length is the object's, as sent
        for k, v in headers:
            if head or k.lower() != "content-length":
                self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data if send is None else data[:send])
        if send is not None:
            self.wfile.flush()
            self._reset()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = _handle
