"""Benchmark of the segment layers: ngshard beside cloud-volume on the same sharded layers.

    PYTHONPATH=src /work/venv-bench/bin/python tools/bench_layers.py [--skeletons 100000]
        [--meshes 1000] [--turns 3] [--dir /tmp/bench-layers]

(cloud-volume is not in the test extra: run this with a venv holding it, ngshard from
``src``.) Figures:

1. writing N sharded skeletons (vertices, edges, radius and vertex_types): ngshard's
   ``write_skeletons`` against cloud-volume's sharded path (``Skeleton.to_precomputed``,
   ``synthesize_shard_files``, a write per shard file), both with the same spec; each in a
   process of its own, its time and its peak memory above the input's;
2. reading 1,000 random skeletons and 200 random multi-resolution meshes (all LODs) from the
   sharded layers, local files and over HTTP (a server in its own process on 127.0.0.1 with
   20 ms added to every request, Range and ETag supported), each reader opened afresh (cold
   index caches) and the libraries taking turns with the same random ids;
3. the CPU seconds each library spends inside ``DracoPy.decode`` (summed over its threads)
   for one more, untimed read of 200 meshes: the decoding neither can avoid.

Ratios are ngshard's time over cloud-volume's, the median over the turns (below 1: ngshard
is faster); goals of issue 15: reads at most 0.2, writes at most 0.5.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

import ngshard  # noqa: E402
from ngshard.layers.sharding import segment_sharding  # noqa: E402

TRANSFORM = [8, 0, 0, 0, 0, 8, 0, 0, 0, 0, 40, 0]
DELAY = 0.020


# --- data ------------------------------------------------------------------------------------

def skeleton_items(n: int, seed: int = 0):
    """n random-walk skeletons of 20 to 400 vertices with radius and vertex_types."""
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(1, 2**50, int(n * 1.01), dtype=np.uint64))[:n]
    lengths = rng.integers(20, 400, n)
    steps = rng.normal(0, 30, (int(lengths.sum()), 3)).astype(np.float32)
    walks = np.split(np.cumsum(steps, axis=0) + 5000, np.cumsum(lengths)[:-1])
    items = {}
    for k, v in zip(ids.tolist(), walks):
        m = len(v)
        e = np.stack([np.arange(m - 1), np.arange(1, m)], axis=1).astype(np.uint32)
        items[k] = (v, e, {"radius": rng.uniform(1, 9, m).astype(np.float32),
                           "vertex_types": rng.integers(0, 7, m).astype(np.uint8)})
    return items


def blob(rings: int, seed: int):
    """A closed, lumpy sphere (a cell-like surface) at ``rings`` latitude rings."""
    rng = np.random.default_rng(seed)
    theta = np.linspace(0, np.pi, rings + 2)[1:-1]
    phi = np.linspace(0, 2 * np.pi, 2 * rings, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    unit = np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], -1)
    unit = np.concatenate([[[0, 0, 1]], unit.reshape(-1, 3), [[0, 0, -1]]])
    bumps = rng.normal(0, 1, (4, 3))
    radius = 200 * (1 + 0.15 * np.sin(unit @ bumps.T).sum(axis=1))
    v = unit * radius[:, None] * [1, 1, 0.2] + rng.uniform(0, 4000, 3)
    m = 2 * rings
    j = np.arange(m)
    faces = [np.stack([np.zeros(m, int), 1 + j, 1 + (j + 1) % m], 1)]
    for i in range(rings - 1):
        a, b = 1 + i * m + j, 1 + i * m + (j + 1) % m
        faces += [np.stack([a, a + m, b], 1), np.stack([b, a + m, b + m], 1)]
    last = 1 + (rings - 1) * m
    faces.append(np.stack([last + j, np.full(m, len(v) - 1), last + (j + 1) % m], 1))
    return v, np.concatenate(faces)


def mesh_items(n: int):
    """n segments, 3 LODs each (about 9,000, 2,300 and 600 triangles)."""
    for k in range(n):
        yield 10_000 + 37 * k, [blob(r, k) for r in (48, 24, 12)]


def volume_info(root: Path) -> None:
    from cloudvolume import CloudVolume

    info = CloudVolume.create_new_info(
        num_channels=1, layer_type="segmentation", data_type="uint64", encoding="raw",
        resolution=[8, 8, 40], voxel_offset=[0, 0, 0], chunk_size=[64, 64, 64],
        volume_size=[4096, 4096, 1024], skeletons="skeletons", mesh="mesh")
    root.mkdir(parents=True, exist_ok=True)
    (root / "info").write_text(json.dumps(info))


# --- writing, each in its own process ----------------------------------------------------------

def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024


def _reset_peak() -> None:
    """Start the peak RSS (VmHWM) afresh: the input's making peaked above what it keeps."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _write_job(lib: str, n: int, out: str, queue) -> None:
    items = skeleton_items(n)
    spec = segment_sharding(n)
    _reset_peak()
    base = _status_mib("VmRSS")
    t = time.perf_counter()
    cpu = time.process_time()
    if lib == "ngshard":
        ngshard.write_skeletons(out, items, sharding=spec, durable=False)
    else:
        from cloudfiles import CloudFiles
        from cloudvolume import Skeleton
        from cloudvolume.datasource.precomputed.sharding import (
            ShardingSpecification,
            synthesize_shard_files,
        )

        encoded = {k: Skeleton(v, e, radii=a["radius"], vertex_types=a["vertex_types"],
                               segid=k).to_precomputed() for k, (v, e, a) in items.items()}
        files = synthesize_shard_files(ShardingSpecification.from_dict(spec.to_json()), encoded)
        CloudFiles(Path(out).as_uri()).puts(files.items(), compress=None)
    took, cpu = time.perf_counter() - t, time.process_time() - cpu
    queue.put((took, cpu, _status_mib("VmHWM") - base))


