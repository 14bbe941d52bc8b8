"""cloud-volume reading ngshard's layers back, in a child process of the peers' venv
(:func:`peers.run_peer`): the tests that compare never import cloud-volume, so they never
skip. Values come back through a ``.npz`` file beside the layer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from peers import run_peer

READ_IMAGES = """
import sys, numpy as np
from cloudvolume import CloudVolume
out = {}
for i, (url, mip) in enumerate(zip(sys.argv[2::2], sys.argv[3::2])):
    cv = CloudVolume(url, mip=int(mip), progress=False, fill_missing=False)
    out[str(i)] = np.asarray(cv[cv.bounds])
np.savez(sys.argv[1], **out)
"""

READ_MESHES = """
import sys, numpy as np
from cloudvolume import CloudVolume
cv = CloudVolume(sys.argv[1], progress=False)
ids = [int(i) for i in sys.argv[2].split(",")]
out = {}
for lod in map(int, sys.argv[3].split(",")):
    got = cv.mesh.get(ids, lod=lod) if lod >= 0 else cv.mesh.get(ids, fuse=False)
    for k, m in (got if isinstance(got, dict) else {ids[0]: got}).items():
        out[f"v{lod}_{int(k)}"], out[f"f{lod}_{int(k)}"] = m.vertices, m.faces
np.savez(sys.argv[4], **out)
"""

READ_SKELETONS = """
import sys, numpy as np
from cloudvolume import CloudVolume
cv = CloudVolume(sys.argv[1], progress=False)
out = {}
for s in cv.skeleton.get([int(i) for i in sys.argv[2].split(",")]):
    k = int(s.id)
    out[f"v{k}"], out[f"e{k}"], out[f"r{k}"] = s.vertices, s.edges, s.radius
    if hasattr(s, "vertex_types"):
        out[f"t{k}"] = s.vertex_types
np.savez(sys.argv[3], **out)
"""


def volume_root(tmp_path: Path, **layer: str) -> Path:
    """``tmp_path / "vol"``, holding the info of a 64^3 uint64 segmentation (8, 8, 40 nm)
    that names ``layer`` (``mesh="mesh"`` or ``skeletons="skel"``): the root cloud-volume
    opens to find a mesh or skeleton layer."""
    root = tmp_path / "vol"
    root.mkdir()
    info = {"type": "segmentation", "data_type": "uint64", "num_channels": 1,
            "scales": [{"key": "8_8_40", "size": [64, 64, 64], "voxel_offset": [0, 0, 0],
                        "resolution": [8, 8, 40], "chunk_sizes": [[64, 64, 64]],
                        "encoding": "raw"}], **layer}
    (root / "info").write_text(json.dumps(info))
    return root


def read_images(out: Path, *volumes: tuple[Path, int]) -> list[np.ndarray]:
    """cloud-volume's ``cv[cv.bounds]`` (x, y, z, c) of each ``(path, scale index)`` of
    ``volumes``, in one child process (``out``: the file the values come back in)."""
    run_peer(READ_IMAGES, out, *(a for path, mip in volumes for a in (path.as_uri(), mip)))
    with np.load(out) as got:
        return [got[str(i)] for i in range(len(volumes))]


def read_meshes(root: Path, ids, lods=(None,)) -> list[dict[int, tuple]]:
    """cloud-volume's meshes ``ids`` of the segmentation at ``root``, one dict per entry of
    ``lods`` (a level of detail of multi-resolution meshes, or None: legacy meshes, all
    fragments): {id: (vertices, faces)} for the ids it found."""
    out = root / "cv_meshes.npz"
    run_peer(READ_MESHES, root.as_uri(), ",".join(map(str, ids)),
             ",".join(str(-1 if lod is None else lod) for lod in lods), out)
    with np.load(out) as got:
        return [{int(k): (got[f"v{i}_{k}"], got[f"f{i}_{k}"]) for k in ids
                 if f"v{i}_{k}" in got} for i in (-1 if lod is None else lod for lod in lods)]


def read_skeletons(root: Path, ids) -> dict[int, dict[str, np.ndarray]]:
    """cloud-volume's skeletons ``ids`` of the segmentation at ``root``: {id: {"vertices",
    "edges", "radius" and, where present, "vertex_types"}}."""
    out = root / "cv_skeletons.npz"
    run_peer(READ_SKELETONS, root.as_uri(), ",".join(map(str, ids)), out)
    names = {"v": "vertices", "e": "edges", "r": "radius", "t": "vertex_types"}
    with np.load(out) as got:
        return {int(k): {n: got[f"{p}{k}"] for p, n in names.items() if f"{p}{k}" in got}
                for k in ids}
