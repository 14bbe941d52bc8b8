"""The server under hostile load: idle and slow clients lock no one out and lose their slots
on time, compressed twins cost bounded memory whatever they inflate to, blank lines before a
request are accepted."""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
from wire import DATA, raw, request

import ngshard


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_blank_lines_before_a_request_are_ignored(server):
    """(Before: blank lines sent with the request in one packet got 400.)"""
    answer = raw(server, b"\r\n\r\n\nGET /data HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert status_of(answer) == 200 and answer.endswith(DATA)
    two = raw(server, b"GET /data HTTP/1.1\r\n\r\n\r\nGET /info HTTP/1.1\r\n"
                      b"Connection: close\r\n\r\n")
    assert two.count(b"HTTP/1.1 200 OK") == 2


def test_idle_and_slow_clients_lock_no_one_out(server):
    """300 idle connections and 30 half-sent heads (more than the 256 connections that
    locked everyone out with 503 before): the others are served."""
    idle = [socket.create_connection((server.host, server.port)) for _ in range(300)]
    slow = [socket.create_connection((server.host, server.port)) for _ in range(30)]
    try:
        for s in slow:
            s.sendall(b"GET /da")
        errors: list[object] = []

        def client() -> None:
            for _ in range(10):
                status, _, body = request(server, "GET", "/data", {"Range": "bytes=0-3"})
                if (status, body) != (206, DATA[:4]):
                    errors.append(status)

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors
    finally:
        for s in idle + slow:
            s.close()


def test_idle_connections_are_closed_on_time(tree, monkeypatch):
    from ngshard.server import exchange

    monkeypatch.setattr(exchange, "IDLE_TIMEOUT", 0.3)
    with ngshard.serve(tree) as srv, socket.create_connection((srv.host, srv.port), 5) as s:
        s.sendall(b"GET /data HTTP/1.1\r\n\r\n")
        time.sleep(0.1)
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        assert s.recv(10) == b""  # closed after idling
        assert time.monotonic() - started < 2


def test_a_trickling_reader_loses_its_slot(tree, monkeypatch):
    """A client taking a large response a little at a time is cut off once it falls behind
    MIN_SEND_RATE (before: each piece it took restarted the wait, so it held its slot for as
    long as it liked)."""
    from ngshard.server import connections as front

    monkeypatch.setattr(front, "SEND_TIMEOUT", 0.5)
    monkeypatch.setattr(front, "MIN_SEND_RATE", 64 * 1024)
    (tree / "big").write_bytes(os.urandom(32 << 20))
    with ngshard.serve(tree) as srv:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((srv.host, srv.port))
        s.settimeout(10)
        s.sendall(b"GET /big HTTP/1.1\r\n\r\n")
        started, got = time.monotonic(), 0
        with contextlib.suppress(ConnectionResetError):  # the server resets it
            while (piece := s.recv(1024)) and time.monotonic() - started < 20:
                got += len(piece)
                time.sleep(0.02)
        s.close()
        assert time.monotonic() - started < 10 and got < 32 << 20
        assert request(srv, "GET", "/data")[0] == 200


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_twins_cost_bounded_memory(tmp_path):
    """A 100 KiB ``.gz`` twin of 96 MiB, asked for by 8 clients at once with HEAD, decoded
    GET and a range near its end: the server's peak memory grows by less than 64 MiB (before:
    a HEAD took one server to 438 MiB)."""
    (tmp_path / "bomb.gz").write_bytes(gzip.compress(bytes(96 << 20), compresslevel=1))
    (tmp_path / "data").write_bytes(DATA)
    ngshard_cli = shutil.which("ngshard", path=os.path.dirname(sys.executable))
    proc = subprocess.Popen([ngshard_cli, "serve", str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
    try:
        url = ""
        while not url:
            line = proc.stdout.readline()
            assert line, "the server did not start"
            url = (re.search(r"http://127\.0\.0\.1:\d+", line) or [""])[0]
        port = int(url.rsplit(":", 1)[1])
        srv = type("Srv", (), {"host": "127.0.0.1", "port": port})()
        request(srv, "GET", "/data")
        before = _peak_kib(proc.pid)
        results: list[object] = []

        def client(method: str, headers: dict) -> None:
            with socket.create_connection(("127.0.0.1", port), 60) as s:
                fields = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
                s.sendall(f"{method} /bomb HTTP/1.1\r\n{fields}Connection: close\r\n\r\n"
                          .encode())
                total, head = 0, b""
                while piece := s.recv(1 << 20):
                    total += len(piece)
                    if len(head) < 200:
                        head += piece[:200]
                results.append((status_of(head), total))

        asks = [("HEAD", {}), ("HEAD", {"Accept-Encoding": "identity"}),
                ("GET", {"Accept-Encoding": "identity"}), ("GET", {"Range": "bytes=-10"}),
                ("GET", {"Accept-Encoding": "identity"}), ("GET", {"Range": "bytes=5-9"}),
                ("HEAD", {"Accept-Encoding": "identity"}), ("GET", {})]
        threads = [threading.Thread(target=client, args=a) for a in asks]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        grown = max(kib - before[p] for p, kib in _peak_kib(proc.pid).items()) / 1024
        assert sorted(s for s, _ in results) == [200] * 6 + [206] * 2
        assert max(n for _, n in results) >= 96 << 20  # the decoded GETs got it all
        assert grown < 64, f"peak memory grew by {grown:.0f} MiB"
    finally:
        proc.terminate()
        proc.wait(10)


def _peak_kib(pid: int) -> dict[int, int]:
    """The peak memory of each of the server's processes: ``pid`` and its workers."""
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            children += f.read().split()
    peaks = {}
    for p in [pid, *map(int, children)]:
        with open(f"/proc/{p}/status") as f:
            peaks[p] = int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))
    return peaks
