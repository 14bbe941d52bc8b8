"""Clients that speak HTTP as it is written on the wire, and the served tree's contents."""

from __future__ import annotations

import contextlib
import http.client
import socket

DATA = bytes(range(256)) * 4  # 1024 bytes, byte i is i % 256


def request(server, method: str, path: str, headers: dict | None = None
            ) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of one request."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


def raw(server, data: bytes, timeout: float = 10) -> bytes:
    """Send bytes as they are and return everything the server answers before closing."""
    with socket.create_connection((server.host, server.port), timeout=timeout) as s:
        s.sendall(data)
        with contextlib.suppress(OSError):  # the server may have closed its end already
            s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def status_of(answer: bytes) -> int:
    """The status code of the first response in raw bytes."""
    return int(answer.split(b" ", 2)[1])
