"""Meshes and skeletons of a synthetic segmentation: ngshard.mesh / ngshard.skeletonize (box
tasks, then shard tasks, on a local process pool) beside igneous' ``mesh forge --sharded`` +
``mesh merge-sharded`` and ``skeleton forge --sharded`` + ``skeleton merge-sharded`` on a
LocalTaskQueue of as many processes (tools/igneous_run.py, in a venv holding igneous: the
tests' peers venv, ``NGSHARD_PEER_PYTHON`` or ``--igneous-python``), with boxes of the same
size, and each side's peak memory (the largest process's).

Like with like (per call, counted on both sides with the same 128^3 data): both mesh and
skeletonize the same voxels per box (``--box`` cells plus one shared plane; a zero frame at
the volume's faces), with one zmesh marching cubes and one ``kimimaro.skeletonize`` call per
box (TEASAR scale 4, const 10, its soma settings, ``fix_borders``, ``fix_branching``, no
``fix_avocados``, ``parallel=1``, 1000 voxels of dust per box) and one
``kimimaro.postprocess`` per segment (keeping every skeleton: igneous' 1000 nm of cable at
least would drop every Voronoi cell here, whose skeletons are a few hundred nm long, and
leave the merges nothing to write). Meshes: each label of a box
is simplified once, as igneous' forge does it (zmesh ``Mesher.get``, a 100th of the
triangles, at most 40 nm of error), into one level of detail: igneous' merge adds LOD k only
where a segment spans ``256 * 2**k`` voxels along every axis (``min_chunk_size``), which no
Voronoi cell of a few thousand here does. (igneous' boxes are cut one voxel further along
each axis, so a few more or fewer labels meet a box edge: 684 label meshes against 678 in
128^3 / 400 labels / boxes of 64.)

    python tools/bench_meshing.py --size 256 --labels 1000 --workers 2
    python tools/bench_meshing.py --size 512 --labels 3000 --box 128
    python tools/bench_meshing.py --size 1024 1024 512 --labels 3000 --box 128

Each side prints its wall seconds and the CPU seconds of all its processes (sampled from
/proc; on a loaded machine the wall time is mostly waiting for a core, the CPU seconds are
what the work costs) and the ratio of each.

The segmentation: Voronoi cells of ``--labels`` random seeds (uint64 ids past 2**32), written
as a sharded compressed_segmentation layer. Load averages are printed before and after.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

import ngshard

sys.path.insert(0, str(Path(__file__).resolve().parent))

RES = (8.0, 8.0, 16.0)


def segmentation(path: Path, shape: tuple[int, int, int], labels: int, seed: int = 0
                 ) -> None:
    """Voronoi cells of ``labels`` random seeds over ``shape`` voxels, written a block of
    256 x 256 x 64 voxels at a time (a 1024^2 x 512 volume is 4 GiB of uint64)."""
    from scipy.spatial import cKDTree

    rng = np.random.default_rng(seed)
    seeds = rng.uniform(0, 1, (labels, 3)) * shape
    tree = cKDTree(seeds)
    ids = (np.arange(labels, dtype=np.uint64) + np.uint64(2**32 + 1))
    vol = ngshard.create_volume(path, dtype="uint64", shape=shape, chunk_size=(64,) * 3,
                                layer_type="segmentation", encoding="compressed_segmentation",
                                resolution=RES, sharding="auto")
    block = (256, 256, 64)
    for lo in itertools.product(*(range(0, n, b) for n, b in zip(shape, block))):
        hi = np.minimum(np.add(lo, block), shape)
        grid = np.stack(np.meshgrid(*(np.arange(a, b) + 0.5 for a, b in zip(lo, hi)),
                                    indexing="ij"), -1)
        _, nearest = tree.query(grid.reshape(-1, 3))
        vol[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2], 0] = \
            ids[nearest].reshape(tuple(hi - np.asarray(lo)))
    vol.commit()


RUN = """
import json, sys, time
import ngshard
seg, dst, what, box, workers, options = sys.argv[1:7]
fn = ngshard.mesh if what == "mesh" else ngshard.skeletonize
if __name__ == "__main__":
    t = time.perf_counter()
    stats = fn(seg, dst, box=int(box), workers=int(workers), progress=False, overwrite=True,
               **json.loads(options))
    print(json.dumps({"seconds": time.perf_counter() - t, **stats}))
