"""HTTP servers as they come: ``python3 -m http.server`` ignores Range headers (200 and the
whole file) and sends no ETag. ngshard reads the right bytes anyway, warns once per store that
every read downloads whole files, and tells replaced files apart by size and Last-Modified."""

from __future__ import annotations

import os
import urllib.request
import warnings

import numpy as np
import pytest

import ngshard
from ngshard import storage
from ngshard.storage import RangesIgnoredWarning

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=2,
                            minishard_index_encoding="gzip", data_encoding="gzip")
SHARDED = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
           "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip",
           "data_encoding": "gzip"}


def make_items(n: int = 600) -> dict[int, bytes]:
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 2**64 - 1, n, np.uint64, endpoint=True)).tolist()
    return {k: rng.bytes(int(rng.integers(0, 300))) for k in [0, 2**64 - 1, *keys]}


def test_the_plain_server_really_ignores_range(plain_http_server):
    (plain_http_server.root / "f").write_bytes(b"0123456789")
    request = urllib.request.Request(f"{plain_http_server.base}/f",
                                     headers={"Range": "bytes=2-4"})
    with urllib.request.urlopen(request) as response:
        assert response.status == 200 and response.read() == b"0123456789"
        assert response.headers["ETag"] is None and response.headers["Last-Modified"]


def test_sharded_store_reads_right_and_warns_once(plain_http_server):
    items = make_items()
    absent = [k for k in range(1, 60) if k not in items]
    ngshard.write_kv(plain_http_server.root / "kv", SPEC, items)
    kv = ngshard.open_kv(f"{plain_http_server.base}/kv")  # the spec from the info, too
    with pytest.warns(RangesIgnoredWarning, match="ignores Range requests") as caught:
        assert kv.get_many([*items, *absent]) == items
        for k in list(items)[:25]:
            assert kv[k] == items[k]
        for k in absent[:5]:
            assert k not in kv and kv.get(k) is None
        assert sorted(kv.keys_array().tolist()) == sorted(items)
        assert len(kv) == len(items)
    assert len([w for w in caught if w.category is RangesIgnoredWarning]) == 1
    assert str(caught[0].message).startswith(f"{plain_http_server.base}/kv: ")


def test_once_known_each_object_is_fetched_once_per_batch(plain_http_server):
    items = make_items(2000)
    ngshard.write_kv(plain_http_server.root / "kv", SPEC, items)
    kv = ngshard.open_kv(f"{plain_http_server.base}/kv", SPEC)
    with pytest.warns(RangesIgnoredWarning):
        kv.get(1)
    kv = ngshard.open_kv(f"{plain_http_server.base}/kv", SPEC)  # no index cached
    shards = sum(n.endswith(".shard") for n in os.listdir(plain_http_server.root / "kv"))
    with pytest.warns(RangesIgnoredWarning):
        kv.get(1)  # a new store learns again, with one warning
        plain_http_server.requests.clear()
        assert kv.get_many(items) == items
    gets = [r for r in plain_http_server.requests if r[0] == "GET"]
    # shard indices, minishard indices, chunks: one whole-file GET per shard for each
    assert len(gets) <= 3 * shards


def test_a_server_that_honours_ranges_draws_no_warning(http_server):
    items = make_items()
    ngshard.write_kv(http_server.root / "kv", SPEC, items)
    kv = ngshard.open_kv(f"{http_server.base}/kv", SPEC)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RangesIgnoredWarning)
        assert kv.get_many(items) == items
    assert all(r[2] for r in http_server.requests if r[0] == "GET" and r[1].endswith(".shard"))


