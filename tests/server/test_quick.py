"""Requests answered in compiled code (``ngshard.server.quick``): the same requests sent to a
server that answers them so and to one that answers every request in Python get the same
bytes back; a file changed, replaced or no longer kept open is looked up again; a response
larger than the socket takes is sent whole."""

from __future__ import annotations

import http.client
import os
import re
import socket
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wire import DATA, raw, request

import ngshard
from ngshard.server import files as served_files
from ngshard.server import quick

pytestmark = pytest.mark.skipif(quick.answer is None, reason="compiled answers: Linux only")

TARGETS = ["/data", "/info", "/empty", "/sub/a.json", "/d%61ta", "/data?v=1", "/both",
           "/both.gz", "/sub/0-64_0-64_0-64", "/missing", "/data/", "/sub"]
RANGES = ["bytes=0-0", "bytes=10-19", "bytes=1000-5000", "bytes=1023-1023", "bytes=1024-",
          "bytes=-5", "bytes=-0", "bytes=-5000", "bytes=5-", "bytes=0-", "bytes=5-1",
          "bytes= 1-2", "Bytes=1-2", "bytes=1-2,3-4", "bytes=1-2, ", "bytes=007-009",
          "bytes=0-99999999999999999999", "bytes=-99999999999999999999", "items=1-2",
          "bytes=1-2\x01", "bytes=", "bytes=-", "bytes=1", "bytes=999999999999999999-"]
FIELDS = ["Host: x", "User-Agent: t", "Accept: */*", "Connection: keep-alive",
          "Connection: close", "Connection: Keep-Alive", "Connection: keep-alive, te",
          "If-None-Match: *", "If-Range: \"x\"", "if-modified-since: Sat, 01 Jan 2000 00:00:00 GMT",
          "Content-Length: 0", "Content-Length: 3", "Accept-Encoding: gzip", "Origin: http://a",
          "Sec-Fetch-Mode: cors", "X-Odd:value", "Bad Field: 1", "Host : x", "Host: \x7f",
          "Transfer-Encoding: chunked"]


def _request(method: str, target: str, version: str, fields: list[str], end: str) -> bytes:
    lines = [f"{method} {target} {version}", *fields]
    return ((end.join(lines) + end + end).encode("latin-1"))


_field = st.one_of(st.sampled_from(FIELDS), st.sampled_from(RANGES).map(lambda r: f"Range: {r}"),
                   st.sampled_from(RANGES).map(lambda r: f"range:{r}\t"))
_one = st.builds(_request, st.sampled_from(["GET"] * 6 + ["HEAD", "POST"]),
                 st.sampled_from(TARGETS), st.sampled_from(["HTTP/1.1"] * 6 + ["HTTP/1.0"]),
                 st.lists(_field, max_size=4), st.sampled_from(["\r\n"] * 8 + ["\n"]))
_DATE = re.compile(rb"Date: [^\r\n]*\r\n")


class _Counted:
    """``quick.answer`` counting the requests it answers."""

    def __init__(self, answer) -> None:
        self.answer, self.answered, self.pending = answer, 0, 0

    def __call__(self, fd, data, table):
        done, outcome = self.answer(fd, data, table)
        self.answered += data[:done].count(b"\r\n\r\n")
        self.pending += isinstance(outcome, tuple)
        return done, outcome


@pytest.fixture(scope="module")
def twin_servers(tmp_path_factory):
    """Two servers of one tree: (answering quickly, its counter), and answering in Python."""
    root = tmp_path_factory.mktemp("quick") / "root"
    (root / "sub").mkdir(parents=True)
    (root / "data").write_bytes(DATA)
    (root / "info").write_text('{"@type": "neuroglancer_skeletons"}')
    (root / "empty").write_bytes(b"")
    (root / "sub" / "a.json").write_text("{}")
    (root / "both").write_bytes(b"plain")
    (root / "sub" / "0-64_0-64_0-64.gz").write_bytes(b"\x1f\x8b not gzip")
    counted = _Counted(quick.answer)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(quick, "answer", counted)
        fast = ngshard.serve(root)
        mp.setattr(quick, "answer", None)
        slow = ngshard.serve(root)
    with fast, slow:
        for target in TARGETS:  # the first request of each target is answered in Python
            raw(fast, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        yield fast, counted, slow


def _same_answers(twin_servers, data: bytes) -> None:
    fast, _, slow = twin_servers
    assert _DATE.sub(b"", raw(fast, data)) == _DATE.sub(b"", raw(slow, data)), data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_one, min_size=1, max_size=4))
