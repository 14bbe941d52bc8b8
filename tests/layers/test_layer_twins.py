"""The unsharded files of skeleton, mesh and annotation layers stored as compressed twins, as
cloud-files writes them with ``compress=``: the fixtures cloud-files re-put from cloud-volume's
and igneous' layers (tools/make_cloudvolume_volume_fixtures.py) read as the plain originals,
and ngshard's writers take ``compress=`` for unsharded layers (and refuse it for sharded)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import ngshard
from ngshard import SpecError

pytest.importorskip("DracoPy")
from meshdata import lods  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "layers"
SUFFIX = {"gzip": ".gz", "br": ".br", "zstd": ".zstd"}


def suffixes(folder: Path) -> set[str]:
    return {n[len(n.split(".")[0]):] for n in os.listdir(folder) if n != "info"}


def test_skeletons_stored_as_brotli_twins():
    """(Before: none of them found.)"""
    expected = json.loads((FIXTURES / "cv_skeletons_unsharded" / "expected.json").read_text())
    folder = FIXTURES / "cv_skeletons_br" / "skeletons"
    assert suffixes(folder) == {".br"}
    layer = ngshard.open(folder)
    assert layer.keys_array().tolist() == sorted(map(int, expected))
    got = layer.get_many([int(k) for k in expected], transform=True)
    for k, want in expected.items():
        np.testing.assert_allclose(got[int(k)].vertices, np.reshape(want["vertices"], (-1, 3)),
                                   rtol=1e-6)
        np.testing.assert_array_equal(got[int(k)].edges, np.reshape(want["edges"], (-1, 2)))


def test_multiresolution_manifests_stored_as_brotli_twins():
    expected = np.load(FIXTURES / "ig_meshes_unsharded" / "expected.npz")
    folder = FIXTURES / "ig_meshes_unsharded_br" / "mesh"
    assert suffixes(folder) == {"", ".index.br"}
    layer = ngshard.open(folder)
    ids = sorted({int(name.split("_")[0]) for name in expected.files})
    assert layer.keys_array().tolist() == ids
    got = layer.get_many(ids, lod="all")
    for name in expected.files:
        k, lod, what = name.split("_")
        mesh = got[int(k)][int(lod)]
        if what == "v":
            np.testing.assert_allclose(mesh.vertices, expected[name], rtol=1e-5, atol=1e-3)
        else:
            np.testing.assert_array_equal(mesh.faces, expected[name])


def _triangles(corners: np.ndarray) -> list:
    rows = np.round(corners.astype(np.float64), 3).tolist()
    return sorted(tuple(sorted(map(tuple, t))) for t in rows)


def test_legacy_meshes_stored_as_zstd_twins():
    """Manifests and fragments, every one a ``.zstd`` twin."""
    expected = np.load(FIXTURES / "ig_meshes_legacy" / "expected.npz")
    folder = FIXTURES / "ig_meshes_legacy_zstd" / "mesh"
    assert {n.rsplit(".", 1)[-1] for n in os.listdir(folder) if n != "info"} == {"zstd"}
    layer = ngshard.open(folder)
    ids = sorted({int(name.split("_")[0]) for name in expected.files})
    assert layer.keys_array().tolist() == ids
    for k in ids:
        mesh = layer.get(k)
        want = expected[f"{k}_0_v"][expected[f"{k}_0_f"]]
        assert _triangles(mesh.vertices[mesh.faces]) == _triangles(want)


def test_legacy_meshes_of_twins_without_an_info(tmp_path):
    """A directory of ``<id>:0`` manifests is a legacy mesh layer, twins or not."""
    shutil.copytree(FIXTURES / "ig_meshes_legacy_zstd" / "mesh", tmp_path / "m")
    os.remove(tmp_path / "m" / "info")
    layer = ngshard.open(tmp_path / "m")
    assert isinstance(layer, ngshard.LegacyMeshes) and len(layer) == 3


SKELETONS = {k: (np.arange(3 * k, dtype=np.float32).reshape(k, 3),
                 np.array([[i, i + 1] for i in range(k - 1)], np.uint32).reshape(-1, 2))
             for k in range(1, 9)}


@pytest.mark.parametrize("compress", ["gzip", "br", "zstd"])
def test_writers_take_compress_for_unsharded_layers(tmp_path, compress):
    suffix = SUFFIX[compress]
    skel = ngshard.write_skeletons(tmp_path / "s", SKELETONS, sharding=None, compress=compress)
    assert suffixes(tmp_path / "s") == {suffix}
    assert skel.keys_array().tolist() == sorted(SKELETONS)
    for k, (v, e) in SKELETONS.items():
        got = ngshard.open(tmp_path / "s").get(k)
        np.testing.assert_array_equal(got.vertices, v)
        np.testing.assert_array_equal(got.edges, e)

    items = {k * 10 + 1: lods(k) for k in (1, 2)}
    ngshard.write_meshes(tmp_path / "m", items, sharding=None, compress=compress)
    assert suffixes(tmp_path / "m") == {"", f".index{suffix}"}  # fragments stay plain
    plain = ngshard.write_meshes(tmp_path / "m0", items, sharding=None)
    twin = ngshard.open(tmp_path / "m")
    for k in items:
        a, b = twin.get(k, lod=-1), plain.get(k, lod=-1)
        np.testing.assert_array_equal(a.vertices, b.vertices)

    legacy = {k: v[0] for k, v in items.items()}
    ngshard.write_legacy_meshes(tmp_path / "l", legacy, compress=compress)
    names = {n.split(":", 1)[1] for n in os.listdir(tmp_path / "l") if n != "info"}
    assert names == {"0", f"0:0{suffix}"}  # as igneous: the fragments, not the manifests
    for k, (v, f) in legacy.items():
        got = ngshard.open(tmp_path / "l").get(k)
        np.testing.assert_allclose(got.vertices, v.astype(np.float32))
        np.testing.assert_array_equal(got.faces, f)

    points = np.random.default_rng(3).uniform(0, 100, (50, 3))
    ann = ngshard.write_annotations(tmp_path / "a", "point", points, sharding=None,
                                    relationships={"seg": np.arange(50) % 4},
                                    compress=compress)
    for index in ("by_id", "rel_seg", "spatial0"):
        assert suffixes(tmp_path / "a" / index) == {suffix}
    back = ngshard.open(tmp_path / "a")
    assert back.keys_array().tolist() == list(range(50))
    np.testing.assert_allclose(back.get(7).geometry, points[7].astype(np.float32))
    assert len(back.query()) == 50 and len(back.related("seg", 3)) == len(ann.related("seg", 3))


def test_compress_is_refused_for_sharded_layers_and_checked(tmp_path):
    points = np.zeros((3, 3))
    writers = [lambda **kw: ngshard.write_skeletons(tmp_path / "s", SKELETONS, **kw),
               lambda **kw: ngshard.write_meshes(tmp_path / "m", {1: lods(1)}, **kw),
               lambda **kw: ngshard.write_legacy_meshes(tmp_path / "l", {1: lods(1)[0]}, **kw),
               lambda **kw: ngshard.write_annotations(tmp_path / "a", "point", points, **kw)]
    for write in writers:
        with pytest.raises(SpecError, match="data_encoding"):
            write(sharding="auto", compress="gzip")
        with pytest.raises(SpecError, match="'gzip', 'br', 'zstd'"):
            write(sharding=None, compress="lzma")
    assert not any((tmp_path / n).exists() for n in "smla")


def test_a_layer_file_twin_that_does_not_decode_is_named(tmp_path):
    shutil.copytree(FIXTURES / "cv_skeletons_br", tmp_path / "s")
    folder = tmp_path / "s" / "skeletons"
    name = sorted(n for n in os.listdir(folder) if n.endswith(".br"))[0]
    (folder / name).write_bytes(b"\x1b\x2f not brotli")
    with pytest.raises(ngshard.CorruptDataError, match=name.replace(".", r"\.")):
        ngshard.open(folder).get(int(name.split(".")[0]))
