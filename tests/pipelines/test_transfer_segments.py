"""``ngshard.transfer`` of segment layers: skeletons and meshes between a file per segment
and shards, as tasks of the runner (one per output shard, on any executor, resumable);
legacy meshes into multi-resolution meshes; cloud-volume (a child process) reading every
result equal to the source."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from cloudvolume_peer import read_meshes, read_skeletons, volume_root
from convert_helpers import files

import ngshard

LAYERS = Path(__file__).parents[2] / "fixtures" / "layers"


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(2) as pool:
        yield pool



@pytest.mark.parametrize("name", ["cv_skeletons_unsharded", "cv_skeletons_br",
                                  "cv_skeletons_sharded"])
def test_cloudvolume_skeletons_between_layouts(tmp_path, name):
    src = ngshard.open(LAYERS / name / "skeletons")
    sharding = "none" if src.sharding is not None else "auto"
    stats = ngshard.transfer(LAYERS / name / "skeletons", tmp_path / "out", sharding=sharding,
                             progress=False)
    out = ngshard.open(tmp_path / "out")
    assert (out.sharding is None) == (sharding == "none")
    ids = src.keys_array()
    assert stats["chunks"] == len(ids) > 0
    assert sorted(out.keys_array().tolist()) == sorted(ids.tolist())
    for k in ids.tolist():  # the same encoded bytes, so the same skeletons
        assert out.store.get(k) == src.store.get(k)
        np.testing.assert_array_equal(out[k].vertices, src[k].vertices)
    assert json.loads((tmp_path / "out" / "info").read_text())["vertex_attributes"] == \
        src.info["vertex_attributes"]


@pytest.mark.parametrize("name", ["ig_meshes_unsharded", "ig_meshes_sharded"])
def test_igneous_meshes_between_layouts(tmp_path, name):
    src = ngshard.open(LAYERS / name / "mesh")
    sharding = "none" if src.sharding is not None else "auto"
    ngshard.transfer(LAYERS / name / "mesh", tmp_path / "out", sharding=sharding,
                     progress=False)
    out = ngshard.open(tmp_path / "out")
    ids = src.keys_array()
    assert (out.sharding is None) == (sharding == "none") and len(ids)
    assert out.encoded_many(ids) == src.encoded_many(ids)
    for k, m in src.get_many(ids).items():
        np.testing.assert_array_equal(out[k].vertices, m.vertices)


def _tetra(shift):
    v = np.array([[0, 0, 0], [10, 0, 0], [0, 10, 0], [0, 0, 10]], np.float32) + shift
    return v, np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]], np.uint32)


def test_meshes_between_layouts(tmp_path):
    items = {7: [_tetra(0), _tetra(5)], 2**40: [_tetra(100)]}
    ngshard.write_meshes(tmp_path / "files", items, sharding=None)
    ngshard.transfer(tmp_path / "files", tmp_path / "shards", progress=False)
    ngshard.transfer(tmp_path / "shards", tmp_path / "back", sharding="none",
                     progress=False)
    files, shards, back = (ngshard.open(tmp_path / n) for n in ("files", "shards", "back"))
    assert shards.sharding is not None and back.sharding is None
    for layer in (shards, back):
        assert layer.encoded_many(list(items)) == files.encoded_many(list(items))
        got = layer.get_many(list(items), lod="all")
        for k, lods in files.get_many(list(items), lod="all").items():
            for a, b in zip(lods, got[k]):
                np.testing.assert_array_equal(a.vertices, b.vertices)
    # igneous' legacy meshes, several fragment files per segment, into shards of one each
    src = ngshard.open(LAYERS / "ig_meshes_legacy" / "mesh")
    ngshard.transfer(LAYERS / "ig_meshes_legacy" / "mesh", tmp_path / "ig", progress=False)
    out = ngshard.open(tmp_path / "ig")
    assert out.sharding is not None
    for k, m in src.get_many(src.keys_array()).items():
        np.testing.assert_array_equal(out[k].faces.shape, m.faces.shape)
        np.testing.assert_array_equal(out[k].vertices, m.vertices)
    ngshard.write_legacy_meshes(tmp_path / "legacy", {3: _tetra(1)})
    ngshard.transfer(tmp_path / "legacy", tmp_path / "legacy_sharded", progress=False)
    legacy = ngshard.open(tmp_path / "legacy_sharded")
    assert legacy.sharding is not None
    np.testing.assert_array_equal(legacy[3].vertices, _tetra(1)[0])
    with pytest.raises(ngshard.SpecError, match="bbox"):
        ngshard.transfer(tmp_path / "files", tmp_path / "x", bbox=((0, 0, 0), (1, 1, 1)))




def _area(vertices, faces):
    v = np.asarray(vertices, np.float64)[np.asarray(faces, np.int64)]
    return float(np.linalg.norm(np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]), axis=1).sum()
                 / 2)


def _sorted(vertices):
    v = np.asarray(vertices, np.float64)
    return v[np.lexsort(v.T[::-1])]


@pytest.mark.parametrize("sharding", ["auto", "none"])
def test_legacy_meshes_become_multiresolution(tmp_path, pool, sharding):
    """igneous' legacy meshes (several fragment files per segment) as multi-resolution
    meshes: LOD 0 is the joined fragments (vertices up to quantization, the same area), the
    coarser levels zmesh's simplification of it; cloud-volume reads every level as ngshard
    does."""
    src = ngshard.open(LAYERS / "ig_meshes_legacy" / "mesh")
    root = volume_root(tmp_path, mesh="mesh")
    stats = ngshard.transfer(LAYERS / "ig_meshes_legacy" / "mesh", root / "mesh",
                             multires=True, sharding=sharding, executor=pool, progress=False)
    out = ngshard.open(root / "mesh")
    info = json.loads((root / "mesh" / "info").read_text())
    assert info["@type"] == "neuroglancer_multilod_draco"
    assert ("sharding" in info) == (sharding == "auto") and stats["chunks"] == 3
    ids = src.keys_array().tolist()
    theirs = read_meshes(root, ids, lods=range(3))
    for k, m in src.get_many(ids).items():
        lods = out.get_many([k], lod="all")[k]
        assert len(lods) == 3
        assert len(lods[2].faces) < len(lods[1].faces) < len(lods[0].faces)
        joined = np.unique(m.vertices, axis=0)
        assert len(lods[0].vertices) >= len(joined)  # (cut at the octree's nodes)
        step = (joined.max(0) - joined.min(0)) / (2**16 - 1)  # the quantization
        # every source vertex is one of LOD 0's, up to quantization (LOD 0 adds vertices
        # where the octree's nodes cut faces), and the surface's area is kept
        near = np.abs(joined[:, None, :] - lods[0].vertices[None, :, :]).max(axis=2).min(1)
        assert near.max() <= step.max() + 1e-3, k
        assert abs(_area(lods[0].vertices, lods[0].faces) - _area(m.vertices, m.faces)) \
            <= 0.01 * _area(m.vertices, m.faces)
        for lod in range(3):
            v, f = theirs[lod][k]
            assert len(f) == len(lods[lod].faces)
            np.testing.assert_allclose(_sorted(v), _sorted(lods[lod].vertices), atol=1e-3)


def test_multires_options_are_checked(tmp_path):
    with pytest.raises(ngshard.SpecError, match="legacy meshes only"):
        ngshard.transfer(LAYERS / "cv_skeletons_unsharded" / "skeletons", tmp_path / "x",
                         multires=True, progress=False)
    with pytest.raises(ngshard.SpecError, match="legacy meshes only"):
        ngshard.transfer(Path(__file__).parents[2] / "fixtures" / "cloudvolume_volumes" /
                         "raw_plain", tmp_path / "x", multires=True, progress=False)
    with pytest.raises(ngshard.SpecError, match="lods"):
        ngshard.transfer(LAYERS / "ig_meshes_legacy" / "mesh", tmp_path / "x", lods=2,
                         progress=False)


def test_cloud_volume_reads_transferred_segment_layers(tmp_path, pool):
    """Unsharded cloud-volume skeletons and igneous multi-resolution meshes transferred to
    shards, igneous' legacy meshes re-encoded: cloud-volume reads them equal to the
    source."""
    skel = ngshard.open(LAYERS / "cv_skeletons_unsharded" / "skeletons")
    root = volume_root(tmp_path, skeletons="skel", mesh="mesh")
    ngshard.transfer(LAYERS / "cv_skeletons_unsharded" / "skeletons", root / "skel",
                     executor=pool, progress=False)
    ids = skel.keys_array().tolist()
    source = shutil.copytree(LAYERS / "cv_skeletons_unsharded", tmp_path / "source")
    want, got = read_skeletons(source, ids), read_skeletons(root, ids)
    for k in ids:
        assert want[k].keys() == got[k].keys()
        for name in want[k]:
            np.testing.assert_array_equal(got[k][name], want[k][name])
        np.testing.assert_array_equal(got[k]["edges"], skel[k].edges)
    # (cloud-volume reads no sharded legacy meshes: legacy ones go to files, re-encoded
    # with their fragments joined; to shards as multi-resolution meshes, tested above)
    for name, lods, sharding in (("ig_meshes_legacy", (None,), "none"),
                                 ("ig_meshes_unsharded", (0, 1), "auto")):
        src = ngshard.open(LAYERS / name / "mesh")
        shutil.rmtree(root / "mesh", ignore_errors=True)
        ngshard.transfer(LAYERS / name / "mesh", root / "mesh", sharding=sharding,
                         executor=pool, progress=False)
        assert (ngshard.open(root / "mesh").sharding is None) == (sharding == "none")
        ids = src.keys_array().tolist()
        for lod, theirs in zip(lods, read_meshes(root, ids, lods=lods)):
            assert sorted(theirs) == sorted(ids)
            for k, m in src.get_many(ids, lod=lod or 0).items():
                v, f = theirs[k]
                assert len(f) == len(m.faces), (name, k)
                np.testing.assert_allclose(_sorted(v), _sorted(m.vertices), atol=1e-3)


def test_one_task_per_shard_interrupted_and_resumed(tmp_path, pool):
    from convert_helpers import Interrupting

    items = {k: (np.random.default_rng(k).uniform(0, 100, (20, 3)).astype(np.float32),
                 np.stack([np.arange(19), np.arange(1, 20)], 1).astype(np.uint32))
             for k in range(1, 400)}
    ngshard.write_skeletons(tmp_path / "files", items, sharding=None)
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
            "preshift_bits": 0, "minishard_bits": 2, "shard_bits": 3,
            "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    kw = {"sharding": json.dumps(spec), "progress": False}
    ref = ngshard.transfer(tmp_path / "files", tmp_path / "ref", executor=pool, **kw)
    assert ref["tasks"] == 8 and ref["chunks"] == len(items)
    with pytest.raises(RuntimeError, match="interrupted"):
        ngshard.transfer(tmp_path / "files", tmp_path / "out", executor=Interrupting(pool, 3),
                         **kw)
    assert not (tmp_path / "out" / "info").exists()  # the info last
    stats = ngshard.transfer(tmp_path / "files", tmp_path / "out", executor=pool, **kw)
    assert stats["skipped"] == 3 and stats["run"] == 5

    assert files(tmp_path / "out") == files(tmp_path / "ref")
    out = ngshard.open(tmp_path / "out")
    for k in (1, 200, 399):
        np.testing.assert_array_equal(out[k].vertices, items[k][0])


def test_command_line_multires(tmp_path):
    from ngshard.cli import main

    assert main(["transfer", str(LAYERS / "ig_meshes_legacy" / "mesh"), str(tmp_path / "m"),
                 "--multires", "--lods", "2", "--workers", "1", "-q"]) == 0
    out = ngshard.open(tmp_path / "m")
    assert out.sharding is not None and len(out.get_many([11], lod="all")[11]) == 2


def test_dask_equals_a_local_executor(tmp_path, pool):
    """The tasks of segment transfers (skeletons to shards, legacy meshes to multi-resolution
    ones) on a Dask LocalCluster: byte for byte a local executor's."""
    distributed = pytest.importorskip("distributed")
    sources = {"skel": (LAYERS / "cv_skeletons_unsharded" / "skeletons", {}),
               "mesh": (LAYERS / "ig_meshes_legacy" / "mesh", {"multires": True})}
    for name, (src, kw) in sources.items():
        ngshard.transfer(src, tmp_path / f"{name}-local", executor=pool, progress=False, **kw)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    try:
        with distributed.Client(cluster) as client:
            for name, (src, kw) in sources.items():
                ngshard.transfer(src, tmp_path / f"{name}-dask", progress=False,
                                 executor=client.get_executor(), **kw)
    finally:
        cluster.close()

    for name in sources:
        local, remote = files(tmp_path / f"{name}-local"), files(tmp_path / f"{name}-dask")
        assert local == remote and len(local) >= 2


def test_legacy_meshes_with_a_transform_are_not_moved_twice(tmp_path, pool):
    """Legacy meshes are read in model coordinates (their info's transform applied): the
    copy holds those coordinates, and no transform that would apply again."""
    src = shutil.copytree(LAYERS / "ig_meshes_legacy" / "mesh", tmp_path / "src")
    info = json.loads((src / "info").read_text())
    info["transform"] = [2, 0, 0, 5, 0, 2, 0, 0, 0, 0, 2, 0]
    (src / "info").write_text(json.dumps(info))
    ngshard.transfer(src, tmp_path / "out", sharding="none", executor=pool, progress=False)
    before, after = ngshard.open(src), ngshard.open(tmp_path / "out")
    for k, m in before.get_many(before.keys_array()).items():
        np.testing.assert_array_equal(after[k].vertices, m.vertices)