def test_compiled_answers_are_the_python_ones(twin_servers, requests):
    """Any requests, alone or pipelined, get the same bytes from both servers."""
    _same_answers(twin_servers, b"".join(requests))


def test_every_range_and_field_is_answered_as_in_python(twin_servers):
    """Each range form and field alone (or a Range field twice), on each file, then a
    request pipelined after it (which a close must leave unanswered): the same bytes."""
    _, counted, _ = twin_servers
    before = counted.answered
    follow = _request("GET", "/data", "HTTP/1.1", ["Range: bytes=0-0"], "\r\n")
    extra = [[], *([f] for f in FIELDS), *([f"Range: {a}", f"Range: {b}"]
                                           for a, b in zip(RANGES, RANGES[1:]))]
    for target in ("/data", "/d%61ta", "/info", "/empty"):
        for spec in [None, *RANGES]:
            for fields in extra:
                ranged = [] if spec is None else [f"Range: {spec}"]
                ask = _request("GET", target, "HTTP/1.1", ["Host: x", *ranged, *fields], "\r\n")
                _same_answers(twin_servers, ask + follow)
    # 290 requests and the one after each: those of the viewer forms, whose fields are kept
    assert counted.answered - before == 580


def test_the_viewer_requests_are_answered_quickly(twin_servers):
    _, counted, _ = twin_servers
    before = counted.answered
    for spec in ("bytes=0-9", "bytes=5-1100", "bytes=-3", "bytes=20-", None):
        for target in ("/data", "/d%61ta", "/info", "/empty" if spec is None else "/data"):
            fields = [] if spec is None else [f"Range: {spec}"]
            _same_answers(twin_servers, _request("GET", target, "HTTP/1.1",
                                                 ["Host: x", *fields], "\r\n") * 3)
    assert counted.answered - before == 5 * 4 * 3


def _get(server, target: str, spec: str | None = None) -> tuple[int, bytes]:
    status, _, body = request(server, "GET", target, {"Range": spec} if spec else None)
    return status, body


def _counted_server(root: Path, monkeypatch, **kwargs):
    counted = _Counted(quick.answer)
    monkeypatch.setattr(quick, "answer", counted)
    return ngshard.serve(root, **kwargs), counted


