"""Write golden mesh fixtures with igneous (cloud-volume's mesher) and record what
cloud-volume reads back.

Into fixtures/layers/<case>/, each a segmentation volume (raw uint64, 64 x 64 x 32 voxels of
8 x 8 x 40 nm holding a few ellipsoid cells) with a mesh layer in ``mesh/``:

* ``ig_meshes_sharded``: ``create_meshing_tasks(sharded=True)`` then
  ``create_sharded_multires_mesh_tasks(num_lod=2, min_chunk_size=(4, 4, 4))``: sharded
  ``neuroglancer_multilod_draco`` meshes, fragments before each manifest in the shard;
* ``ig_meshes_unsharded``: the same with ``create_unsharded_multires_mesh_tasks``
  (``<id>.index`` manifests and ``<id>`` fragment files);
* ``ig_meshes_legacy``: ``create_meshing_tasks`` + ``create_mesh_manifest_tasks``: legacy
  single-resolution meshes (``<id>:0`` manifests and their fragments).

Each case's ``expected.npz`` holds, per segment and LOD, the vertices (nm) and faces
cloud-volume's reader returns (``<id>_<lod>_v`` and ``<id>_<lod>_f``). The image chunks are
removed afterwards: only the mesh layer and the infos are kept.

    /work/venv-cv/bin/python tools/make_mesh_fixtures.py   (cloud-volume + igneous-pipeline)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "layers"
SHAPE = (64, 64, 32)
CELLS = {11: ((20, 24, 12), (12, 14, 8)), 2**40 + 5: ((44, 40, 18), (14, 10, 9)),
         77: ((30, 50, 16), (8, 9, 10))}


def segmentation() -> np.ndarray:
    x, y, z = np.meshgrid(*(np.arange(s) + 0.5 for s in SHAPE), indexing="ij")
    labels = np.zeros(SHAPE, np.uint64)
    for label, (c, r) in CELLS.items():
        inside = ((x - c[0]) / r[0]) ** 2 + ((y - c[1]) / r[1]) ** 2 + ((z - c[2]) / r[2]) ** 2
        labels[inside <= 1] = label
    return labels


def make_case(case: str) -> None:
    import igneous.task_creation as tc
    from cloudvolume import CloudVolume
    from taskqueue import LocalTaskQueue

    root = OUT / case
    shutil.rmtree(root, ignore_errors=True)
    url = root.as_uri()
    info = CloudVolume.create_new_info(
        num_channels=1, layer_type="segmentation", data_type="uint64", encoding="raw",
        resolution=[8, 8, 40], voxel_offset=[0, 0, 0], chunk_size=[32, 32, 32],
        volume_size=list(SHAPE), mesh="mesh")
    cv = CloudVolume(url, info=info, compress=False)
    cv.commit_info()
    cv[:, :, :] = segmentation()
    tq = LocalTaskQueue(parallel=1, progress=False)
    sharded = case.endswith("_sharded")
    tq.insert(tc.create_meshing_tasks(url, mip=0, shape=(32, 32, 32), mesh_dir="mesh",
                                      sharded=sharded, compress=None, spatial_index=True))
    tq.execute(progress=False)
    if case == "ig_meshes_legacy":
        tq.insert(tc.create_mesh_manifest_tasks(url, mesh_dir="mesh"))
    elif sharded:
        tq.insert(tc.create_sharded_multires_mesh_tasks(
            url, num_lod=2, mesh_dir="mesh", min_chunk_size=(4, 4, 4), progress=False))
    else:
        tq.insert(tc.create_unsharded_multires_mesh_tasks(
            url, num_lod=2, mesh_dir="mesh", min_chunk_size=(4, 4, 4)))
    tq.execute(progress=False)
    cv = CloudVolume(url)
    expected = {}
    for label in CELLS:
        lods = 1 if case == "ig_meshes_legacy" else 3
        for lod in range(lods):
            try:
                got = cv.mesh.get(label, lod=lod) if lods > 1 else cv.mesh.get(label)
            except Exception as e:  # a segment with fewer LODs
                print(f"{case}: segment {label} LOD {lod}: {type(e).__name__}")
                break
            mesh = got[label] if isinstance(got, dict) else got
            expected[f"{label}_{lod}_v"] = np.asarray(mesh.vertices, np.float32)
            expected[f"{label}_{lod}_f"] = np.asarray(mesh.faces, np.uint32)
    np.savez_compressed(root / "expected.npz", **expected)
    for chunk in root.glob("8_8_40/*"):  # the image: not needed by the tests
        chunk.unlink()
    for extra in root.glob("mesh/*.spatial"):
        extra.unlink()
    for frag in root.glob("mesh/*.frags"):  # the meshing step's output, merged already
        frag.unlink()
    for labels in root.glob("mesh/*.labels*"):
        labels.unlink()
    if case != "ig_meshes_legacy":  # the single-resolution meshes the LODs were made from
        for frag in root.glob("mesh/*:0*"):
            frag.unlink()
    print(f"{case}: {sorted(expected)}")


def mesh_cases() -> None:
    for case in ("ig_meshes_sharded", "ig_meshes_unsharded", "ig_meshes_legacy"):
        make_case(case)


if __name__ == "__main__":
    mesh_cases()
