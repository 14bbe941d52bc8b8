"""ngshard.mesh and ngshard.skeletonize beside igneous (``mesh forge --sharded`` + ``mesh
merge-sharded``, ``skeleton forge --sharded`` + ``skeleton merge-sharded`` on a LocalTaskQueue,
tools/igneous_run.py) on the same segmentations, with boxes of the same size: cloud-volume
reads ngshard's layers as ngshard does; per segment the surface area and enclosed volume of
ngshard's mesh are within 2% of igneous' and of one zmesh mesh of the whole volume, and it
is closed (no crack where the boxes meet); skeleton cable length is within 5% of igneous'.

igneous runs with ``--skip-simplify`` here: its default simplification (40 nm of error at
4 x 4 x 8 nm voxels) moves small segments' areas and volumes by up to 5%, and ngshard's LOD 0
is not simplified. TEASAR parameters are igneous' (scale 4, const 10, its soma settings);
the per-box dust threshold and minimum cable length are 0 on both sides (igneous' 1000 voxels
and 1000 nm would drop every tube of this small volume)."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from peers import run_peer
from segment_helpers import (
    RESOLUTION,
    WANDERER,
    blobs,
    cable_length,
    measures,
    neurites,
    tube,
    wander,
    whole_volume_meshes,
    write_segmentation,
)

import ngshard

pytest.importorskip("zmesh")
pytest.importorskip("kimimaro")

TOOLS = Path(__file__).resolve().parents[2] / "tools"
#: igneous' ``skeleton forge`` defaults (its CLI's), as ngshard's teasar options.
IGNEOUS_TEASAR = {"scale": 4, "const": 10, "soma_detection_threshold": 1100,
                  "soma_acceptance_threshold": 3500, "soma_invalidation_scale": 1.0,
                  "soma_invalidation_const": 300}
BOX = 32

PEER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from cloudvolume import CloudVolume
from igneous_run import run

mine, theirs, ids = sys.argv[2:4], sys.argv[4:6], json.loads(sys.argv[6])
box, teasar = int(sys.argv[7]), json.loads(sys.argv[8])
run(theirs[0], "mesh", box, 1, {"simplification": False})
run(theirs[1], "skeleton", box, 1, {"teasar": teasar, "dust": 0, "min_cable_length": 0})

def read(mesh_seg, skel_seg):
    meshes = CloudVolume("file://" + mesh_seg, progress=False).mesh.get(ids["mesh"])
    skels = CloudVolume("file://" + skel_seg, progress=False).skeleton.get(ids["skel"])
    return {"meshes": {str(k): [m.vertices.tolist(), m.faces.tolist()]
                       for k, m in meshes.items()},
            "skeletons": {str(s.id): [s.vertices.tolist(), s.edges.tolist(),
                                      s.radius.tolist()] for s in skels}}

print(json.dumps({"ngshard": read(*mine), "igneous": read(*theirs)}))
"""


def _with_wanderer(labels: np.ndarray) -> np.ndarray:
    tube(labels, WANDERER, wander(labels.shape, 3), 2.5)
    return labels


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """Both segmentations meshed and skeletonized by ngshard and by igneous, and what
    cloud-volume reads of each."""
    root = tmp_path_factory.mktemp("igneous")
    shapes = _with_wanderer(blobs())  # a filler label touches every box
    tubes = _with_wanderer(neurites())
    for name, labels in (("shapes", shapes), ("tubes", tubes)):
        write_segmentation(root / name, labels)
        shutil.copytree(root / name, root / f"{name}-igneous")
    with ThreadPoolExecutor(2) as pool:
        ngshard.mesh(root / "shapes", box=BOX, executor=pool, progress=False)
        ngshard.skeletonize(root / "tubes", box=BOX, teasar=IGNEOUS_TEASAR, executor=pool,
                            progress=False)
    ids = {"mesh": [int(i) for i in np.unique(shapes) if i],
           "skel": [int(i) for i in np.unique(tubes) if i]}
    out = run_peer(PEER, TOOLS, root / "shapes", root / "tubes", root / "shapes-igneous",
                   root / "tubes-igneous", json.dumps(ids), BOX, json.dumps(IGNEOUS_TEASAR))
    return root, shapes, tubes, json.loads(out.stdout)


def test_cloud_volume_reads_ngshards_layers(compared):
    root, shapes, tubes, read = compared
    meshes, skeletons = ngshard.open(root / "shapes/mesh"), ngshard.open(root / "tubes/skeletons")
    assert sorted(map(int, read["ngshard"]["meshes"])) == \
        sorted(ngshard.open_kv(root / "shapes/mesh").keys_array().tolist())
    for k, (vertices, faces) in read["ngshard"]["meshes"].items():
        mine = meshes.get(int(k))
        assert len(faces) == len(mine.faces)
        np.testing.assert_allclose(np.sort(np.array(vertices), axis=0),
                                   np.sort(mine.vertices, axis=0), atol=1e-3)
    assert sorted(map(int, read["ngshard"]["skeletons"])) == [101, 102, 200, WANDERER]
    for k, (vertices, edges, radius) in read["ngshard"]["skeletons"].items():
        mine = skeletons.get(int(k))
        np.testing.assert_allclose(vertices, mine.vertices)
        np.testing.assert_array_equal(edges, mine.edges)
        np.testing.assert_allclose(radius, mine.attributes["radius"])


def test_meshes_match_igneous_and_the_whole_volume_without_cracks(compared):
    _, shapes, _, read = compared
    whole = whole_volume_meshes(shapes)
    assert sorted(read["igneous"]["meshes"]) == sorted(read["ngshard"]["meshes"]) == \
        sorted(map(str, whole))
    for k, reference in whole.items():
        area, volume, open_edges = measures(reference.vertices, reference.faces)
        a, v, o = measures(*read["ngshard"]["meshes"][str(k)])
        ia, iv, io = measures(*read["igneous"]["meshes"][str(k)])
        for other_a, other_v in ((area, volume), (ia, iv)):
            assert abs(a - other_a) <= 0.02 * other_a, (k, a, other_a)
            assert abs(v - other_v) <= 0.02 * abs(other_v), (k, v, other_v)
        assert o == open_edges == io == 0, (k, o, open_edges, io)  # closed across boxes


def test_skeleton_cable_length_matches_igneous(compared):
    _, _, tubes, read = compared
    assert sorted(read["igneous"]["skeletons"]) == sorted(read["ngshard"]["skeletons"])
    for k, (vertices, edges, _) in read["ngshard"]["skeletons"].items():
        length = cable_length(vertices, edges)
        theirs = cable_length(*read["igneous"]["skeletons"][k][:2])
        assert abs(length - theirs) <= 0.05 * theirs, (k, length, theirs)
        # in the layer's coordinates (nm, voxel_offset included), as igneous places them
        voxel = np.floor(np.array(vertices) / RESOLUTION - [10, -20, 30]).astype(int)
        inside = tubes[tuple(np.clip(voxel, 0, np.array(tubes.shape) - 1).T)] == int(k)
        assert inside.mean() > 0.9
