"""What ``ngshard.serve`` answers: GET and HEAD with every single-range form, 416, CORS and
preflight, ETag and Last-Modified with conditional requests, ``.gz`` twins, keep-alive, and
the layers' Neuroglancer sources."""

from __future__ import annotations

import gzip
import http.client
import os
import time
from email.utils import formatdate

import pytest
from wire import DATA, raw, request, status_of

import ngshard


def test_whole_file_get_and_head(server):
    status, headers, body = request(server, "GET", "/data")
    assert (status, body) == (200, DATA)
    assert headers["content-length"] == "1024" and headers["accept-ranges"] == "bytes"
    assert headers["content-type"] == "application/octet-stream"
    assert headers["etag"].startswith('"') and headers["last-modified"].endswith("GMT")
    status, head_headers, body = request(server, "HEAD", "/data")
    assert (status, body) == (200, b"")
    assert head_headers["content-length"] == "1024" and head_headers["etag"] == headers["etag"]
    status, headers, body = request(server, "GET", "/info")
    assert status == 200 and headers["content-type"] == "application/json"


@pytest.mark.parametrize(("spec", "start", "end"), [
    ("bytes=10-19", 10, 20),      # a-b
    ("bytes=7-7", 7, 8),          # a-a
    ("bytes=1000-", 1000, 1024),  # a-
    ("bytes=-24", 1000, 1024),    # suffix
    ("bytes=-5000", 0, 1024),     # suffix longer than the file
    ("bytes=1020-5000", 1020, 1024),
])
def test_single_ranges_get_206(server, spec, start, end):
    status, headers, body = request(server, "GET", "/data", {"Range": spec})
    assert status == 206 and body == DATA[start:end]
    assert headers["content-range"] == f"bytes {start}-{end - 1}/1024"
    assert headers["content-length"] == str(end - start)


@pytest.mark.parametrize("spec", ["bytes=1024-", "bytes=5000-6000", "bytes=-0", "bytes=9-3",
                                  "bytes=x-"])
def test_unsatisfiable_ranges_get_416(server, spec):
    status, headers, body = request(server, "GET", "/data", {"Range": spec})
    assert status == 416 and headers["content-range"] == "bytes */1024"
    assert body.startswith(b"416 ")


def test_ranges_that_are_ignored_get_200(server):
    for spec in ("items=0-5", "bytes=0-1,4-5"):
        status, headers, body = request(server, "GET", "/data", {"Range": spec})
        assert (status, body) == (200, DATA) and "content-range" not in headers
    status, _, body = request(server, "HEAD", "/data", {"Range": "bytes=0-1"})
    assert status == 200 and body == b""  # range requests are defined for GET only
    status, _, body = request(server, "GET", "/empty", {"Range": "bytes=-5"})
    assert (status, body) == (200, b"")
    status, headers, _ = request(server, "GET", "/empty", {"Range": "bytes=0-"})
    assert status == 416 and headers["content-range"] == "bytes */0"


def test_cors_on_every_answer_and_preflight(server):
    for path, expected in (("/data", 200), ("/nothing", 404)):
        status, headers, _ = request(server, "GET", path, {"Origin": "http://viewer:8080"})
        assert status == expected and headers["access-control-allow-origin"] == "*"
        exposed = {h.strip().lower() for h in headers["access-control-expose-headers"].split(",")}
        assert {"content-range", "content-length", "accept-ranges", "etag"} <= exposed
    status, headers, body = request(server, "OPTIONS", "/data", {
        "Origin": "http://viewer:8080", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "range, if-none-match"})
    assert status == 204 and body == b""
    assert headers["access-control-allow-origin"] == "*"
    assert "GET" in headers["access-control-allow-methods"]
    assert headers["access-control-allow-headers"] == "range, if-none-match"


