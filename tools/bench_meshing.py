"""Meshes and skeletons of a synthetic segmentation: ngshard.mesh / ngshard.skeletonize (box
tasks, then shard tasks, on a local process pool) beside the same libraries run once over the
whole volume in one process (zmesh: marching cubes and the same simplification per level;
kimimaro: TEASAR), with each side's peak memory (the largest worker's for ngshard).

igneous (forge + merge-sharded) is the peer the issue names; it is not installed here, so the
single-process whole-volume run stands in as the baseline (no task boundaries, no Draco, no
sharded output).

    python tools/bench_meshing.py --size 256 --labels 3000 --workers 2
    python tools/bench_meshing.py --size 512 --box 256

The segmentation: Voronoi cells of ``--labels`` random seeds (uint64 ids past 2**32), written
as a sharded compressed_segmentation layer. Load averages are printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ngshard

RES = (8.0, 8.0, 16.0)


def segmentation(path: Path, size: int, labels: int, seed: int = 0) -> None:
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    seeds = rng.uniform(0, size, (labels, 3))
    tree = cKDTree(seeds)
    ids = (np.arange(labels, dtype=np.uint64) + np.uint64(2**32 + 1))
    vol = ngshard.create_volume(path, dtype="uint64", shape=(size,) * 3, chunk_size=(64,) * 3,
                                layer_type="segmentation", encoding="compressed_segmentation",
                                resolution=RES, sharding="auto")
    grid = np.stack(np.meshgrid(np.arange(size), np.arange(size), np.arange(64),
                                indexing="ij"), -1).reshape(-1, 3)
    for z in range(0, size, 64):
        _, nearest = tree.query(grid + [0, 0, z] + 0.5)
        vol[:, :, z:z + 64, 0] = ids[nearest].reshape(size, size, 64)
    vol.commit()


WHOLE = """
import json, resource, sys, time
import numpy as np
import ngshard
seg, what, lods, reduction = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
vol = ngshard.open_volume(seg)
res = tuple(vol.info.scales[0].resolution)
t = time.perf_counter()
labels = np.asarray(vol[..., 0])
read = time.perf_counter() - t
t = time.perf_counter()
if what == "mesh":
    import zmesh
    mesher = zmesh.Mesher(res)
    mesher.mesh(np.pad(labels, 1), close=False)
    n = 0
    for label in mesher.ids():
        if not label:
            continue
        mesh = mesher.get(label, normals=False, reduction_factor=0, max_error=0)
        for k in range(1, lods):
            mesh = mesher.simplify(mesh, reduction_factor=reduction,
                                   max_error=max(res) * 2 ** (k - 1))
        n += 1
else:
    import kimimaro
    n = len(kimimaro.skeletonize(labels, anisotropy=res, dust_threshold=0, progress=False,
                                 parallel=1))
print(json.dumps({"seconds": time.perf_counter() - t, "read": read, "segments": n,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

RUN = """
import json, resource, sys, time
import ngshard
seg, dst, what, box, workers = sys.argv[1:6]
fn = ngshard.mesh if what == "mesh" else ngshard.skeletonize
if __name__ == "__main__":
    t = time.perf_counter()
    stats = fn(seg, dst, box=int(box), workers=int(workers), progress=False, overwrite=True)
    seconds = time.perf_counter() - t
    print(json.dumps({"seconds": seconds, **stats,
                      "worker_peak_mib":
                          resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                      "main_peak_mib":
                          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         timeout=7200)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--labels", type=int, default=3000)
    p.add_argument("--box", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--what", choices=("mesh", "skeletonize", "both"), default="both")
    args = p.parse_args()
    print(f"load before: {os.getloadavg()}")
    root = Path(tempfile.mkdtemp(prefix="bench-meshing-"))
    try:
        t = time.perf_counter()
        segmentation(root / "seg", args.size, args.labels)
        print(f"segmentation {args.size}^3 uint64, {args.labels} labels, written in "
              f"{time.perf_counter() - t:.1f} s")
        for what in ("mesh", "skeletonize") if args.what == "both" else (args.what,):
            ours = run(RUN, str(root / "seg"), str(root / what), what, str(args.box),
                       str(args.workers))
            whole = run(WHOLE, str(root / "seg"), "mesh" if what == "mesh" else "skel",
                        "3", "4")
            print(f"{what:12s} ngshard ({args.workers} workers, box {args.box}): "
                  f"{ours['seconds']:7.1f} s, {ours['segments']} segments, "
                  f"{ours['boxes']} boxes + {ours['shards']} shards, peak worker "
                  f"{ours['worker_peak_mib']:.0f} MiB, main {ours['main_peak_mib']:.0f} MiB")
            print(f"{'':12s} whole volume, 1 process:  {whole['seconds']:7.1f} s "
                  f"(+ {whole['read']:.1f} s reading), {whole['segments']} segments, peak "
                  f"{whole['peak_mib']:.0f} MiB; ratio ngshard/whole "
                  f"{ours['seconds'] / (whole['seconds'] + whole['read']):.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
