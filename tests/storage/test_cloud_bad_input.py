"""Servers that answer wrongly: 200 with another length than the range asked, a body cut
short, an HTML error page for a shard, an ETag that changes between the index read and the
data read. Each gives one NgShardError naming the URL, or a retry where the failure is
transient (and then the right values); never a wrong value. On S3 (moto, through obstore) and
plain HTTP (fsspec), with the answers rewritten by the proxy of tests/faultproxy.py."""

from __future__ import annotations

import itertools
import uuid

import pytest
from faultproxy import FaultProxy

import ngshard

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
        "minishard_bits": 2, "shard_bits": 0}
ITEMS = {k: bytes([k]) * (100 + k) for k in range(20)}
OPTIONS = {"retries": 2, "retry_seconds": 20}


def shard_get(method: str, path: str) -> bool:
    return method == "GET" and path.split("?")[0].endswith(".shard")


def without(headers, *names):
    return [(k, v) for k, v in headers if k.lower() not in names]


def short_200(method, path, status, headers, body):
    if shard_get(method, path):
        return 200, without(headers, "content-range"), body[:-3], None
    return status, headers, body, None


def long_200(method, path, status, headers, body):
    if shard_get(method, path):
        return 200, without(headers, "content-range"), body + b"<!-- padding -->", None
    return status, headers, body, None


def short_206(method, path, status, headers, body):
    """206 with the Content-Range of what was asked, and fewer bytes (a consistent
    Content-Length): the body is not what the headers say."""
    if shard_get(method, path) and status == 206:
        return status, headers, body[:-2], None
    return status, headers, body, None


def html_page(method, path, status, headers, body):
    if shard_get(method, path):
        page = b"<html><body><h1>Service Temporarily Unavailable</h1>" + b" " * 4000 + \
            b"</body></html>"
        return 200, without(headers, "content-range", "content-type") + [
            ("Content-Type", "text/html")], page, None
    return status, headers, body, None


def cut_short(method, path, status, headers, body):
    if shard_get(method, path):
        return status, headers, body, max(0, len(body) - 5)
    return status, headers, body, None


def once(mangle):
    """``mangle`` for the first shard read only: a transient fault."""
    done = []

    def first(method, path, status, headers, body):
        if done or not shard_get(method, path):
            return status, headers, body, None
        done.append(path)
        return mangle(method, path, status, headers, body)

    return first


def etag_changing(times: int | None):
    """Each answer about the shard carries another ETag (``times`` times, then the real one
    again): as if it were replaced between the index read and the data read."""
    counter = itertools.count()

    def mangle(method, path, status, headers, body):
        if path.split("?")[0].endswith(".shard"):
            n = next(counter)
            if times is None or n < times:
                return status, [(k, f'"changed-{n}"' if k.lower() == "etag" else v)
                                for k, v in headers], body, None
        return status, headers, body, None

    return mangle


@pytest.fixture(params=["s3", "http"])
def served(request, tmp_path):
    """(upstream endpoint, store URL, options given an endpoint) of a store of ITEMS."""
    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        url = server.url()
        ngshard.write_kv(url, SPEC, ITEMS, storage_options=server.options)
        return server.endpoint, lambda _: url, server.through
    http = request.getfixturevalue("http_server")
    name = uuid.uuid4().hex
    ngshard.write_kv(http.root / name, SPEC, ITEMS)
    return http.base, lambda endpoint: f"{endpoint}/{name}", lambda endpoint: {}


def read_through(served, mangle):
    upstream, url_of, options_of = served
    with FaultProxy(upstream, mangle=mangle) as proxy:
        url = url_of(proxy.endpoint)
        kv = ngshard.open_kv(url, storage_options={**options_of(proxy.endpoint), **OPTIONS})
        return url, kv.get_many(list(ITEMS))


@pytest.mark.parametrize("mangle", [short_200, long_200, short_206, html_page, cut_short])
def test_a_wrong_answer_for_a_shard_is_one_error_naming_it(served, mangle):
    with pytest.raises(ngshard.NgShardError) as e:
        got = read_through(served, mangle)[1]
        assert got == ITEMS  # a wrong answer must never pass as right values
    assert "0.shard" in str(e.value) and "://" in str(e.value)


@pytest.mark.parametrize("mangle", [cut_short, short_206])
def test_a_transient_wrong_answer_is_retried(served, mangle):
    assert read_through(served, once(mangle))[1] == ITEMS


def test_an_etag_that_changes_between_index_and_data_reads_is_read_again(served):
    assert read_through(served, etag_changing(2))[1] == ITEMS


def test_an_etag_that_never_settles_is_a_changed_error(served):
    with pytest.raises(ngshard.ChangedError, match=r"0\.shard.*changed under each of 3"):
        read_through(served, etag_changing(None))


def test_a_batch_read_asks_no_head(served):
    """No HEAD on the way, on S3 as over HTTP: the shard index is a ranged GET from offset 0
    (its response gives size and ETag), then one GET of the minishard indices with the
    values (a small shard: the values lie within 128 KiB before the indices, read together)."""
    seen = []

    def record(method, path, status, headers, body):
        seen.append((method, path.split("?")[0]))
        return status, headers, body, None

    assert read_through(served, record)[1] == ITEMS
    assert [m for m, p in seen if p.endswith("0.shard")] == ["GET"] * 2