def test_conditional_requests(server, tree):
    _, headers, _ = request(server, "GET", "/data")
    etag, modified = headers["etag"], headers["last-modified"]
    assert request(server, "GET", "/data", {"If-None-Match": etag})[0] == 304
    assert request(server, "GET", "/data", {"If-None-Match": f'"other", W/{etag}'})[0] == 304
    assert request(server, "HEAD", "/data", {"If-None-Match": "*"})[0] == 304
    assert request(server, "GET", "/data", {"If-None-Match": '"other"'})[0] == 200
    assert request(server, "GET", "/data", {"If-Modified-Since": modified})[0] == 304
    past = formatdate(time.time() - 86400 * 3, usegmt=True)
    assert request(server, "GET", "/data", {"If-Modified-Since": past})[0] == 200
    assert request(server, "GET", "/data", {"If-Match": etag})[0] == 200
    assert request(server, "GET", "/data", {"If-Match": '"other"'})[0] == 412
    assert request(server, "GET", "/data", {"If-Unmodified-Since": past})[0] == 412
    # If-Range: the range only while the file is the one the client has
    status, _, body = request(server, "GET", "/data", {"Range": "bytes=0-3", "If-Range": etag})
    assert (status, body) == (206, DATA[:4])
    status, _, body = request(server, "GET", "/data", {"Range": "bytes=0-3",
                                                        "If-Range": '"old"'})
    assert (status, body) == (200, DATA)
    # a replaced file has a new tag
    os.utime(tree / "data", ns=(0, time.time_ns() + 10**9))
    assert request(server, "GET", "/data", {"If-None-Match": etag})[0] == 200


def test_gz_twins(server):
    """A chunk stored as ``name.gz`` is served as ``name`` with Content-Encoding: gzip (or
    inflated for a client that does not take gzip); a file beside its twin wins."""
    status, headers, body = request(server, "GET", "/sub/0-64_0-64_0-64",
                                    {"Accept-Encoding": "gzip, deflate"})
    assert status == 200 and headers["content-encoding"] == "gzip"
    assert gzip.decompress(body) == b"chunk" * 100 and "accept-encoding" in headers["vary"].lower()
    status, headers, body = request(server, "GET", "/sub/0-64_0-64_0-64",
                                    {"Accept-Encoding": "identity"})
    assert (status, body) == (200, b"chunk" * 100) and "content-encoding" not in headers
    status, headers, body = request(server, "GET", "/sub/0-64_0-64_0-64",
                                    {"Accept-Encoding": "identity", "Range": "bytes=0-4"})
    assert (status, body) == (206, b"chunk")
    assert request(server, "GET", "/both")[2] == b"plain"
    status, headers, body = request(server, "GET", "/both.gz")  # asked for by its own name
    assert gzip.decompress(body) == b"twin" and "content-encoding" not in headers


