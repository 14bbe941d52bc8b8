"""igneous' meshes or skeletons of a precomputed segmentation, as its CLI makes them: ``mesh
forge --sharded`` + ``mesh merge-sharded``, or ``skeleton forge --sharded`` + ``skeleton
merge-sharded``, on a LocalTaskQueue of ``parallel`` processes, with the CLI's defaults unless
options (JSON) say otherwise. Runs in a venv holding igneous-pipeline (the tests' peers venv,
see tests/peers.py, or /work/igvenv); igneous writes into the segmentation's folder (its info
names the layers), so give it a copy.

    python tools/igneous_run.py SEG mesh|skeleton SHAPE PARALLEL ['{"simplification": false}']

(``"sample": false`` in the options: no sampling of memory and CPU here, for a caller that
samples this process from outside.)

Prints one JSON line: the seconds of each phase, the layer's folder, the peak resident
memory (MiB) of the largest process and the CPU seconds of all (the client and every worker,
sampled from /proc).
"""

import json
import os
import sys
import threading
import time


def peak_mib(stop: threading.Event, out: dict, root: int | None = None) -> None:
    """The largest VmHWM (peak resident set, MiB) of process ``root`` (default this one) and
    its descendants, and the CPU seconds (user + system) they used, until ``stop``, sampled
    every 50 ms into ``out["peak"]`` and ``out["cpu"]`` (a worker's last sample is read
    before it exits, so at most 50 ms of each is missed; this sampling thread's own CPU is
    not counted). CPU seconds are what a loaded machine changes least: wall time there is
    mostly waiting for a core."""
    me = str(root or os.getpid())
    own = root is None or root == os.getpid()
    tick = os.sysconf("SC_CLK_TCK")
    cpu: dict = {}
    while True:
        parents: dict = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    parents[pid] = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
        ours, grew = {me}, True
        while grew:
            more = {p for p, q in parents.items() if q[1] in ours} - ours
            ours |= more
            grew = bool(more)
        for pid in ours:
            fields = parents.get(pid)
            if fields is not None:  # utime and stime, fields 14 and 15 of stat
                cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            out["peak"] = max(out.get("peak", 0), int(line.split()[1]) / 1024)
            except OSError:
                continue
        out["cpu"] = sum(cpu.values()) - (time.thread_time() if own else 0.0)
        if stop.wait(0.05):
            return


def run(seg: str, what: str, shape: int, parallel: int, options: dict) -> dict:
    """Forge and merge ``what`` ("mesh" or "skeleton") of the segmentation at ``seg`` (a
    local folder) with boxes of ``shape`` voxels; see the module docstring."""
    from igneous import task_creation as tc
    from taskqueue import LocalTaskQueue

    path = f"file://{os.path.abspath(seg)}"
    stop, memory = threading.Event(), {}
    sampler = threading.Thread(target=peak_mib, args=(stop, memory), daemon=True)
    if options.get("sample", True):  # else measured from outside (tools/bench_meshing.py)
        sampler.start()
    queue = LocalTaskQueue(parallel=parallel, progress=False)
    t = time.perf_counter()
    if what == "mesh":
        queue.insert(tc.create_meshing_tasks(
            path, 0, (shape,) * 3, sharded=True, spatial_index=True,
            simplification=options.get("simplification", True),
            max_simplification_error=options.get("max_error", 40)))
        queue.execute(progress=False)
        forge = time.perf_counter() - t
        t = time.perf_counter()
        queue.insert(tc.create_sharded_multires_mesh_tasks(
            path, num_lod=options.get("nlod", 1), draco_compression_level=7,
            vertex_quantization_bits=16, min_chunk_size=(256, 256, 256),
            max_labels_per_shard=1000, progress=False))
        key = "mesh"
    else:
        params = {"scale": 4, "const": 10, "pdrf_exponent": 4, "pdrf_scale": 100000,
                  "soma_detection_threshold": 1100, "soma_acceptance_threshold": 3500,
                  "soma_invalidation_scale": 1.0, "soma_invalidation_const": 300,
                  "max_paths": None, **options.get("teasar", {})}
        queue.insert(tc.create_skeletonizing_tasks(
            path, 0, (shape,) * 3, teasar_params=params, fix_branching=True,
            fix_borders=True, dust_threshold=options.get("dust", 1000), sharded=True,
            spatial_index=True, parallel=1))
        queue.execute(progress=False)
        forge = time.perf_counter() - t
        t = time.perf_counter()
        queue.insert(tc.create_sharded_skeleton_merge_tasks(
            path, dust_threshold=options.get("min_cable_length", 1000), tick_threshold=0,
            max_labels_per_shard=2000))
        key = "skeletons"
    queue.execute(progress=False)
    merge = time.perf_counter() - t
    stop.set()
    if sampler.is_alive():
        sampler.join()
    with open(os.path.join(seg, "info")) as f:
        layer = json.load(f)[key]
    return {"forge": forge, "merge": merge, "seconds": forge + merge,
            "layer": os.path.join(seg, layer), "peak_mib": memory.get("peak", 0),
            "cpu": memory.get("cpu", 0.0)}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                         json.loads(sys.argv[5]) if len(sys.argv) > 5 else {})))
