"""ngshard.mesh: per segment, the multi-resolution mesh made over task boxes has the surface
area and enclosed volume of one zmesh mesh of the whole volume (within 2%) and is closed
across the boxes wherever that mesh is closed; the layer is named in the segmentation's
info; ids, bounding boxes, scales, legacy meshes; an interrupted run resumes; bad input is
refused with nothing half-written."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from convert_helpers import Interrupting
from peers import PEER_TIMEOUT
from segment_helpers import (
    CORE,
    CUBE,
    FILLER,
    RESOLUTION,
    SHELL,
    SPHERE,
    TUBE,
    blobs,
    label_zarr,
    measures,
    whole_volume_meshes,
    write_segmentation,
)

import ngshard

pytest.importorskip("zmesh")


@pytest.fixture(scope="module")
def labels():
    return blobs()


@pytest.fixture(scope="module")
def seg(tmp_path_factory, labels):
    return write_segmentation(tmp_path_factory.mktemp("mesh") / "seg", labels)


@pytest.fixture(scope="module")
def meshed(seg):
    with ThreadPoolExecutor(2) as pool:
        stats = ngshard.mesh(seg, box=32, executor=pool, progress=False)
    return seg, stats


@pytest.fixture(scope="module")
def whole(labels):
    return whole_volume_meshes(labels)


def test_meshes_match_one_whole_volume_mesh_and_are_closed(meshed, whole):
    seg, stats = meshed
    # 96 x 80 x 64 voxels padded by one: 3 x 3 x 2 boxes of 32 cells (a last box of one
    # cell joins the one before), as igneous tiles it
    assert stats == {**stats, "boxes": 3 * 3 * 2, "segments": 6, "skipped": 0,
                     "attached": 1}
    info = json.loads((seg / "info").read_text())
    assert info["mesh"] == "mesh"
    layer = ngshard.open(seg / "mesh")
    assert isinstance(layer, ngshard.Meshes)
    assert sorted(ngshard.open_kv(seg / "mesh").keys_array().tolist()) == \
        sorted([SPHERE, TUBE, CUBE, SHELL, CORE, FILLER])
    for label, reference in whole.items():
        area, volume, open_edges = measures(reference.vertices, reference.faces)
        assert open_edges == 0  # padded: every surface is closed
        got = layer.get(label)
        a, v, o = measures(got.vertices, got.faces)
        assert abs(a - area) <= 0.02 * area and abs(v - volume) <= 0.02 * abs(volume), \
            (label, a, area, v, volume)
        assert o == 0, (label, o)  # no crack where the boxes meet
        coarse = layer.get(label, lod=2)
        assert 0 < len(coarse.faces) < len(got.faces)
        a2, v2, _ = measures(coarse.vertices, coarse.faces)
        assert abs(v2 - volume) <= 0.05 * abs(volume)
    # the fragments of a segment crossing many boxes are many octree nodes
    assert len(layer.get(FILLER).vertices) > len(whole[FILLER].vertices) * 0.9


def test_vertices_are_placed_as_neuroglancer_draws_voxels(meshed, labels):
    """Voxel i spans [i, i + 1) (voxel_offset included) times the resolution: the surface
    of the cube in the far corner lies on its voxels' faces, the volume's far faces too."""
    seg, _ = meshed
    cube = ngshard.open(seg / "mesh").get(CUBE)
    res = np.array([4.0, 4.0, 8.0])
    offset = np.array([10, -20, 30])
    lo = (np.array([84, 68, 52]) + offset) * res
    hi = (np.array(labels.shape) + offset) * res
    np.testing.assert_allclose(cube.vertices.min(axis=0), lo, atol=0.01)
    np.testing.assert_allclose(cube.vertices.max(axis=0), hi, atol=0.01)


def test_ids_bbox_and_legacy(seg, labels, tmp_path):
    with ThreadPoolExecutor(2) as pool:
        stats = ngshard.mesh(seg, tmp_path / "some", ids=[SPHERE, TUBE], box=(48, 40, 64),
                             bbox=(10 + 30, -20, 30, 10 + 96, -20 + 80, 30 + 64), lods=2,
                             executor=pool, progress=False)
        assert stats["segments"] == 1 and stats["attached"] == 0  # the tube is outside
        sphere = ngshard.open(tmp_path / "some").get(SPHERE)
        box = np.zeros_like(labels)
        box[30:] = labels[30:]
        box[box != SPHERE] = 0
        reference = whole_volume_meshes(box)[SPHERE]
        area, volume, _ = measures(reference.vertices, reference.faces)
        a, v, o = measures(sphere.vertices, sphere.faces)
        assert o == 0 and abs(a - area) < 0.02 * area and abs(v - volume) < 0.02 * volume
        ngshard.mesh(seg, tmp_path / "legacy", ids=[TUBE], legacy=True, box=32,
                     executor=pool, progress=False)
    layer = ngshard.open(tmp_path / "legacy")
    assert isinstance(layer, ngshard.LegacyMeshes)
    tube = layer.get(TUBE)
    reference = whole_volume_meshes(np.where(labels == TUBE, labels, 0))[TUBE]
    a, v, o = measures(tube.vertices, tube.faces)
    area, volume, _ = measures(reference.vertices, reference.faces)
    assert o == 0 and abs(a - area) < 0.02 * area and abs(v - volume) < 0.02 * volume


def test_a_coarser_scale(tmp_path, labels):
    seg = write_segmentation(tmp_path / "seg", labels)
    vol = ngshard.open_volume(seg, mode="r+")
    vol.add_scale((2, 2, 1))
    with ThreadPoolExecutor(2) as pool:
        stats = ngshard.mesh(seg, scale=1, box=32, executor=pool, progress=False,
                             ids=[SPHERE])
    assert stats["segments"] == 1
    sphere = ngshard.open(seg / "mesh").get(SPHERE)
    _, volume, o = measures(sphere.vertices, sphere.faces)
    reference = whole_volume_meshes(labels)[SPHERE]
    _, expected, _ = measures(reference.vertices, reference.faces)
    assert o == 0 and abs(volume - expected) < 0.1 * expected


def test_interrupt_and_resume(seg, tmp_path):
    dst = tmp_path / "resumed"
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(RuntimeError, match="interrupted"):
            ngshard.mesh(seg, dst, box=32, executor=Interrupting(pool, 5), progress=False)
        assert not (dst / "info").exists()  # nothing half-made is visible as a layer
        bundles = sorted(p.name for p in (dst / ".ngshard-fragments").iterdir())
        assert len(bundles) == 5
        with pytest.raises(ngshard.ExistsError, match="unfinished"):
            ngshard.mesh(seg, dst, box=48, executor=pool, progress=False)  # another job
        stats = ngshard.mesh(seg, dst, box=32, executor=pool, progress=False)
        assert stats["skipped"] == 5 and stats["run"] == stats["boxes"] - 5 + \
            stats["shards"]
        again = ngshard.mesh(seg, tmp_path / "fresh", box=32, executor=pool,
                             progress=False)
    assert again["skipped"] == 0
    assert not (dst / ".ngshard-fragments").exists() and \
        not (dst / ".ngshard-convert").exists()
    assert {p.name: p.read_bytes() for p in dst.iterdir()} == \
        {p.name: p.read_bytes() for p in (tmp_path / "fresh").iterdir()}


def test_bad_input(tmp_path, seg):
    # an empty segmentation: a layer with no segment
    empty = write_segmentation(tmp_path / "empty", np.zeros((40, 30, 20), np.uint64))
    with ThreadPoolExecutor(2) as pool:
        stats = ngshard.mesh(empty, box=16, executor=pool, progress=False)
        assert stats["segments"] == 0 and stats["shards"] == 0
        assert len(ngshard.open_kv(empty / "mesh").keys_array()) == 0
        # negative labels (int64 zarr) cannot be segment ids
        label_zarr(tmp_path / "neg.zarr", -3)
        with pytest.raises(ngshard.SpecError, match="negative"):
            ngshard.mesh(tmp_path / "neg.zarr", tmp_path / "neg", box=16, executor=pool,
                         progress=False)
        assert not (tmp_path / "neg" / "info").exists()
        with pytest.raises(ngshard.SpecError, match="give a destination"):
            ngshard.mesh(tmp_path / "neg.zarr", progress=False)
        # a zarr array of labels is meshed as well
        label_zarr(tmp_path / "neg.zarr", 3)
        stats = ngshard.mesh(tmp_path / "neg.zarr", tmp_path / "pos", box=16, executor=pool,
                             progress=False)
        assert stats["segments"] == 1 and stats["attached"] == 0
        # an image is not labels; a layer already there is not replaced unasked
        image = ngshard.create_volume(tmp_path / "image", dtype="float32", shape=(8, 8, 8))
        image.commit()
        with pytest.raises(ngshard.SpecError, match="integers"):
            ngshard.mesh(tmp_path / "image", progress=False)
        with pytest.raises(ngshard.ExistsError):
            ngshard.mesh(empty, box=16, executor=pool, progress=False)
        with pytest.raises(ngshard.SpecError, match="bbox"):
            ngshard.mesh(seg, tmp_path / "x", bbox=(0, 0, 0, 5, 5, 5), progress=False)


def test_simplified_lod0_as_igneous_forge(seg, meshed, tmp_path):
    """simplify=100, max_error=40 nm (igneous' mesh forge defaults): LOD 0 has far fewer
    triangles than the marching cubes' mesh, and is still closed and about as large."""
    with ThreadPoolExecutor(2) as pool:
        ngshard.mesh(seg, tmp_path / "simple", ids=[SPHERE], box=32, lods=1, simplify=100,
                     max_error=40, executor=pool, progress=False)
    full = ngshard.open(meshed[0] / "mesh").get(SPHERE)
    simple = ngshard.open(tmp_path / "simple").get(SPHERE)
    assert len(simple.faces) < len(full.faces) / 4
    a, v, o = measures(simple.vertices, simple.faces)
    a0, v0, _ = measures(full.vertices, full.faces)
    assert o == 0 and abs(v - v0) <= 0.02 * v0 and abs(a - a0) <= 0.06 * a0
    with pytest.raises(ngshard.SpecError, match="simplify"):
        ngshard.mesh(seg, tmp_path / "bad", simplify=0, progress=False)


def test_simplification_is_igneous_forges(seg, labels, tmp_path):
    """LOD 0 simplified by 100 with 40 nm of error is zmesh's ``Mesher.get(label, 100, 40)``
    (what igneous' forge calls: the error in nm), not ``Mesher.simplify`` of the full mesh
    (which takes the error in half voxels, rounded down): in one box, the same triangles
    (the labels in Fortran order, as both read them: the order zmesh meets triangles in
    breaks its simplifier's ties)."""
    import zmesh

    with ThreadPoolExecutor(2) as pool:
        ngshard.mesh(seg, tmp_path / "one", ids=[SPHERE], box=128, lods=1, simplify=100,
                     max_error=40, executor=pool, progress=False)
    ours = ngshard.open(tmp_path / "one").get(SPHERE)
    mesher = zmesh.Mesher(RESOLUTION)
    mesher.mesh(np.asfortranarray(np.pad(np.where(labels == SPHERE, SPHERE, 0), 1)),
                close=False)
    forge = mesher.get(SPHERE, normals=False, reduction_factor=100, max_error=40)
    assert len(ours.faces) == len(forge.faces)
    a, v, o = measures(ours.vertices, ours.faces)
    a1, v1, _ = measures(forge.vertices, forge.faces)
    assert o == 0 and abs(a - a1) <= 1e-3 * a1 and abs(v - v1) <= 1e-3 * v1


IMPORTS = """
import json, sys
import ngshard
MODULES = ("zmesh", "DracoPy", "kimimaro")
def loaded():
    return [m for m in MODULES if m in sys.modules]
if __name__ == "__main__":
    seg, dst = sys.argv[1:3]
    steps = [loaded()]
    ngshard.mesh(seg, dst + "/mesh", box=48, lods=1, workers=2, progress=False)
    steps.append(loaded())
    ngshard.skeletonize(seg, dst + "/skeletons", box=48, workers=2, progress=False)
    print(json.dumps(steps + [loaded()]))
"""


def test_a_local_pool_imports_zmesh_and_kimimaro_once(seg, tmp_path):
    """``import ngshard`` loads neither zmesh, DracoPy nor kimimaro; a job of meshes (of
    skeletons) on a local pool imports zmesh and DracoPy (kimimaro) in this process before
    the workers fork, so that no worker imports them again (kimimaro: about a CPU second
    each)."""
    out = subprocess.run([sys.executable, "-c", IMPORTS, str(seg), str(tmp_path)],
                         capture_output=True, text=True, timeout=PEER_TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        [], ["zmesh", "DracoPy"], ["zmesh", "DracoPy", "kimimaro"]]