"""


#: ngshard's options matching igneous' defaults (see the module docstring).
OURS = {"mesh": {"lods": 1, "max_error": 40.0, "simplify": 100},
        "skeletonize": {"teasar": {"scale": 4, "const": 10, "soma_detection_threshold": 1100,
                                   "soma_invalidation_scale": 1.0},
                        "dust_threshold": 1000, "cable_dust": 0}}
#: igneous' options (tools/igneous_run.py) matching them.
THEIRS = {"mesh": {"sample": False},
          "skeletonize": {"sample": False, "min_cable_length": 0}}
IGNEOUS_PYTHON = os.environ.get("NGSHARD_PEER_PYTHON",
                                str(Path(__file__).resolve().parents[1] / ".ci/peers/bin/python"))


def run(code: list[str], *args: str, python: str = sys.executable) -> dict:
    """The JSON result of a child process, with the peak memory of its largest process and
    the CPU seconds of all, sampled from outside (igneous_run.peak_mib), so that no
    sampling thread runs (and spends CPU) in the process measured."""
    from igneous_run import peak_mib

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([python, *code, *args], stdout=out, stderr=err, text=True,
                                env={**os.environ, "PYTHONPATH": ""})
        stop, memory = threading.Event(), {}
        sampler = threading.Thread(target=peak_mib, args=(stop, memory, proc.pid))
        sampler.start()
        try:
            proc.wait(timeout=7200)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            stop.set()
            sampler.join()
        if proc.returncode:
            err.seek(0)
            raise SystemExit(err.read())
        out.seek(0)
        result = json.loads(out.read().strip().splitlines()[-1])
    return {**result, "peak_mib": memory.get("peak", 0), "cpu": memory.get("cpu", 0.0)}


def same_output(what: str, ours: Path, theirs: Path, labels: int, sample: int = 200) -> str:
    """What both sides made of the first ``sample`` segments (like with like): levels of
    detail and LOD 0 triangles of meshes, vertices and cable length of skeletons."""
    ids = np.arange(min(labels, sample), dtype=np.uint64) + np.uint64(2**32 + 1)
    a, b = ngshard.open(ours), ngshard.open(theirs)
    if what == "mesh":
        lods = [sorted({m.num_lods for m in layer.manifests(ids).values()}) for layer in (a, b)]
        faces = [sum(len(m.faces) for m in layer.get_many(ids).values()) for layer in (a, b)]
        return (f"levels of detail {lods[0]} / {lods[1]}, LOD 0 triangles {faces[0]} / "
                f"{faces[1]} ({faces[0] / max(faces[1], 1):.3f})")
    cable = []
    for layer in (a, b):
        skeletons = [layer.get(int(i)) for i in ids]
        cable.append(sum(float(np.linalg.norm(np.diff(s.vertices[s.edges], axis=1),
                                              axis=2).sum()) for s in skeletons if s))
    return (f"cable length {cable[0]:.0f} / {cable[1]:.0f} nm "
            f"({cable[0] / max(cable[1], 1e-9):.3f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, nargs="+", default=[256],
                   help="voxels per axis: one number (a cube) or three (x y z)")
    p.add_argument("--labels", type=int, default=3000)
    p.add_argument("--box", type=int, default=128)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--what", choices=("mesh", "skeletonize", "both"), default="both")
    p.add_argument("--igneous-python", default=IGNEOUS_PYTHON,
                   help="a Python with igneous-pipeline (default: %(default)s)")
    args = p.parse_args()
    if len(args.size) not in (1, 3):
        p.error("--size takes one number or three")
    shape = tuple(args.size * 3 if len(args.size) == 1 else args.size)
    name = "x".join(map(str, shape))
    print(f"load before: {os.getloadavg()}")
    root = Path(tempfile.mkdtemp(prefix="bench-meshing-"))
    try:
        t = time.perf_counter()
        segmentation(root / "seg", shape, args.labels)
        print(f"segmentation {name} uint64, {args.labels} labels, written in "
              f"{time.perf_counter() - t:.1f} s")
        shutil.copytree(root / "seg", root / "seg-igneous")  # igneous writes into it
        for what in ("mesh", "skeletonize") if args.what == "both" else (args.what,):
            ours = run(["-c", RUN], str(root / "seg"), str(root / what), what, str(args.box),
                       str(args.workers), json.dumps(OURS[what]))
            print(f"{what:12s} ngshard ({args.workers} workers, box {args.box}): "
                  f"{ours['seconds']:7.1f} s ({ours['cpu']:.1f} CPU s), {ours['segments']} "
                  f"segments, "
                  f"{ours['boxes']} boxes + {ours['shards']} shards, peak process "
                  f"{ours['peak_mib']:.0f} MiB; "
                  f"load {os.getloadavg()}", flush=True)
            theirs = run([str(Path(__file__).with_name("igneous_run.py"))],
                         str(root / "seg-igneous"), "mesh" if what == "mesh" else "skeleton",
                         str(args.box), str(args.workers), json.dumps(THEIRS[what]),
                         python=args.igneous_python)
            print(f"{'':12s} igneous ({args.workers} processes):  {theirs['seconds']:7.1f} s "
                  f"({theirs['cpu']:.1f} CPU s; forge {theirs['forge']:.1f} s, merge "
                  f"{theirs['merge']:.1f} s), peak process {theirs['peak_mib']:.0f} MiB; "
                  f"ratio ngshard/igneous {ours['seconds'] / theirs['seconds']:.2f} (CPU "
                  f"{ours['cpu'] / theirs['cpu']:.2f}); load {os.getloadavg()}", flush=True)
            print(f"{'':12s} ngshard / igneous, first segments: "
                  f"{same_output(what, root / what, Path(theirs['layer']), args.labels)}",
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
