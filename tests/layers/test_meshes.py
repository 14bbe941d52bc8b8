"""Multi-resolution meshes: written and read back in both layouts (the octree, cuts,
quantization and Z-curve order checked), igneous' meshes read as cloud-volume reads them,
cloud-volume reading ours (a child process), and the fragment data that lies unindexed
before each manifest kept through updates and compaction."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import ngshard
from ngshard.layers.mesh_codec import Manifest, decode_fragment, unindexed_sizes
from ngshard.layers.mesh_octree import zorder
from ngshard.storage import open_storage

pytest.importorskip("DracoPy")
from cloudvolume_peer import read_meshes, volume_root  # noqa: E402
from meshdata import area, lods  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "layers"
ITEMS = {k * 1000 + 7: lods(k) for k in range(1, 7)}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    path = tmp_path_factory.mktemp("meshes") / "sharded"
    ngshard.write_meshes(path, ITEMS, durable=False)
    return path


@pytest.mark.parametrize("bits, sharding", [(16, "auto"), (10, None)])
def test_round_trip(tmp_path, sharded, bits, sharding):
    path = sharded if sharding else tmp_path / "m"
    if not sharding:
        ngshard.write_meshes(path, ITEMS, sharding=None, vertex_quantization_bits=bits,
                             durable=False)
    layer = ngshard.open(path)
    assert isinstance(layer, ngshard.Meshes) and layer.vertex_quantization_bits == bits
    assert (layer.sharding is None) == (sharding is None)
    assert layer.keys_array().tolist() == sorted(ITEMS)
    got = layer.get_many(list(ITEMS) + [5], lod="all")
    assert set(got) == set(ITEMS)
    for k, want in ITEMS.items():
        manifest = layer.manifests([k])[k]
        assert manifest.num_lods == 3 and len(manifest.fragment_positions[2]) == 1
        extent = np.ptp(np.concatenate([v for v, _ in want]), axis=0)
        for lod, ((v, f), mesh) in enumerate(zip(want, got[k])):
            step = extent / 4 * 2**lod / (2**bits - 1)  # one quantization step
            lo, hi = mesh.vertices.min(axis=0), mesh.vertices.max(axis=0)
            np.testing.assert_allclose(lo, v.min(axis=0), atol=step.max())
            np.testing.assert_allclose(hi, v.max(axis=0), atol=step.max())
            assert area(mesh.vertices, mesh.faces) == pytest.approx(area(v, f), rel=2e-3)
            np.testing.assert_array_equal(mesh.faces, layer.get(k, lod=lod).faces)
            codes = zorder(manifest.fragment_positions[lod])
            assert (np.diff(codes.astype(np.int64)) > 0).all()  # Z-curve order, distinct


def test_each_fragment_stays_in_its_node_and_children(sharded):
    """No triangle crosses its fragment's box, nor (LOD > 0) the 2x2x2 grid inside it."""
    layer = ngshard.open(sharded)
    k = next(iter(ITEMS))
    manifest = layer.manifests([k])[k]
    data, _ = layer.kv.get_many_with_unindexed([k])[k]
    top = 2**16 - 1
    at = 0
    for lod in range(manifest.num_lods):
        for size in manifest.fragment_sizes[lod].tolist():
            points, faces = decode_fragment(bytes(data[at:at + size]), "test")
            at += size
            assert points.min() >= 0 and points.max() <= top
            if lod:
                half = np.floor(points[faces] / (top / 2) - 1e-9).clip(0, 1)
                lo, hi = half.min(axis=1), half.max(axis=1)
                touching = np.isclose(points[faces] % (top / 2), 0, atol=1).any(axis=1)
                assert ((lo == hi) | touching).all()
    assert at == len(data)


def test_reads_what_igneous_wrote():
    """igneous' sharded and unsharded multi-resolution meshes (tools/make_mesh_fixtures.py)
    read as cloud-volume read them: the same vertices (nm) and faces, LOD by LOD."""
    for case in ("ig_meshes_sharded", "ig_meshes_unsharded"):
        expected = np.load(FIXTURES / case / "expected.npz")
        layer = ngshard.open(FIXTURES / case / "mesh")
        assert isinstance(layer, ngshard.Meshes)
        ids = sorted({int(name.split("_")[0]) for name in expected.files})
        got = layer.get_many(ids, lod="all")
        for name in expected.files:
            k, lod, what = name.split("_")
            mesh = got[int(k)][int(lod)]
            want = expected[name]
            if what == "v":
                np.testing.assert_allclose(mesh.vertices, want, rtol=1e-5, atol=1e-3)
            else:
                np.testing.assert_array_equal(mesh.faces, want)


