"""Files stored only as compressed twins, served under their plain name: as they are with a
Content-Encoding the client accepts, decoded as a stream otherwise (HEAD decodes nothing), and
decoded for a Range, whose bytes are those of the decoded file."""

from __future__ import annotations

import bz2
import gzip
import http.client
import lzma

import brotli
import pytest
import zstandard
from wire import raw, request

import ngshard
import ngshard.storage
from ngshard.limits import TWIN_WHOLE_BYTES

CONTENT = bytes(range(256)) * 300 + b"tail" * 1000  # 80800 bytes
ENCODE = {".gz": gzip.compress, ".br": brotli.compress, ".xz": lzma.compress,
          ".bz2": bz2.compress, ".zstd": zstandard.ZstdCompressor().compress}
CODING = {".gz": "gzip", ".br": "br", ".zstd": "zstd"}


@pytest.fixture
def twins(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    for suffix, encode in ENCODE.items():
        (root / f"c{suffix}").write_bytes(encode(CONTENT))
    (root / "bad.br").write_bytes(b"this is not brotli at all")
    (root / "bomb.br").write_bytes(brotli.compress(bytes(300 << 20), quality=1))
    with ngshard.serve(root) as srv:
        yield srv


@pytest.mark.parametrize("suffix", list(CODING))
def test_sent_encoded_to_a_client_that_accepts_it(tmp_path, suffix):
    """(Before: only ``.gz`` was found; ``.br`` and ``.zstd`` twins were 404.)"""
    coding, encoded = CODING[suffix], ENCODE[suffix](CONTENT)
    (tmp_path / f"c{suffix}").write_bytes(encoded)
    with ngshard.serve(tmp_path) as srv:
        status, headers, body = request(srv, "GET", "/c",
                                        {"Accept-Encoding": f"deflate, {coding};q=0.8"})
        assert (status, headers["content-encoding"], body) == (200, coding, encoded)
        assert int(headers["content-length"]) == len(encoded)
        assert "accept-encoding" in headers["vary"].lower()
        status, headers, body = request(srv, "HEAD", "/c", {"Accept-Encoding": coding})
        assert (status, body, headers["content-length"]) == (200, b"", str(len(encoded)))


@pytest.mark.parametrize("suffix", list(ENCODE))
def test_decoded_for_a_client_that_does_not(tmp_path, suffix):
    """Decoded whole and sent with its length up to TWIN_WHOLE_BYTES (clients such as
    obstore's take no answer without one); past it, as a stream with chunked framing
    (HTTP/1.1) or to the close (HTTP/1.0). ``.xz`` and ``.bz2`` are no HTTP coding, so
    always decoded; without Accept-Encoding only gzip goes encoded."""
    large = bytes(range(256)) * (TWIN_WHOLE_BYTES // 256) + b"and one piece more" * 4000
    (tmp_path / f"c{suffix}").write_bytes(ENCODE[suffix](CONTENT))
    (tmp_path / f"large{suffix}").write_bytes(ENCODE[suffix](large))
    with ngshard.serve(tmp_path) as srv:
        for fields in ({"Accept-Encoding": "identity"}, {"Accept-Encoding": "br;q=0, gzip;q=0"},
                       {} if suffix != ".gz" else {"Accept-Encoding": "deflate"}):
            status, headers, body = request(srv, "GET", "/c", fields)
            assert (status, body) == (200, CONTENT)
            assert "content-encoding" not in headers and "transfer-encoding" not in headers
            assert headers["content-length"] == str(len(CONTENT))
        status, headers, body = request(srv, "GET", "/large", {"Accept-Encoding": "identity"})
        assert (status, body) == (200, large)
        assert headers["transfer-encoding"] == "chunked" and "content-length" not in headers
        for name, want in (("c", CONTENT), ("large", large)):
            answer = raw(srv, f"GET /{name} HTTP/1.0\r\nAccept-Encoding: identity\r\n\r\n"
                         .encode())
            head, _, rest = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and b"chunked" not in head and rest == want


def test_keep_alive_after_a_decoded_stream(twins):
    conn = http.client.HTTPConnection(twins.host, twins.port, timeout=10)
    for _ in range(3):
        conn.request("GET", "/c", headers={"Accept-Encoding": "identity"})
        response = conn.getresponse()
        assert response.read() == CONTENT and not response.will_close
    conn.close()


def test_head_decodes_nothing(twins):
    """HEAD of a twin to decode answers without its length: no decoding at all, so a file
    that would not decode (or would decode to 300 MiB) answers 200 at once."""
    for name in ("bad", "bomb", "c"):
        status, headers, body = request(twins, "HEAD", f"/{name}",
                                        {"Accept-Encoding": "identity"})
        assert (status, body) == (200, b"") and "content-length" not in headers
    status, _, body = request(twins, "GET", "/bad", {"Accept-Encoding": "identity"})
    assert status == 500 and b"bad.br" in body


@pytest.mark.parametrize("suffix", list(ENCODE))
def test_ranges_of_a_twin_are_of_the_decoded_file(tmp_path, suffix):
    """Whatever the client accepts: a Range selects decoded bytes, sent decoded; the full
    length is given once it is known (the twin ends within TWIN_WHOLE_BYTES, or the range
    reaches its end), else ``*`` (the bomb below)."""
    (tmp_path / f"c{suffix}").write_bytes(ENCODE[suffix](CONTENT))
    size = len(CONTENT)
    with ngshard.serve(tmp_path) as srv:
        for rng, start, end, total in (("bytes=10-19", 10, 20, str(size)),
                                       ("bytes=70000-", 70000, size, str(size)),
                                       ("bytes=-7", size - 7, size, str(size)),
                                       ("bytes=80000-99999", 80000, size, str(size))):
            status, headers, body = request(srv, "GET", "/c", {
                "Range": rng, "Accept-Encoding": "gzip, br, zstd"})
            assert (status, body) == (206, CONTENT[start:end]), rng
            assert headers["content-range"] == f"bytes {start}-{end - 1}/{total}"
            assert "content-encoding" not in headers
        status, headers, _ = request(srv, "GET", "/c", {"Range": f"bytes={size}-"})
        assert (status, headers["content-range"]) == (416, f"bytes */{size}")
        # ngshard's own client (obstore: no "bytes a-b/*") reads ranges and the whole
        got = ngshard.storage.open_storage(srv.url).read_ranges([("c", [[10, 20], [0, 5]])])
        assert [bytes(b) for b in got[0][1]] == [CONTENT[10:20], CONTENT[:5]]
        assert ngshard.storage.open_storage(srv.url).read("c") == CONTENT


def test_a_range_of_a_bomb_decodes_only_up_to_it(twins):
    status, headers, body = request(twins, "GET", "/bomb", {"Range": "bytes=5-9"})
    assert (status, body, headers["content-range"]) == (206, bytes(5), "bytes 5-9/*")