def bench_write(n: int, turns: int, work: Path) -> dict:
    out = {"ngshard": [], "cloud-volume": []}
    ctx = multiprocessing.get_context("fork")
    for turn in range(turns):
        order = ["ngshard", "cloud-volume"] if turn % 2 == 0 else ["cloud-volume", "ngshard"]
        for lib in order:
            target = work / f"write-{lib}"
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            os.sync()
            queue = ctx.Queue()
            p = ctx.Process(target=_write_job, args=(lib, n, str(target), queue))
            p.start()
            result = queue.get()
            p.join()
            out[lib].append(result)
    return out


# --- reading -----------------------------------------------------------------------------------

def read_ngshard(base: str, kind: str, ids: list[int]) -> int:
    layer = ngshard.open(f"{base}/{'skeletons' if kind == 'skeletons' else 'mesh'}")
    if kind == "skeletons":
        got = layer.get_many(ids)
        return sum(len(s.vertices) for s in got.values())
    got = layer.get_many(ids, lod="all")
    return sum(len(m.faces) for ms in got.values() for m in ms)


def read_cloudvolume(base: str, kind: str, ids: list[int]) -> int:
    from cloudvolume import CloudVolume

    cv = CloudVolume(base if "://" in base else Path(base).as_uri(), progress=False)
    if kind == "skeletons":
        return sum(len(s.vertices) for s in cv.skeleton.get(ids))
    total = 0
    for lod in range(3):
        got = cv.mesh.get(ids, lod=lod)
        total += sum(len(m.faces) for m in got.values())
    return total


def bench_reads(base: str, pools: dict, turns: int, rng: np.random.Generator) -> dict:
    results = {}
    for kind, (pool, count) in pools.items():
        rows = {"ngshard": [], "cloud-volume": []}
        for turn in range(turns):
            ids = rng.choice(pool, min(count, len(pool)), replace=False).tolist()
            order = [("ngshard", read_ngshard), ("cloud-volume", read_cloudvolume)]
            order = order if turn % 2 == 0 else order[::-1]
            checks = {}
            for lib, fn in order:
                t = time.perf_counter()
                checks[lib] = fn(base, kind, ids)
                rows[lib].append(time.perf_counter() - t)
            if checks["ngshard"] != checks["cloud-volume"]:
                print(f"  note: {kind}: ngshard read {checks['ngshard']} vertices/faces, "
                      f"cloud-volume {checks['cloud-volume']}")
        results[kind] = rows
    return results


def draco_seconds(base: str, ids: list[int]) -> dict[str, tuple[float, float]]:
    """Per library, (CPU seconds inside DracoPy.decode summed over threads, wall seconds) of
    one untimed read of these meshes: the decoding both libraries must pay, measured apart
    from the timed turns (the wrapper costs a little per fragment)."""
    import DracoPy

    original, lock = DracoPy.decode, threading.Lock()
    spent = [0.0]

    def timed(buf):
        t = time.thread_time()
        try:
            return original(buf)
        finally:
            with lock:
                spent[0] += time.thread_time() - t

    out = {}
    DracoPy.decode = timed
    try:
        for lib, fn in (("ngshard", read_ngshard), ("cloud-volume", read_cloudvolume)):
            spent[0] = 0.0
            t = time.perf_counter()
            fn(base, "meshes", ids)
            out[lib] = (spent[0], time.perf_counter() - t)
    finally:
        DracoPy.decode = original
    return out