def test_reads_igneous_legacy_meshes():
    expected = np.load(FIXTURES / "ig_meshes_legacy" / "expected.npz")
    layer = ngshard.open(FIXTURES / "ig_meshes_legacy" / "mesh")
    assert isinstance(layer, ngshard.LegacyMeshes)
    for k in {int(name.split("_")[0]) for name in expected.files}:
        mesh = layer.get(k)
        # cloud-volume merges the vertices fragments share: compare the triangles
        want = expected[f"{k}_0_v"][expected[f"{k}_0_f"]]
        assert _triangles(mesh.vertices[mesh.faces]) == _triangles(want)


def _triangles(corners: np.ndarray) -> list:
    """Triangles as sorted tuples of rounded corners, sorted: geometry without numbering."""
    rows = np.round(corners.astype(np.float64), 3).tolist()
    return sorted(tuple(sorted(map(tuple, t))) for t in rows)


@pytest.mark.parametrize("sharding", [None, "auto"])
def test_legacy_round_trip(tmp_path, sharding):
    items = {k: v[0] for k, v in ITEMS.items()}
    ngshard.write_legacy_meshes(tmp_path / "l", items, sharding=sharding, durable=False)
    layer = ngshard.open(tmp_path / "l")
    assert layer.keys_array().tolist() == sorted(items)
    for k, (v, f) in items.items():
        mesh = layer.get(k)
        np.testing.assert_allclose(mesh.vertices, v.astype(np.float32))
        np.testing.assert_array_equal(mesh.faces, f)


def _all(layer):
    got = layer.get_many(layer.keys_array(), lod="all")
    return {k: [(m.vertices.tobytes(), m.faces.tobytes()) for m in ms] for k, ms in got.items()}


@pytest.mark.parametrize("strategy", ["append", "rewrite"])
def test_updates_and_compaction_keep_the_fragments(tmp_path, sharded, strategy):
    """Deleting meshes (an append leaves garbage, a rewrite copies the shard) and compacting
    keep every other segment's fragment data with its manifest; the garbage goes, and a
    shard with none (a mesh shard's unindexed fragments are no garbage) is not rewritten."""
    path = tmp_path / "m"
    shutil.copytree(sharded, path)
    before = _all(ngshard.open(path))
    size = sum(p.stat().st_size for p in path.glob("*.shard"))
    with pytest.raises(ngshard.SpecError, match="mesh fragments"):
        ngshard.open_kv(path, mode="r+")  # without unindexed= its rewrites would drop them
    gone = sorted(ITEMS)[:2]
    ratio = None if strategy == "append" else 0.5  # rewrite: decides to compact at once
    with ngshard.open_kv(path, mode="r+", unindexed=unindexed_sizes, strategy=strategy,
                         compact_ratio=ratio) as kv:
        for k in gone:
            del kv[k]
    kv = ngshard.open_kv(path, mode="r+", unindexed=unindexed_sizes)
    plan = kv.compact()
    # the deleted segments' fragments are garbage either way (the rewrite, not seeing them,
    # judged the shard not worth compacting and copied its data region as it was)
    assert len(plan.shards) == 1
    assert sum(p.stat().st_size for p in path.glob("*.shard")) < size
    after = _all(ngshard.open(path))
    assert after == {k: v for k, v in before.items() if k not in gone}


def _generations(path: Path) -> dict[str, object]:
    storage = open_storage(path)
    return {p.name: storage.stat(p.name).generation for p in path.glob("*.shard")}


def test_compaction_rewrites_only_the_shards_with_garbage(tmp_path):
    """Four shards; compacting a fresh layer rewrites none (each shard's generation stays);
    after appends delete a segment, only its shard is rewritten (smaller, the rest of its
    fragments intact) and the other shards keep their generations."""
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip",
            "data_encoding": "raw"}
    items = {k: lods(k % 7) for k in range(1, 17)}  # identity hash: 4 keys a shard
    path = tmp_path / "m"
    layer = ngshard.write_meshes(path, items, sharding=spec, durable=False)
    before, generations = _all(layer), _generations(path)
    assert len(generations) == 4
    kv = ngshard.open_kv(path, mode="r+", unindexed=unindexed_sizes, strategy="append",
                         compact_ratio=None)
    assert kv.compact().shards == ()
    assert _generations(path) == generations
    del kv[6]
    kv.commit()
    shard = kv.spec.shard_filename(int(kv.spec.locate_one(6)[0]))
    assert [p.name for p in kv.compact().shards] == [shard]
    after = _generations(path)
    assert after[shard] != generations[shard]
    assert {n: g for n, g in after.items() if n != shard} == \
        {n: g for n, g in generations.items() if n != shard}
    assert _all(ngshard.open(path)) == {k: v for k, v in before.items() if k != 6}


