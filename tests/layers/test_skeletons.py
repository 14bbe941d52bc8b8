"""Skeleton layers: round trips in both layouts, the peers' bytes (cloud-volume fixtures,
tensorstore reading our shards, cloud-volume reading our layer (a child process)) and
hostile values."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cloudvolume_peer import read_skeletons, volume_root
from peers import PEER_TIMEOUT

import ngshard
from ngshard.layers.sharding import segment_sharding

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "layers"
TRANSFORM = [2, 0, 0, 10, 0, 2, 0, 20, 0, 0, 4, 30]


def chain(rng, n):
    v = rng.uniform(0, 1000, (n, 3)).astype(np.float32)
    return v, np.stack([np.arange(n - 1), np.arange(1, n)], axis=1).astype(np.uint32)


def sample(count=50, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(1, 2**64 - 1, count, dtype=np.uint64)).tolist()
    items = {}
    for k in ids:
        n = int(rng.integers(1, 40))
        v, e = chain(rng, n)
        items[k] = (v, e, {"radius": rng.uniform(1, 9, n).astype(np.float32),
                           "color": rng.integers(0, 255, (n, 3)).astype(np.uint8)})
    return items


@pytest.mark.parametrize("sharding", ["auto", None])
def test_round_trip_with_attributes(tmp_path, sharding):
    items = sample()
    layer = ngshard.write_skeletons(tmp_path / "sk", items, sharding=sharding,
                                    transform=TRANSFORM)
    again = ngshard.open(tmp_path / "sk")
    assert isinstance(again, ngshard.Skeletons)
    assert (again.sharding is None) == (sharding is None) and layer.info == again.info
    assert [a.to_json() for a in again.vertex_attributes] == [
        {"id": "radius", "data_type": "float32", "num_components": 1},
        {"id": "color", "data_type": "uint8", "num_components": 3}]
    assert again.keys_array().tolist() == sorted(items)
    got = again.get_many(list(items) + [12345])
    assert set(got) == set(items)
    for k, (v, e, attrs) in items.items():
        s = got[k]
        assert s.id == k and s.vertices.dtype == np.float32 and s.edges.dtype == np.uint32
        np.testing.assert_array_equal(s.vertices, v)
        np.testing.assert_array_equal(s.edges, e)
        np.testing.assert_array_equal(s.radius, attrs["radius"])
        np.testing.assert_array_equal(s.attributes["color"], attrs["color"])
    k = next(iter(items))
    nm = again.get(k, transform=True).vertices
    np.testing.assert_allclose(nm, items[k][0] * [2, 2, 4] + [10, 20, 30], rtol=1e-6)
    assert again.get(12345) is None and again.get(12345, "absent") == "absent"
    with pytest.raises(KeyError):
        again[12345]
    assert 12345 not in again and k in again
    assert list(again) == sorted(items) and len(again) == len(items)


def test_streamed_items_of_unknown_count_spill(tmp_path):
    """An iterator (no len) is encoded and written in a stream; past buffer_bytes the
    sharded store spills, and everything arrives."""
    items = sample(300, seed=1)
    stream = ((k, (v, e)) for k, (v, e, _) in items.items())
    layer = ngshard.write_skeletons(tmp_path / "sk", stream, buffer_bytes=4096)
    assert layer.vertex_attributes == []
    assert len(layer) == 300
    got = layer.get_many(list(items))
    for k, (v, e, _) in items.items():
        np.testing.assert_array_equal(got[k].vertices, v)
        np.testing.assert_array_equal(got[k].edges, e)


def test_auto_sharding_grows_with_the_count():
    small, large = segment_sharding(100), segment_sharding(10_000_000)
    assert (small.shard_bits, small.minishard_bits) == (0, 1)
    assert large.num_shards * large.num_minishards * 64 >= 10_000_000
    assert large.num_minishards <= 2048 and large.hash == "murmurhash3_x86_128"
    assert segment_sharding(10_000, value_bytes=1 << 20).num_shards >= 8  # bytes cap shards


def test_bad_items_name_the_segment(tmp_path):
    v, e = chain(np.random.default_rng(0), 4)
    with pytest.raises(ValueError, match="skeleton 7: edges name vertex 9"):
        ngshard.write_skeletons(tmp_path / "a", {7: (v, np.array([[0, 9]]))})
    with pytest.raises(ValueError, match="skeleton 8: attribute 'radius' has shape"):
        ngshard.write_skeletons(tmp_path / "b", {8: (v, e, {"radius": np.ones(3)})},
                                vertex_attributes={"radius": "float32"})
    with pytest.raises(ValueError, match="skeleton 9: no values for vertex attribute"):
        ngshard.write_skeletons(tmp_path / "c", {9: (v, e)},
                                vertex_attributes={"radius": "float32"})


def test_a_bad_skeleton_among_many_is_named(tmp_path):
    """Skeletons are encoded in batches: the one that does not fit is still the one named,
    and a segment given twice is refused."""
    items = sample(40)
    k = sorted(items)[17]
    v, e, a = items[k]
    for bad in ([[0, len(v)]], [[0, -1]]):
        items[k] = (v, np.vstack([e, bad]).astype(np.int64), a)
        with pytest.raises(ValueError, match=f"skeleton {k}: edges name vertex"):
            ngshard.write_skeletons(tmp_path / "a", items)
    items[k] = (v, e, a)
    with pytest.raises(ValueError, match=f"key {k} given twice"):
        ngshard.write_skeletons(tmp_path / "b", [*items.items(), (k, items[k])])


@pytest.mark.parametrize("case", ["cv_skeletons_sharded", "cv_skeletons_unsharded"])
def test_reads_what_cloud_volume_wrote(case):
    """Fixtures written by cloud-volume (tools/make_layer_fixtures.py): the same skeletons as
    cloud-volume's reader returned, in nm."""
    root = FIXTURES / case
    expected = json.loads((root / "expected.json").read_text())
    layer = ngshard.open(root / "skeletons")
    assert (layer.sharding is not None) == case.endswith("_sharded")
    assert sorted(map(int, expected)) == layer.keys_array().tolist()
    got = layer.get_many([int(k) for k in expected], transform=True)
    for k, want in expected.items():
        s = got[int(k)]
        np.testing.assert_allclose(s.vertices, np.reshape(want["vertices"], (-1, 3)),
                                   rtol=1e-6)
        np.testing.assert_array_equal(s.edges, np.reshape(want["edges"], (-1, 2)))
        np.testing.assert_array_equal(s.radius, want["radius"])
        np.testing.assert_array_equal(s.attributes["vertex_types"], want["vertex_types"])