@pytest.mark.parametrize("encoding, sharding", [
    ("raw", None), ("raw", SHARDED), ("compressed_segmentation", SHARDED),
], ids=["raw-unsharded", "raw-sharded", "cseg-sharded"])
def test_volumes_read_right(plain_http_server, encoding, sharding):
    rng = np.random.default_rng(2)
    data = rng.integers(0, 5, (37, 21, 11, 1)).astype(np.uint32)
    vol = ngshard.create_volume(plain_http_server.root / "vol", dtype="uint32",
                                shape=(37, 21, 11), chunk_size=(8, 8, 4), encoding=encoding,
                                sharding=sharding)
    vol[:] = data
    vol.commit()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RangesIgnoredWarning)
        remote = ngshard.open_volume(f"{plain_http_server.base}/vol")
        assert remote.shape == (37, 21, 11, 1)
        np.testing.assert_array_equal(remote[:], data)
        np.testing.assert_array_equal(remote[3:30, 5:6, 2:9], data[3:30, 5:6, 2:9])
        np.testing.assert_array_equal(np.asarray(remote), data)


def test_generation_without_etag_rests_on_size_and_last_modified(plain_http_server):
    root = plain_http_server.root
    store = storage.open_storage(plain_http_server.base)
    (root / "a").write_bytes(b"x" * 100)
    os.utime(root / "a", (1_700_000_000, 1_700_000_000))
    plain_http_server.requests.clear()
    first = store.stat("a")
    assert plain_http_server.requests == [("HEAD", "/a", None)]  # Content-Length, Last-Modified
    assert first.size == 100 and store.stat("a") == first
    (root / "a").write_bytes(b"y" * 100)  # the same size, a later time
    os.utime(root / "a", (1_700_000_001, 1_700_000_001))
    assert store.stat("a").generation != first.generation
    (root / "a").write_bytes(b"y" * 101)  # another size, the same time
    os.utime(root / "a", (1_700_000_001, 1_700_000_001))
    assert store.stat("a").generation not in (first.generation,)
    assert store.stat("a").size == 101


def test_reader_sees_a_replaced_shard_without_etags(plain_http_server):
    root = plain_http_server.root
    spec = ngshard.ShardingSpec(minishard_bits=1)
    ngshard.write_kv(root / "kv", spec, {k: b"old-%d" % k for k in range(50)})
    os.utime(root / "kv" / "0.shard", (1_700_000_000, 1_700_000_000))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RangesIgnoredWarning)
        kv = ngshard.open_kv(f"{plain_http_server.base}/kv", spec)
        assert kv[7] == b"old-7" and kv.get_many([8]) == {8: b"old-8"}
        ngshard.write_kv(root / "kv", spec, {k: b"new-%d" % k for k in range(50)},
                         overwrite=True)  # same size
        os.utime(root / "kv" / "0.shard", (1_700_000_001, 1_700_000_001))
        assert kv[7] == b"new-7"
        assert kv.get_many([8, 9]) == {8: b"new-8", 9: b"new-9"}


def test_http_stores_are_read_only(http_server):
    ngshard.write_kv(http_server.root / "kv", SPEC, {1: b"one"})
    with pytest.raises(ngshard.ReadOnlyError, match="read-only"):
        ngshard.write_kv(f"{http_server.base}/kv", SPEC, {2: b"two"})
    with pytest.raises(ngshard.ReadOnlyError, match="read-only"):
        ngshard.open_kv(f"{http_server.base}/kv", SPEC, mode="a")
    assert not [r for r in http_server.requests if r[0] not in ("GET", "HEAD")]
    assert ngshard.open_kv(f"{http_server.base}/kv").get_many([1, 2]) == {1: b"one"}


def test_stores_reach_the_folders_above_them(http_server):
    """A layer's stores find the layer's info in the folder above (a quoted name too)."""
    (http_server.root / "layer" / "sub dir").mkdir(parents=True)
    (http_server.root / "layer" / "info").write_bytes(b"{}")
    (http_server.root / "layer" / "sub dir" / "a").write_bytes(b"hello")
    store = storage.open_storage(f"{http_server.base}/layer/sub%20dir")
    assert store.read("a") == b"hello" and store.list() == ["a"]
    assert store.parent().url == f"{http_server.base}/layer"
    assert store.parent().read("info") == b"{}"
    assert store.parent().parent().parent() is None