def test_compacting_igneous_shards_keeps_their_fragments(tmp_path):
    """igneous' shard, a segment deleted by an append, compacted: the other segments'
    fragments (laid out as igneous lays them) are copied with their manifests."""
    path = tmp_path / "mesh"
    shutil.copytree(FIXTURES / "ig_meshes_sharded" / "mesh", path)
    before = _all(ngshard.open(path))
    kv = ngshard.open_kv(path, mode="r+", unindexed=unindexed_sizes, strategy="append",
                         compact_ratio=None)
    assert kv.compact().shards == ()  # igneous leaves no garbage
    del kv[11]
    kv.commit()
    assert len(kv.compact().shards) == 1
    assert _all(ngshard.open(path)) == {k: v for k, v in before.items() if k != 11}


def test_manifest_round_trip():
    m = Manifest(np.array([1, 2, 3], np.float32), np.zeros(3, np.float32),
                 np.array([1, 2], np.float32), np.zeros((2, 3)),
                 [np.array([[0, 0, 0], [1, 0, 0]]), np.array([[0, 0, 0]])],
                 [np.array([5, 6]), np.array([7])])
    again = Manifest.from_bytes(m.to_bytes(), "test")
    assert again.total_size == 18 and again.lod_range(1) == (11, 18)
    np.testing.assert_array_equal(again.fragment_positions[0], [[0, 0, 0], [1, 0, 0]])


def test_cloud_volume_reads_ngshard_meshes(tmp_path):
    """cloud-volume's sharded and unsharded multi-level readers return, LOD by LOD, the
    vertices and faces ngshard reads."""
    root = volume_root(tmp_path, mesh="mesh")
    for sharding in ("auto", None):
        shutil.rmtree(root / "mesh", ignore_errors=True)
        ours = ngshard.write_meshes(root / "mesh", ITEMS, sharding=sharding,
                                    transform=[8, 0, 0, 0, 0, 8, 0, 0, 0, 0, 40, 0],
                                    durable=False)
        for lod, theirs in enumerate(read_meshes(root, list(ITEMS), lods=range(3))):
            assert sorted(theirs) == sorted(ITEMS)
            for k in ITEMS:
                mine = ours.get(k, lod=lod)
                np.testing.assert_allclose(theirs[k][0], mine.vertices, rtol=1e-5)
                np.testing.assert_array_equal(theirs[k][1], mine.faces)


def test_spilled_or_held_a_layer_has_the_same_shards(tmp_path):
    """Fragments and manifests held in memory or spilled past a small buffer: the same shard
    files (each manifest right after its fragments, in the order given), which tensorstore
    reads as the manifests alone."""
    ts = pytest.importorskip("tensorstore")
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
            "preshift_bits": 0, "minishard_bits": 1, "shard_bits": 1,
            "minishard_index_encoding": "gzip", "data_encoding": "raw"}
    held = ngshard.write_meshes(tmp_path / "held", ITEMS, sharding=spec, durable=False)
    ngshard.write_meshes(tmp_path / "spilled", ITEMS, sharding=spec, buffer_bytes=2000,
                         durable=False)
    shards = sorted(p.name for p in (tmp_path / "held").glob("*.shard"))
    assert len(shards) == 2
    for name in shards:
        assert (tmp_path / "held" / name).read_bytes() == \
            (tmp_path / "spilled" / name).read_bytes()
    t = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "metadata": spec,
                         "base": f"file://{tmp_path / 'spilled'}/"}).result(timeout=30)
    manifests = {k: held.kv[k] for k in ITEMS}
    assert {k: t.read(k.to_bytes(8, "big")).result(timeout=30).value for k in ITEMS} == \
        manifests


def test_every_kind_with_unindexed_entries_has_their_measure():
    """The layers supply the measure of the unindexed entries of each kind that keeps some
    (ngshard.kinds says which): what a CLI or layer opening such a store for writing uses."""
    from ngshard import kinds
    from ngshard.layers.dispatch import unindexed_sizes as registered

    assert kinds.UNINDEXED
    for kind in kinds.UNINDEXED:
        assert registered({"@type": kind, "sharding": {}}) is unindexed_sizes
    for doc in ({"@type": kinds.SKELETONS}, {"scales": []}, {"sharding": {}}, None):
        assert registered(doc) is None
