"""Meshes and skeletons of a synthetic segmentation: ngshard.mesh / ngshard.skeletonize (box
tasks, then shard tasks, on a local process pool) beside igneous' ``mesh forge --sharded`` +
``mesh merge-sharded`` and ``skeleton forge --sharded`` + ``skeleton merge-sharded`` on a
LocalTaskQueue of as many processes (tools/igneous_run.py, in a venv holding igneous: the
tests' peers venv, ``NGSHARD_PEER_PYTHON`` or ``--igneous-python``), with boxes of the same
size, and each side's peak memory (the largest process's).

Like with like: both sides simplify each box's meshes as igneous' forge does by default
(zmesh, a 100th of the triangles, at most 40 nm of error) and make one coarser level of
detail; both skeletonize with igneous' defaults (TEASAR scale 4, const 10, its soma settings,
1000 voxels of dust per box, 1000 nm of cable at least).

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


RUN = """
import json, sys, threading, time
import ngshard
seg, dst, what, box, workers, options, tools = sys.argv[1:8]
sys.path.insert(0, tools)
from igneous_run import peak_mib  # the same sampling of every process as igneous'
fn = ngshard.mesh if what == "mesh" else ngshard.skeletonize
if __name__ == "__main__":
    stop, memory = threading.Event(), {}
    sampler = threading.Thread(target=peak_mib, args=(stop, memory), daemon=True)
    sampler.start()
    t = time.perf_counter()
    stats = fn(seg, dst, box=int(box), workers=int(workers), progress=False, overwrite=True,
               **json.loads(options))
    seconds = time.perf_counter() - t
    stop.set()
    sampler.join()
    print(json.dumps({"seconds": seconds, **stats, "peak_mib": memory.get("peak", 0)}))
"""


#: ngshard's options matching igneous' defaults (see the module docstring).
OURS = {"mesh": {"lods": 1, "max_error": 40.0, "simplify": 100},
        "skeletonize": {"teasar": {"scale": 4, "const": 10, "soma_detection_threshold": 1100,
                                   "soma_invalidation_scale": 1.0},
                        "dust_threshold": 1000, "cable_dust": 1000}}
IGNEOUS_PYTHON = os.environ.get("NGSHARD_PEER_PYTHON",
                                str(Path(__file__).resolve().parents[1] / ".ci/peers/bin/python"))


def run(code: str, *args: str, python: str = sys.executable) -> dict:
    out = subprocess.run([python, *code, *args], capture_output=True, text=True,
                         timeout=7200, env={**os.environ, "PYTHONPATH": ""})
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
    p.add_argument("--igneous-python", default=IGNEOUS_PYTHON,
                   help="a Python with igneous-pipeline (default: %(default)s)")
    args = p.parse_args()
    print(f"load before: {os.getloadavg()}")
    root = Path(tempfile.mkdtemp(prefix="bench-meshing-"))
    try:
        t = time.perf_counter()
        segmentation(root / "seg", args.size, args.labels)
        print(f"segmentation {args.size}^3 uint64, {args.labels} labels, written in "
              f"{time.perf_counter() - t:.1f} s")
        shutil.copytree(root / "seg", root / "seg-igneous")  # igneous writes into it
        for what in ("mesh", "skeletonize") if args.what == "both" else (args.what,):
            ours = run(["-c", RUN], str(root / "seg"), str(root / what), what, str(args.box),
                       str(args.workers), json.dumps(OURS[what]),
                       str(Path(__file__).resolve().parent))
            print(f"{what:12s} ngshard ({args.workers} workers, box {args.box}): "
                  f"{ours['seconds']:7.1f} s, {ours['segments']} segments, "
                  f"{ours['boxes']} boxes + {ours['shards']} shards, peak process "
                  f"{ours['peak_mib']:.0f} MiB; "
                  f"load {os.getloadavg()}", flush=True)
            theirs = run([str(Path(__file__).with_name("igneous_run.py"))],
                         str(root / "seg-igneous"), "mesh" if what == "mesh" else "skeleton",
                         str(args.box), str(args.workers), python=args.igneous_python)
            print(f"{'':12s} igneous ({args.workers} processes):  {theirs['seconds']:7.1f} s "
                  f"(forge {theirs['forge']:.1f} s, merge {theirs['merge']:.1f} s), peak "
                  f"process {theirs['peak_mib']:.0f} MiB; ratio ngshard/igneous "
                  f"{ours['seconds'] / theirs['seconds']:.2f}; load {os.getloadavg()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
