"""Security of ``ngshard.serve``, one test per point of issue 11 item 2: only files under the
served root (no ``..``, no encoded ``%2e%2e``, no absolute paths, no symlinks out, no hidden
files), read only, no directory listing unless asked, bounded header and URL sizes, a clear
400/404/405/416 for everything else, nothing crashes the server, 127.0.0.1 unless told."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

import pytest
from wire import DATA, raw, request, status_of

import ngshard
from ngshard.server.protocol import MAX_FIELDS, MAX_HEAD, MAX_TARGET


def still_serving(server) -> bool:
    status, _, body = request(server, "GET", "/data", {"Range": "bytes=0-3"})
    return status == 206 and body == DATA[:4]


def test_dot_dot_segments_are_refused(server, tmp_path):
    (tmp_path / "outside").write_bytes(b"outside the root")
    for path in ("/../outside", "/sub/../../outside", "/sub/../data", "/./data", "/sub/.."):
        answer = raw(server, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert status_of(answer) == 400 and b"outside the root" not in answer, path
    assert still_serving(server)


def test_encoded_dot_dot_is_refused(server, tmp_path):
    (tmp_path / "outside").write_bytes(b"outside the root")
    for path in ("/%2e%2e/outside", "/%2E%2E/outside", "/.%2e/outside",
                 "/sub/%2e%2e/%2e%2e/outside", "/%2e%2e%2foutside", "/sub%2f..%2f..%2foutside",
                 "/%252e%252e/outside"):
        answer = raw(server, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert status_of(answer) in (400, 404) and b"outside the root" not in answer, path
        if "%25" not in path:  # %252e is a name with "%2e" in it: merely absent
            assert status_of(answer) == 400, path


def test_absolute_paths_are_refused(server):
    for target in ("etc/passwd", "//etc/passwd", "/%2Fetc%2Fpasswd", "/\\etc\\passwd",
                   "C:\\Windows\\win.ini", "*", "/data%00.txt"):
        answer = raw(server, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert status_of(answer) == 400 and b"root:" not in answer, target
    # the absolute form (as sent to proxies) names a path under the root, like the origin form
    assert status_of(raw(server, b"GET http://elsewhere/data HTTP/1.1\r\nHost: x\r\n\r\n")) == 200
    assert status_of(raw(server, b"GET http://elsewhere/etc/passwd HTTP/1.1\r\n\r\n")) == 404


def test_symlinks_out_of_the_root_are_not_followed(tree, tmp_path):
    (tmp_path / "secret-dir").mkdir()
    (tmp_path / "secret-dir" / "key").write_bytes(b"private")
    (tmp_path / "secret-file").write_bytes(b"private")
    os.symlink(tmp_path / "secret-file", tree / "link-out")
    os.symlink(tmp_path / "secret-dir", tree / "dir-out")
    os.symlink("../../secret-file", tree / "sub" / "relative-out")
    os.symlink(tree / "data", tree / "link-in")  # inside the root: fine
    os.symlink(tree / ".hidden", tree / "link-to-hidden")
    with ngshard.serve(tree, listing=True) as srv:
        for path in ("/link-out", "/dir-out/key", "/sub/relative-out", "/link-to-hidden"):
            status, _, body = request(srv, "GET", path)
            assert status == 404 and b"private" not in body and b"secret" not in body, path
        assert request(srv, "GET", "/link-in")[2] == DATA
        listing = request(srv, "GET", "/")[2]
        assert b"link-in" in listing and b"link-out" not in listing and b"dir-out" not in listing


def test_hidden_files_are_not_served(server):
    for path in ("/.hidden", "/sub/.secret", "/%2ehidden", "/.git/config", "/.hidden.gz",
                 "/sub/.shard~1@host~0f.tmp"):
        status, _, body = request(server, "GET", path)
        assert status == 404 and b"secret" not in body, path


def test_zarr_v2_metadata_is_served(server, tree):
    """Zarr v2 keeps its metadata in dot-named files; those four names alone are served."""
    (tree / "a.zarr").mkdir()
    for name in (".zarray", ".zattrs", ".zgroup", ".zmetadata", ".zarray~", ".zarrayx"):
        (tree / "a.zarr" / name).write_text('{"zarr_format": 2}')
    for name in (".zarray", ".zattrs", ".zgroup", ".zmetadata"):
        assert request(server, "GET", f"/a.zarr/{name}")[0] == 200, name
    for name in (".zarray~", ".zarrayx", "%2ezarray~"):
        assert request(server, "GET", f"/a.zarr/{name}")[0] == 404, name


def test_read_only(server, tree):
    for method in ("PUT", "POST", "DELETE", "PATCH", "MKCOL", "PROPFIND", "TRACE", "CONNECT"):
        conn_answer = raw(server, f"{method} /data HTTP/1.1\r\nHost: x\r\n"
                                  f"Content-Length: 3\r\n\r\nabc".encode())
        assert status_of(conn_answer) == 405, method
        assert b"Allow: GET, HEAD, OPTIONS" in conn_answer
    assert status_of(raw(server, b"PUT /new HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")) == 405
    assert (tree / "data").read_bytes() == DATA and not (tree / "new").exists()


def test_no_directory_listing_unless_asked(tree):
    with ngshard.serve(tree) as srv:
        for path in ("/", "/sub", "/sub/"):
            status, _, body = request(srv, "GET", path)
            assert status == 404 and b"0-64" not in body, path
    with ngshard.serve(tree, listing=True) as srv:
        status, headers, body = request(srv, "GET", "/sub/")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert b'href="/sub/0-64_0-64_0-64.gz"' in body and b".secret" not in body
        assert b".hidden" not in request(srv, "GET", "/")[2]


def test_header_and_url_sizes_are_bounded(server):
    long_target = "/" + "a" * (MAX_TARGET + 1)
    assert status_of(raw(server, f"GET {long_target} HTTP/1.1\r\n\r\n".encode())) == 414
    # a target that never ends is cut off too, without waiting for its end
    with socket.create_connection((server.host, server.port), timeout=10) as s:
        s.sendall(b"GET /" + b"a" * (MAX_TARGET + 200))
        assert status_of(s.recv(4096)) == 414
    big_field = "X-Big: " + "b" * MAX_HEAD
    assert status_of(raw(server, f"GET /data HTTP/1.1\r\n{big_field}\r\n\r\n".encode())) == 431
    many = "".join(f"X-{i}: 1\r\n" for i in range(MAX_FIELDS + 1))
    assert status_of(raw(server, f"GET /data HTTP/1.1\r\n{many}\r\n".encode())) == 431
    assert status_of(raw(server, b"GET /data HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n")) \
        == 413
    assert still_serving(server)


@pytest.mark.parametrize(("data", "status"), [
    (b"GET /missing HTTP/1.1\r\n\r\n", 404),
    (b"GET /sub HTTP/1.1\r\n\r\n", 404),  # a folder, listing off
    (b"GET /data/ HTTP/1.1\r\n\r\n", 404),  # a file as if a folder
    (b"GET /data HTTP/1.1\r\nRange: bytes=5000-\r\n\r\n", 416),
    (b"DELETE /data HTTP/1.1\r\n\r\n", 405),
    (b"GET /data\r\n\r\n", 400),  # HTTP/0.9
    (b"GET  /data HTTP/1.1\r\n\r\n", 400),
    (b"GET /data HTTP/1.1 extra\r\n\r\n", 400),
    (b"GET /data HTTP/2.0\r\n\r\n", 505),
    (b"GET /data HTTP/1.1\r\nBad Name: x\r\n\r\n", 400),
    (b"GET /data HTTP/1.1\r\nNoColon\r\n\r\n", 400),
    (b"GET /data HTTP/1.1\r\nHost : x\r\n\r\n", 400),  # whitespace before the colon
    (b"GET /data HTTP/1.1\r\nA: 1\r\n folded\r\n\r\n", 400),
    (b"GET /data HTTP/1.1\r\nA: \x01\r\n\r\n", 400),
    (b"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n", 400),  # a raw non-ASCII target
    (b"GET /a\xa0b HTTP/1.1\r\n\r\n", 400),  # no-break space: not a separator, not ASCII
    (b"GET /a\x85 HTTP/1.1\r\n\r\n", 400),
    (b"GET /%ff HTTP/1.1\r\n\r\n", 400),  # not UTF-8
    (b"GET /%zz HTTP/1.1\r\n\r\n", 400),
    (b"GET /data HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"GET /data HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # TLS to a plain port
])
def test_a_clear_status_for_everything_else(server, data, status):
    answer = raw(server, data)
    assert status_of(answer) == status
    head, _, body = answer.partition(b"\r\n\r\n")
    assert body.startswith(f"{status} ".encode()) or status == 405 and b"405" in body
    assert still_serving(server)


def test_nothing_crashes_the_server(server, tree, capfd):
    """Junk, half requests, abrupt resets, slow clients, a FIFO in the tree and many
    connections at once: each gets an answer or a closed connection, and the server goes on
    answering everyone else."""
    os.mkfifo(tree / "fifo")  # opening it for reading would block a careless server
    assert request(server, "GET", "/fifo")[0] == 404
    junk = [os.urandom(n) for n in (1, 100, 5000, 70000)] + [b"\r\n" * 50, b"\x00" * 300,
                                                           b"GET / HTTP/1.1\r\n"]
    for data in junk:
        with contextlib.suppress(OSError):
            raw(server, data, timeout=5)
    for _ in range(20):  # connect, send half a request, reset
        s = socket.create_connection((server.host, server.port))
        s.sendall(b"GET /data HTTP/1.1\r\nRange: by")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    for _ in range(10):  # ask for a large body and go away at once
        s = socket.create_connection((server.host, server.port))
        s.sendall(b"GET /data HTTP/1.1\r\n\r\n" * 50)
        s.close()
    slow = [socket.create_connection((server.host, server.port)) for _ in range(50)]
    for s in slow:
        s.sendall(b"GET /da")  # and wait: others must still be served
    errors = []

    def client() -> None:
        try:
            for _ in range(20):
                assert still_serving(server)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for s in slow:
        s.close()
    assert not errors and still_serving(server)
    assert "Traceback" not in capfd.readouterr().err


def test_binds_to_loopback_unless_told(tree):
    with ngshard.serve(tree) as srv:
        assert srv.host == "127.0.0.1" and srv.url == f"http://127.0.0.1:{srv.port}"
        listening = [c for c in _listening(srv.port)]
        assert listening == ["127.0.0.1"]
    with ngshard.serve(tree, host="0.0.0.0") as srv:  # told otherwise
        assert _listening(srv.port) == ["0.0.0.0"]
        assert status_of(raw(srv, b"GET /data HTTP/1.0\r\n\r\n")) == 200


def _listening(port: int) -> list[str]:
    """Local addresses listening on ``port`` (from /proc/net/tcp)."""
    found = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_connections_are_bounded(tree, monkeypatch):
    """Past MAX_CONNECTIONS open connections, the one idle the longest is closed to make room
    for a new one (idle clients lock no one out); when every connection is busy with a
    request, a new one is answered 503 and closed; once one ends, the next is served."""
    from ngshard.server import connections as front

    monkeypatch.setattr(front, "MAX_CONNECTIONS", 3)
    with ngshard.serve(tree) as srv:
        idle = [socket.create_connection((srv.host, srv.port), 5) for _ in range(3)]
        time.sleep(0.2)
        assert still_serving(srv)
        closed = 0
        for s in idle:  # one idle connection made room
            s.settimeout(2)
            with contextlib.suppress(TimeoutError):
                closed += s.recv(10) == b""
        assert closed == 1
        for s in idle:
            s.close()
        time.sleep(0.2)
        busy = [socket.create_connection((srv.host, srv.port)) for _ in range(3)]
        for s in busy:
            s.sendall(b"GET /da")  # a head begun: not idle
        time.sleep(0.2)
        assert status_of(raw(srv, b"GET /data HTTP/1.1\r\n\r\n")) == 503
        busy.pop().close()
        time.sleep(0.2)
        assert still_serving(srv)
        for s in busy:
            s.close()


def test_slow_heads_are_timed_out(tree, monkeypatch):
    """A client that starts a request and never finishes it is answered 408 and dropped."""
    from ngshard.server import exchange

    monkeypatch.setattr(exchange, "HEAD_TIMEOUT", 0.3)
    with ngshard.serve(tree) as srv, socket.create_connection((srv.host, srv.port), 5) as s:
        s.sendall(b"GET /data HTTP/1.1\r\n")
        started = time.monotonic()
        assert status_of(s.recv(4096)) == 408
        assert time.monotonic() - started < 3


def test_files_kept_open_are_checked_each_time(server, tree, tmp_path):
    """The server keeps descriptors open between requests; a file replaced, changed, removed,
    or moved behind a symbolic link out of the root is looked up afresh each time."""
    (tree / "sub" / "kept").write_bytes(b"first")
    assert request(server, "GET", "/sub/kept")[2] == b"first"
    (tree / "sub" / "new").write_bytes(b"second!")
    os.replace(tree / "sub" / "new", tree / "sub" / "kept")  # replaced by rename
    assert request(server, "GET", "/sub/kept")[2] == b"second!"
    with open(tree / "sub" / "kept", "r+b") as f:  # changed in place
        f.write(b"THIRD!!")
    assert request(server, "GET", "/sub/kept")[2] == b"THIRD!!"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "kept").write_bytes(b"outside")
    os.rename(tree / "sub", tmp_path / "moved")
    os.symlink(outside, tree / "sub")  # the folder is now a link out of the root
    assert request(server, "GET", "/sub/kept")[0] == 404
    os.unlink(tree / "sub")
    assert request(server, "GET", "/sub/kept")[0] == 404


def test_a_tree_served_under_a_base_folder(tree):
    """``serve(base="data")``: the root is /data/ (so that Neuroglancer resolves a top
    layer's ``../sibling`` inside it); nothing is served outside it; a bad base is refused."""
    with ngshard.serve(tree, base="data") as server:
        assert server.url.endswith("/data")
        status, _, body = request(server, "GET", "/data/data", {"Range": "bytes=0-3"})
        assert status == 206 and body == DATA[:4]
        assert request(server, "GET", "/data/sub/0-64_0-64_0-64")[0] == 200  # its twin
        for path in ("/data", "/info", "/sub/0-64_0-64_0-64", "/datasub/x", "/data/.hidden"):
            assert request(server, "GET", path)[0] == 404, path
        assert status_of(raw(server, b"GET /data/../info HTTP/1.1\r\nHost: x\r\n\r\n")) == 400
    for bad in ("a/b", "..", ".git"):
        with pytest.raises(ngshard.SpecError, match="base"):
            ngshard.serve(tree, base=bad)
