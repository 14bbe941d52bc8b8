"""A small served tree and clients that speak HTTP as it is written on the wire."""

from __future__ import annotations

import gzip
import http.client
import json
import socket

import pytest

import ngshard

DATA = bytes(range(256)) * 4  # 1024 bytes, byte i is i % 256
INFO = {"@type": "neuroglancer_skeletons", "vertex_attributes": []}


@pytest.fixture
def tree(tmp_path):
    """A folder to serve: ``data`` (1 KiB), ``info``, an empty file, a chunk stored only as
    its ``.gz`` twin, a file beside its twin, a sub-folder, and hidden files."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "data").write_bytes(DATA)
    (root / "info").write_text(json.dumps(INFO))
    (root / "empty").write_bytes(b"")
    (root / "sub" / "0-64_0-64_0-64.gz").write_bytes(gzip.compress(b"chunk" * 100))
    (root / "both").write_bytes(b"plain")
    (root / "both.gz").write_bytes(gzip.compress(b"twin"))
    (root / ".hidden").write_bytes(b"secret")
    (root / "sub" / ".secret").write_bytes(b"secret")
    return root


@pytest.fixture
def server(tree):
    with ngshard.serve(tree) as srv:
        yield srv


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
        s.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def status_of(answer: bytes) -> int:
    """The status code of the first response in raw bytes."""
    return int(answer.split(b" ", 2)[1])


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """The built-in sample data, as ``ngshard demo`` writes it."""
    from ngshard.demo import make_demo

    path = tmp_path_factory.mktemp("serve-demo") / "demo"
    make_demo(path)
    return path
