"""Write golden segment-layer fixtures with cloud-volume and igneous, the Python peers.

Into fixtures/layers/<case>/ (each case a precomputed directory, small enough to commit):

* ``cv_skeletons_sharded``: skeletons with radius and vertex_types written as cloud-volume
  writes sharded skeletons (its ``Skeleton.to_precomputed`` + ``synthesize_shard_files``),
  under a volume info naming them; ``expected.json`` holds what cloud-volume's sharded
  skeleton reader returns for each id (vertices in nm after the transform, edges, attributes).
* ``cv_skeletons_unsharded``: the same through ``cv.skeleton.upload`` (a file per segment).

Run from the repository root in a venv holding cloud-volume and igneous (kept out of the
repository and of the test extra):

    python3 -m venv /work/venv-cv && /work/venv-cv/bin/pip install cloud-volume igneous-pipeline
    /work/venv-cv/bin/python tools/make_layer_fixtures.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "layers"
SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0,
        "hash": "murmurhash3_x86_128", "minishard_bits": 2, "shard_bits": 1,
        "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def volume_info(path: Path, **members) -> None:
    from cloudvolume import CloudVolume

    info = CloudVolume.create_new_info(
        num_channels=1, layer_type="segmentation", data_type="uint64", encoding="raw",
        resolution=[8, 8, 40], voxel_offset=[0, 0, 0], chunk_size=[32, 32, 32],
        volume_size=[64, 64, 32], **members)
    path.mkdir(parents=True, exist_ok=True)
    (path / "info").write_text(json.dumps(info))


def make_skeletons(rng: np.random.Generator, count: int = 24) -> list:
    from cloudvolume import Skeleton

    skeletons = []
    ids = np.unique(rng.integers(1, 2**63, count, dtype=np.uint64)).tolist() + [2**64 - 1]
    for i, segid in enumerate(ids):
        n = int(rng.integers(1, 9)) if i else 0  # the first has no vertices at all
        v = rng.uniform(0, 500, (n, 3)).astype(np.float32)
        e = np.stack([np.arange(n - 1), np.arange(1, n)], axis=1).astype(np.uint32) \
            if n > 1 else np.zeros((0, 2), np.uint32)
        skeletons.append(Skeleton(v, e, radii=rng.uniform(1, 5, n).astype(np.float32),
                                  vertex_types=rng.integers(0, 7, n).astype(np.uint8),
                                  segid=segid))
    return skeletons


def expected_skeletons(cv, ids: list[int]) -> dict:
    out = {}
    for segid in ids:
        s = cv.skeleton.get(segid)
        out[str(segid)] = {"vertices": s.vertices.tolist(), "edges": s.edges.tolist(),
                           "radius": s.radius.tolist(),
                           "vertex_types": s.vertex_types.tolist()}
    return out


def skeleton_cases(rng: np.random.Generator) -> None:
    from cloudvolume import CloudVolume
    from cloudvolume.datasource.precomputed.sharding import (
        ShardingSpecification,
        synthesize_shard_files,
    )

    skeletons = make_skeletons(rng)
    ids = [int(s.id) for s in skeletons]
    transform = [8, 0, 0, 4, 0, 8, 0, 4, 0, 0, 40, 20]
    for case, sharded in (("cv_skeletons_sharded", True), ("cv_skeletons_unsharded", False)):
        root = OUT / case
        shutil.rmtree(root, ignore_errors=True)
        volume_info(root, skeletons="skeletons")
        cv = CloudVolume(root.as_uri(), compress=False)
        cv.skeleton.meta.info["transform"] = transform
        if sharded:
            cv.skeleton.meta.info["sharding"] = SPEC
            cv.skeleton.meta.commit_info()
            spec = ShardingSpecification.from_dict(SPEC)
            files = synthesize_shard_files(spec, {s.id: s.to_precomputed() for s in skeletons})
            for name, blob in files.items():
                (root / "skeletons" / name).write_bytes(blob)
        else:
            cv.skeleton.meta.commit_info()
            cv.skeleton.upload(skeletons)
        cv = CloudVolume(root.as_uri(), compress=False)
        expected = expected_skeletons(cv, ids)
        (root / "expected.json").write_text(json.dumps(expected, indent=0) + "\n")
        print(f"{case}: {len(ids)} skeletons, read back by cloud-volume")


def main() -> None:
    rng = np.random.default_rng(15)
    OUT.mkdir(parents=True, exist_ok=True)
    skeleton_cases(rng)


if __name__ == "__main__":
    main()