def test_tensorstore_reads_the_keys(tmp_path):
    ts = pytest.importorskip("tensorstore")
    items = sample(40, seed=2)
    layer = ngshard.write_skeletons(tmp_path / "sk", items)
    store = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                             "base": f"file://{tmp_path / 'sk'}/",
                             "metadata": layer.info["sharding"]}).result(timeout=PEER_TIMEOUT)
    raw = layer.store.get_many(list(items))
    for k in items:
        got = store.read(int(k).to_bytes(8, "big")).result(timeout=PEER_TIMEOUT)
        assert got.state == "value" and bytes(got.value) == raw[k]


def test_cloud_volume_reads_ngshard_skeletons(tmp_path):
    """cloud-volume (a child process) reads the layer: vertices transformed, attributes."""
    root = volume_root(tmp_path, skeletons="skel")
    items = {k: (v, e, {"radius": a["radius"],
                        "vertex_types": np.arange(len(v), dtype=np.uint8)})
             for k, (v, e, a) in sample(30, seed=3).items()}
    ngshard.write_skeletons(root / "skel", items, transform=TRANSFORM)
    got = read_skeletons(root, list(items))
    for k, (v, e, attrs) in items.items():
        s = got[k]
        np.testing.assert_allclose(s["vertices"], v * [2, 2, 4] + [10, 20, 30], rtol=1e-5)
        np.testing.assert_array_equal(s["edges"], e)
        np.testing.assert_array_equal(s["radius"], attrs["radius"])
        np.testing.assert_array_equal(s["vertex_types"], attrs["vertex_types"])