def _keep_alive(server, target: str, spec: str, n: int) -> list[bytes]:
    """The bodies of ``n`` requests of one range, one after another on one connection."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    try:
        bodies = []
        for _ in range(n):
            conn.request("GET", target, headers={"Range": spec})
            bodies.append(conn.getresponse().read())
        return bodies
    finally:
        conn.close()


def test_a_changed_or_replaced_file_is_looked_up_again(tmp_path, monkeypatch):
    (tmp_path / "f").write_bytes(b"a" * 100)
    server, counted = _counted_server(tmp_path, monkeypatch)
    with server:
        assert _keep_alive(server, "/f", "bytes=0-3", 3) == [b"aaaa"] * 3
        assert counted.answered == 2  # the first in Python, then two quickly
        st_before = os.stat(tmp_path / "f")
        (tmp_path / "g").write_bytes(b"b" * 100)  # same size, same times, another inode
        os.utime(tmp_path / "g", ns=(st_before.st_atime_ns, st_before.st_mtime_ns))
        os.replace(tmp_path / "g", tmp_path / "f")
        assert _keep_alive(server, "/f", "bytes=0-3", 3) == [b"bbbb"] * 3
        with open(tmp_path / "f", "r+b") as f:  # changed in place, same size
            f.write(b"cc")
        os.utime(tmp_path / "f", ns=(st_before.st_atime_ns, st_before.st_mtime_ns + 1))
        assert _keep_alive(server, "/f", "bytes=0-3", 2) == [b"ccbb"] * 2
        with open(tmp_path / "f", "r+b") as f:  # cut short: the range is past its end now
            f.truncate(2)
        assert _get(server, "/f", "bytes=3-4")[0] == 416
        os.remove(tmp_path / "f")
        assert _get(server, "/f", "bytes=0-1")[0] == 404
        assert counted.answered == 2 + 2 + 1


def test_no_closed_descriptor_is_answered_from(tmp_path, monkeypatch):
    """Files no longer kept open (past OPEN_FILES) leave the table before they are closed;
    a file takes a few targets at most, whatever the queries a client makes up."""
    monkeypatch.setattr(served_files, "OPEN_FILES", 4)
    for i in range(10):
        (tmp_path / f"f{i}").write_bytes(bytes([i]) * 10)
    server, counted = _counted_server(tmp_path, monkeypatch)
    with server:
        table = server.files.quick
        for _turn in range(3):
            for i in range(10):
                assert _keep_alive(server, f"/f{i}", "bytes=0-1", 2) == [bytes([i]) * 2] * 2
                assert len(table) <= 4
                assert all(entry[-1].fileno == entry[0] for entry in table.values())
        for q in range(20):
            assert _get(server, f"/f0?q={q}", "bytes=1-1") == (206, b"\0")
        assert sum(entry[-1].name == "f0" for entry in table.values()) == 4
        assert counted.answered == 3 * 10


def test_a_response_larger_than_the_socket_takes_is_sent_whole(tmp_path, monkeypatch):
    big = os.urandom(8 << 20)
    (tmp_path / "big").write_bytes(big)
    server, counted = _counted_server(tmp_path, monkeypatch)
    with server, socket.create_connection((server.host, server.port), timeout=20) as s:
        ask = b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n"
        s.sendall(ask)
        out = bytearray()

        def take(n: int) -> None:
            while len(out) < n:
                chunk = s.recv(65536)
                assert chunk
                out.extend(chunk)

        first = len(big) + 200
        take(first)
        s.sendall(ask + b"GET /big HTTP/1.1\r\nHost: x\r\nRange: bytes=5-9\r\n\r\n")
        while out.count(b"HTTP/1.1 ") < 3 or not out.endswith(big[5:10]):
            chunk = s.recv(65536)
            assert chunk
            out.extend(chunk)
        bodies = [p.split(b"\r\n\r\n", 1)[1] for p in bytes(out).split(b"HTTP/1.1 ")[1:]]
        assert bodies == [big, big, big[5:10]]
        assert counted.answered == 1 and counted.pending == 1  # the range: in Python


def test_a_request_log_sees_every_request(tmp_path, monkeypatch):
    """With a log, every request goes the Python path, which logs it."""
    (tmp_path / "f").write_bytes(b"x" * 10)
    seen = []
    lock = threading.Lock()

    def log(req, response):
        with lock:
            seen.append(response.status)

    server, counted = _counted_server(tmp_path, monkeypatch, log=log)
    with server:
        assert _keep_alive(server, "/f", "bytes=0-1", 5) == [b"xx"] * 5
    assert seen == [206] * 5 and counted.answered == 0


def test_the_fields_the_python_path_reads_are_known_here():
    """Every request field the server's modules read is one that sends a request the
    Python path, or one the compiled answer handles, or one read only for what it never
    answers (a twin's Accept-Encoding, a preflight's Access-Control-Request-Headers)."""
    source = "".join(p.read_text() for p in Path(quick.__file__).parent.glob("*.py"))
    read = set(re.findall(r'headers(?:\.get\(|\[)"([a-z-]+)"', source))
    read |= set(re.findall(r'"([a-z-]+)" in (?:request\.)?headers', source))
    assert {"range", "if-match", "content-length"} <= read  # the patterns find them
    never = {"accept-encoding", "access-control-request-headers"}
    assert {name for name in read - never - quick.FIELDS_HANDLED
            if not any(name.startswith(f) for f in quick.FIELDS_READ)} == set()
