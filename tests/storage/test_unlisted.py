"""Stores over HTTP servers that give no directory listings: sharded stores and volumes find
their shards by probing every shard name; what cannot be probed (the chunk files of an
unsharded volume, too many shard names) is refused in one line, never reported empty or OK."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ngshard
from ngshard.cli import main
from ngshard.sharded.listing import MAX_PROBED_SHARDS
from ngshard.storage import RangesIgnoredWarning, open_storage
from ngshard.verify import verify_kv, verify_volume

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=3,
                            minishard_index_encoding="gzip", data_encoding="gzip")
ITEMS = {k: f"value {k}".encode() * (k % 7) for k in range(0, 4000, 13)}


@pytest.fixture(params=["http", "http-plain"])
def server(request):
    """The range-serving test server, and ``python3 -m http.server`` as it is."""
    server = request.getfixturevalue("http_server" if request.param == "http"
                                     else "plain_http_server")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RangesIgnoredWarning)
        yield server


@pytest.fixture
def kv_url(server):
    ngshard.write_kv(server.root / "kv", SPEC, ITEMS)
    return f"{server.base}/kv"


@pytest.fixture
def volumes(server):
    """A sharded and an unsharded volume under the server, and their voxels."""
    data = np.random.default_rng(1).integers(0, 255, (40, 30, 20), np.uint8)
    for name, sharding in (("sharded", {"@type": "neuroglancer_uint64_sharded_v1",
                                        "hash": "identity", "preshift_bits": 0,
                                        "minishard_bits": 1, "shard_bits": 2,
                                        "minishard_index_encoding": "raw",
                                        "data_encoding": "gzip"}),
                           ("unsharded", None)):
        with ngshard.create_volume(server.root / name, dtype="uint8", shape=data.shape,
                                   chunk_size=(16, 16, 8), sharding=sharding) as vol:
            vol[...] = data[..., None]
    return server.base, data


@pytest.mark.parametrize("listing", [True, False])
def test_sharded_store_lists_by_probing(server, kv_url, listing):
    server.listing = listing
    storage = open_storage(kv_url)
    assert storage.supports_listing is listing
    kv = ngshard.open_kv(kv_url)
    assert len(kv) == len(ITEMS)
    assert sorted(kv.keys_array().tolist()) == sorted(ITEMS)
    assert dict(kv.iter_items()) == ITEMS
    assert sum(s["keys"] for s in kv.stats()) == len(ITEMS)
    report = verify_kv(kv)
    assert report.ok and report.keys == len(ITEMS) and report.shards == SPEC.num_shards


def test_without_listings_the_shards_are_found_by_head_requests(server, kv_url):
    server.listing = False
    kv = ngshard.open_kv(kv_url)
    server.requests.clear()
    assert kv.shard_names() == [SPEC.shard_filename(i) for i in range(SPEC.num_shards)]
    heads = [path for method, path, _ in server.requests if method == "HEAD"]
    assert sorted(heads) == sorted(f"/kv/{SPEC.shard_filename(i)}"
                                   for i in range(SPEC.num_shards))


@pytest.mark.parametrize("refusal", [False, 403])
def test_an_unlistable_folder_is_not_an_empty_one(server, kv_url, refusal):
    server.listing = refusal
    storage = open_storage(kv_url)
    with pytest.raises(ngshard.UnlistableError, match=f"{kv_url}: the server gives no "
                                                      f"directory listings"):
        storage.list()
    assert len(ngshard.open_kv(kv_url)) == len(ITEMS)
    server.listing = True  # a folder that is not there, on a server that lists: empty
    assert open_storage(f"{kv_url}/absent").list() == []


def test_too_many_shard_names_to_probe(server):
    spec = ngshard.ShardingSpec(shard_bits=13, minishard_bits=0)
    assert spec.num_shards > MAX_PROBED_SHARDS
    ngshard.write_kv(server.root / "big", spec, {1: b"one", 2: b"two"})
    server.listing = False
    kv = ngshard.open_kv(f"{server.base}/big")
    assert kv[1] == b"one"  # reads need no listing
    for count in (len, lambda kv: kv.keys_array(), lambda kv: list(kv.iter_keys()),
                  verify_kv):
        with pytest.raises(ngshard.UnlistableError, match="8192 shard names shard_bits 13 "
                                                          "allows are more than the 4096"):
            count(kv)


@pytest.mark.parametrize("listing", [True, False])
def test_volumes(server, volumes, listing):
    base, data = volumes
    server.listing = listing
    sharded = ngshard.open_volume(f"{base}/sharded")
    positions = sharded.chunk_positions()
    assert len(positions) == 3 * 2 * 3
    assert verify_volume(sharded).keys == 18 and verify_volume(sharded).ok
    np.testing.assert_array_equal(sharded[...][..., 0], data)
    unsharded = ngshard.open_volume(f"{base}/unsharded")
    np.testing.assert_array_equal(unsharded[...][..., 0], data)
    if listing:
        assert len(unsharded.chunk_positions()) == 18
        assert verify_volume(unsharded).keys == 18
        return
    for call in (lambda v: v.chunk_positions(), verify_volume):
        with pytest.raises(ngshard.UnlistableError, match="no directory listings"):
            call(unsharded)


def test_cli_with_and_without_listings(server, kv_url, volumes, capsys):
    base, _ = volumes
    for listing in (True, False):
        server.listing = listing
        assert main(["info", kv_url]) == 0
        out = capsys.readouterr().out
        assert f"shards       {SPEC.num_shards} present of {SPEC.num_shards}" in out
        assert f"keys         {len(ITEMS)}" in out
        assert main(["ls", kv_url, "--sort"]) == 0
        assert capsys.readouterr().out.split() == [str(k) for k in sorted(ITEMS)]
        assert main(["verify", kv_url]) == 0
        assert f"{len(ITEMS)} keys" in capsys.readouterr().out
        assert main(["verify", f"{base}/sharded"]) == 0
        assert "18 chunks decoded" in capsys.readouterr().out
        assert main(["ls", f"{base}/sharded"]) == 0
        assert len(capsys.readouterr().out.split()) == 18
    # unsharded, no listings: said in one line; verify fails
    assert main(["info", f"{base}/unsharded"]) == 0
    assert "not counted: the server gives no directory listings" in capsys.readouterr().out
    assert main(["verify", f"{base}/unsharded"]) == 1
    out = capsys.readouterr().out
    assert "not verified" in out and "no directory listings" in out and "OK" not in out
    server.listing = True
    assert main(["verify", f"{base}/unsharded"]) == 0
    assert "18 chunks decoded" in capsys.readouterr().out


def test_unsharded_skeletons_without_listings(server, capsys):
    vertices = np.array([[0, 0, 0], [1, 1, 1]], np.float32)
    ngshard.write_skeletons(server.root / "sk", {3: (vertices, np.array([[0, 1]])),
                                                 9: (vertices * 2, np.array([[1, 0]]))},
                            sharding=None)
    server.listing = False
    url = f"precomputed://{server.base}/sk"
    layer = ngshard.open(url)
    np.testing.assert_array_equal(layer.get(9).vertices, vertices * 2)
    with pytest.raises(ngshard.UnlistableError, match="no directory listings"):
        layer.keys_array()
    assert main(["info", url]) == 0
    assert "segments     not counted: the server gives no directory listings" in \
        capsys.readouterr().out
    server.listing = True
    assert sorted(ngshard.open(url).keys_array().tolist()) == [3, 9]