def test_keep_alive_and_pipelining(server):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=10)
    for i in range(20):
        conn.request("GET", "/data", headers={"Range": f"bytes={i}-{i}"})
        response = conn.getresponse()
        assert response.status == 206 and response.read() == DATA[i:i + 1]
    conn.close()
    answer = raw(server, b"GET /data HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1\r\n\r\n"
                         b"HEAD /data HTTP/1.1\r\nHost: x\r\n\r\n"
                         b"GET /info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer.count(b"HTTP/1.1 ") == 3 and b"HTTP/1.1 206" in answer


def test_large_file_and_concurrency(tmp_path):
    """A file larger than one send streams whole; many clients at once all get their bytes."""
    from concurrent.futures import ThreadPoolExecutor

    big = os.urandom(3 << 20)
    (tmp_path / "big").write_bytes(big)
    with ngshard.serve(tmp_path) as srv:
        assert request(srv, "GET", "/big")[2] == big

        def one(i: int) -> bool:
            start = (i * 7919) % len(big)
            status, _, body = request(srv, "GET", "/big", {"Range": f"bytes={start}-"
                                                                     f"{start + 4095}"})
            return status == 206 and body == big[start:start + 4096]

        with ThreadPoolExecutor(32) as pool:
            assert all(pool.map(one, range(300)))


def test_serves_an_fsspec_url(tmp_path):
    """A store behind fsspec (memory:// here, a bucket in use) is served the same way."""
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.pipe("/served/a/data", DATA)
    fs.pipe("/served/a/.hidden", b"x")
    with ngshard.serve("memory://served") as srv:
        status, headers, body = request(srv, "GET", "/a/data", {"Range": "bytes=-4"})
        assert (status, body) == (206, DATA[-4:]) and headers["content-range"] == \
            "bytes 1020-1023/1024"
        etag = headers["etag"]
        assert request(srv, "GET", "/a/data", {"If-None-Match": etag})[0] == 304
        assert request(srv, "GET", "/a/missing")[0] == 404
        assert request(srv, "GET", "/a/.hidden")[0] == 404
        assert request(srv, "GET", "/a/data%3Fx=1")[0] == 404  # no query smuggled in
        assert request(srv, "GET", "/a/data", {"Range": "bytes=2000-"})[0] == 416
    fs.rm("/served", recursive=True)


def test_sharded_volume_reads_through_the_server(tmp_path):
    """ngshard's own HTTP reader over the server: byte ranges, no RangesIgnoredWarning."""
    import warnings

    import numpy as np

    data = np.arange(64 * 64 * 16, dtype=np.uint16).reshape(64, 64, 16)
    with ngshard.create_volume(tmp_path / "vol", dtype="uint16", shape=data.shape,
                               chunk_size=(16, 16, 16), sharding="auto") as vol:
        vol[:] = data
    with ngshard.serve(tmp_path) as srv, warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ngshard.open_volume(f"{srv.url}/vol")[:]
    np.testing.assert_array_equal(got[..., 0], data)


def test_sources_name_each_layer(tmp_path):
    import json

    with ngshard.create_volume(tmp_path / "em", dtype="uint8", shape=(8, 8, 8)) as vol:
        vol[:] = 1
    (tmp_path / "em" / "nested").mkdir()
    (tmp_path / "em" / "nested" / "info").write_text('{"scales": []}')  # inside a layer
    (tmp_path / "group" / "seg" / "sk").mkdir(parents=True)
    info = {"type": "segmentation", "data_type": "uint64", "num_channels": 1,
            "skeletons": "sk", "scales": [{"key": "1_1_1", "size": [8, 8, 8],
                                           "resolution": [1, 1, 1], "voxel_offset": [0, 0, 0],
                                           "chunk_sizes": [[8, 8, 8]], "encoding": "raw"}]}
    (tmp_path / "group" / "seg" / "info").write_text(json.dumps(info))
    (tmp_path / "group" / "seg" / "sk" / "info").write_text(
        '{"@type": "neuroglancer_skeletons"}')
    (tmp_path / "kv").mkdir()
    (tmp_path / "kv" / "info").write_text(json.dumps({"sharding": {
        "@type": "neuroglancer_uint64_sharded_v1"}}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "info").write_text("{not json")
    with ngshard.serve(tmp_path) as srv:
        kinds = {layer.path: (layer.kind, layer.attached) for layer in srv.layers}
        assert kinds == {"em": ("image", {}), "kv": ("sharded", {}),
                         "group/seg": ("segmentation", {"skeletons": "group/seg/sk"})}
        assert srv.sources() == {"em": f"precomputed://{srv.url}/em",
                                 "group/seg": f"precomputed://{srv.url}/group/seg"}


def test_close_releases_the_port_and_ends_connections(tree):
    srv = ngshard.serve(tree)
    conn = http.client.HTTPConnection(srv.host, srv.port, timeout=5)
    conn.request("GET", "/data")
    conn.getresponse().read()
    started = time.monotonic()
    srv.close()
    assert time.monotonic() - started < 2
    with ngshard.serve(tree, port=srv.port) as again:  # the port is free again
        assert status_of(raw(again, b"GET /data HTTP/1.0\r\n\r\n")) == 200