def report_draco(where: str, base: str, pools: dict, rng: np.random.Generator) -> None:
    pool, count = pools["meshes"]
    got = draco_seconds(base, rng.choice(pool, min(count, len(pool)), replace=False).tolist())
    print(f"  Draco decoding, {where}: " + "; ".join(
        f"{lib} {cpu:.3f} s of CPU in DracoPy.decode within {wall:.3f} s" for lib, (cpu, wall)
        in got.items()))


# --- a slow HTTP server in its own process -----------------------------------------------------

SERVER = r'''
import os, re, sys, time, hashlib
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

DELAY = float(sys.argv[3])

class Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def handle_one_request(self):
        time.sleep(DELAY)
        super().handle_one_request()
    def end_headers(self):
        path = self.translate_path(self.path)
        if os.path.isfile(path):
            st = os.stat(path)
            tag = hashlib.md5(f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}".encode()).hexdigest()
            self.send_header("ETag", f'"{tag}"')
            self.send_header("Accept-Ranges", "bytes")
        super().end_headers()
    def do_GET(self):
        path = self.translate_path(self.path)
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range") or "")
        if not m or not os.path.isfile(path):
            return super().do_GET()
        size = os.path.getsize(path)
        start = int(m.group(1))
        end = min(int(m.group(2)) + 1 if m.group(2) else size, size)
        with open(path, "rb") as f:
            f.seek(start)
            body = f.read(max(0, end - start))
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

class Server(ThreadingHTTPServer):
    request_queue_size = 512
    daemon_threads = True

server = Server(("127.0.0.1", int(sys.argv[2])), partial(Handler, directory=sys.argv[1]))
print("ready", flush=True)
server.serve_forever()
'''


def serve(root: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(root), str(port), str(DELAY)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


# --- report --------------------------------------------------------------------------------

def report(name: str, rows: dict, goal: float) -> None:
    ours, theirs = rows["ngshard"], rows["cloud-volume"]
    ratios = [a / b for a, b in zip(ours, theirs)]
    r = statistics.median(ratios)
    print(f"{name:<46} ngshard {statistics.median(ours):8.3f} s  cloud-volume "
          f"{statistics.median(theirs):8.3f} s  ratio {r:.3f} ({min(ratios):.3f}..."
          f"{max(ratios):.3f}) {'meets' if r <= goal else 'misses'} the goal {goal}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--skeletons", type=int, default=100_000)
    ap.add_argument("--meshes", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/bench-layers")
    ap.add_argument("--port", type=int, default=8771)
    ap.add_argument("--only", choices=("write", "read"), help="one half of the benchmark (read "
                    "needs the layers an earlier full run left in --dir)")
    args = ap.parse_args()
    work = Path(args.dir)
    root = work / "vol"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"nproc {os.cpu_count()}, load average {load}; {args.skeletons} skeletons, "
          f"{args.meshes} meshes, {args.turns} turns")

    if args.only != "read":
        writes = bench_write(args.skeletons, args.turns, work)
        report(f"write {args.skeletons} skeletons (sharded)",
               {k: [t for t, _, _ in v] for k, v in writes.items()}, 0.5)
        for lib, runs in writes.items():
            print(f"  {lib}: CPU {statistics.median(c for _, c, _ in runs):.2f} s (every "
                  f"thread), peak memory above the input {max(m for _, _, m in runs):.0f} MiB")
    if args.only == "write":
        return

    volume_info(root)
    if args.only != "read":
        shutil.rmtree(root / "skeletons", ignore_errors=True)
        shutil.copytree(work / "write-ngshard", root / "skeletons")
    if not (root / "mesh" / "info").exists() or \
            len(ngshard.open(root / "mesh")) != args.meshes:
        t = time.perf_counter()
        ngshard.write_meshes(root / "mesh", mesh_items(args.meshes), transform=TRANSFORM,
                             durable=False)
        print(f"  (wrote {args.meshes} meshes with ngshard in {time.perf_counter() - t:.0f} s)")
    pools = {"skeletons": (ngshard.open(root / "skeletons").keys_array(), 1000),
             "meshes": (ngshard.open(root / "mesh").keys_array(), 200)}
    rng = np.random.default_rng(1)
    local = bench_reads(str(root), pools, args.turns, rng)
    report("read 1000 random skeletons, local", local["skeletons"], 0.2)
    report("read 200 random meshes (all LODs), local", local["meshes"], 0.2)
    report_draco("local", str(root), pools, rng)
    server = serve(work, args.port)
    try:
        remote = bench_reads(f"http://127.0.0.1:{args.port}/vol", pools, args.turns, rng)
    finally:
        server.terminate()
        server.wait(timeout=30)
    report("read 1000 random skeletons, HTTP +20 ms", remote["skeletons"], 0.2)
    report("read 200 random meshes (all LODs), HTTP +20 ms", remote["meshes"], 0.2)


if __name__ == "__main__":
    main()
