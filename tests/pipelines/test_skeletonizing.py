"""ngshard.skeletonize: skeletons made over task boxes and joined have, per segment, the
cable length of kimimaro's over the whole volume (within 5%), one piece per connected label,
radii and vertex types; the layer is named in the segmentation's info. A Dask LocalCluster
makes byte for byte what the local process pool makes (meshes and skeletons). (igneous and
cloud-volume beside them: test_igneous.py.)"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from convert_helpers import files
from segment_helpers import (
    RESOLUTION,
    SPHERE,
    TUBE,
    blobs,
    cable_length,
    components,
    label_zarr,
    measures,
    neurites,
    tube,
    write_segmentation,
)

import ngshard

kimimaro = pytest.importorskip("kimimaro")
TEASAR = {"scale": 4, "const": 40}


@pytest.fixture(scope="module")
def labels():
    return neurites()


@pytest.fixture(scope="module")
def skeletonized(tmp_path_factory, labels):
    seg = write_segmentation(tmp_path_factory.mktemp("skel") / "seg", labels)
    with ThreadPoolExecutor(2) as pool:
        stats = ngshard.skeletonize(seg, box=32, teasar=TEASAR, executor=pool,
                                    progress=False)
    return seg, stats


def test_skeletons_match_kimimaro_over_the_whole_volume(skeletonized, labels):
    seg, stats = skeletonized
    assert stats == {**stats, "boxes": 3 * 3 * 2, "segments": 3, "attached": 1}
    assert json.loads((seg / "info").read_text())["skeletons"] == "skeletons"
    layer = ngshard.open(seg / "skeletons")
    assert [a.id for a in layer.vertex_attributes] == ["radius", "vertex_types"]
    whole = kimimaro.skeletonize(labels, teasar_params=TEASAR, anisotropy=RESOLUTION,
                                 dust_threshold=0, progress=False)
    assert sorted(whole) == [101, 102, 200]
    for label, reference in whole.items():
        got = layer.get(label)
        expected = cable_length(reference.vertices, reference.edges)
        length = cable_length(got.vertices, got.edges)
        assert abs(length - expected) <= 0.05 * expected, (label, length, expected)
        assert components(len(got.vertices), got.edges) == 1  # joined across boxes
        assert len(got.edges) == len(got.vertices) - 1  # a tree
        radius = got.attributes["radius"]
        assert radius.shape == (len(got.vertices),) and (radius > 0).all()
        # placed in the layer's coordinates: inside the label's voxels, in nm
        voxel = np.floor(got.vertices / np.array(RESOLUTION) - [10, -20, 30]).astype(int)
        inside = labels[tuple(np.clip(voxel, 0, np.array(labels.shape) - 1).T)] == label
        assert inside.mean() > 0.9


def test_ids_and_postprocessing(skeletonized, tmp_path):
    seg, _ = skeletonized
    with ThreadPoolExecutor(2) as pool:
        stats = ngshard.skeletonize(seg, tmp_path / "one", ids=[200], box=32,
                                    teasar=TEASAR, executor=pool, progress=False,
                                    tick_threshold=400)
    assert stats["segments"] == 1 and stats["attached"] == 0
    trunk = ngshard.open(tmp_path / "one").get(200)
    ends = np.bincount(np.asarray(trunk.edges).ravel()) == 1
    assert ends.sum() == 2  # the branch (about 260 nm) is pruned as a tick


def test_dask_equals_local_pool(tmp_path):
    distributed = pytest.importorskip("distributed")
    seg = write_segmentation(tmp_path / "seg", blobs((64, 48, 40))[:, :, :])
    for name, run in (("mesh", ngshard.mesh), ("skel", ngshard.skeletonize)):
        run(seg, tmp_path / f"{name}-local", box=24, workers=2, progress=False,
            ids=[SPHERE, TUBE])
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    try:
        with distributed.Client(cluster) as client:
            for name, run in (("mesh", ngshard.mesh), ("skel", ngshard.skeletonize)):
                stats = run(seg, tmp_path / f"{name}-dask", box=24, progress=False,
                            executor=client.get_executor(), ids=[SPHERE, TUBE])
                assert stats["segments"] == 2 and stats["boxes"] > 4
    finally:
        cluster.close()
    for name in ("mesh", "skel"):
        local, remote = files(tmp_path / f"{name}-local"), files(tmp_path / f"{name}-dask")
        assert local == remote and len(local) >= 2



def test_edge_labels_and_bad_input(tmp_path):
    """The largest uint64 label filling whole boxes and touching every box, beside a tube,
    and the largest uint32 label: skeletons and closed meshes of each; an empty
    segmentation: layers of no segment; negative labels: refused, no layer visible."""
    top = np.uint64(2**64 - 1)
    labels = np.full((40, 30, 20), top, np.uint64)  # fills every box of 16 but those below
    tube(labels, 5, [[0, 15, 10], [39, 15, 10]], 2.5)
    small = np.zeros((24, 20, 18), np.uint32)
    small[3:20, 4:16, 2:16] = 2**32 - 1
    cases = (("top", labels, [int(top), 5]), ("u32", small, [2**32 - 1]),
             ("empty", np.zeros((20, 20, 20), np.uint64), []))
    with ThreadPoolExecutor(2) as pool:
        for name, data, ids in cases:
            seg = write_segmentation(tmp_path / name, data)
            skel = ngshard.skeletonize(seg, box=16, executor=pool, progress=False)
            meshed = ngshard.mesh(seg, box=16, executor=pool, progress=False)
            assert skel["segments"] == meshed["segments"] == len(ids), name
            assert sorted(ngshard.open_kv(seg / "skeletons").keys_array().tolist()) == \
                sorted(ngshard.open_kv(seg / "mesh").keys_array().tolist()) == sorted(ids)
            for label in ids:
                s = ngshard.open(seg / "skeletons").get(label)
                assert len(s.vertices) > 1 and len(s.edges)
                m = ngshard.open(seg / "mesh").get(label)
                assert measures(m.vertices, m.faces)[2] == 0, (name, label)  # closed
        label_zarr(tmp_path / "neg.zarr", -3)
        with pytest.raises(ngshard.SpecError, match="negative"):
            ngshard.skeletonize(tmp_path / "neg.zarr", tmp_path / "neg", box=16,
                                executor=pool, progress=False)
        assert not (tmp_path / "neg" / "info").exists()
