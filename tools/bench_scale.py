"""Scale-out figures of the task runner (issue 23): run ``python tools/bench_scale.py [PART]``
with PART one of ``sim``, ``cluster``, ``memory``, ``cleanup``, ``write_kv`` (default all).

- sim: the runner (results as they complete, a bounded window) and the former one (results in
  submission order, a window of twice the workers) on a simulated executor of 100 and 1,000
  workers whose tasks take moderately varying (lognormal) or heavy-tailed (Pareto) times; the
  simulated clock runs in real time (scaled), so the runner's own overhead counts. ``ideal``
  is the same tasks, in the same order, given to the first free worker with no overhead.
- cluster: a conversion on a Dask LocalCluster of 2, 4 and 8 workers (processes up to the
  cores, threads past them) beside the local process pool.
- memory: the client's peak memory (ru_maxrss over the imports) while planning a 100 TiB
  conversion and making every task (metadata only, nothing read or written): box shards
  (auto) and scattered (murmurhash) shards.
- cleanup: the resume records of 800,000 tasks (800 records of 1,000 tasks) written and
  removed on a local S3 server (moto_server), and the rate of batched deletes of objects (one
  record per task, as before) beside deletes one at a time, extrapolated to 800,000.
- write_kv: ``ngshard.dask.write_kv`` of 10 M keys in 2 input partitions on workers with a
  memory limit, the peak memory of each worker printed.

Every figure is printed with the load average before and after it (the machine is shared).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from concurrent.futures import Executor, Future
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import PEER_TIMEOUT, machine  # noqa: E402

import ngshard  # noqa: E402
from ngshard.pipelines.runner import completed  # noqa: E402


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def report(what: str, before: str, text: str) -> None:
    print(f"{what}: {text}  [load {before} -> {load()}]", flush=True)


# --- sim ---------------------------------------------------------------------------------


class SimExecutor(Executor):
    """``workers`` simulated workers: a task ``d`` takes ``d`` simulated seconds, each
    ``scale`` real seconds; tasks wait in a FIFO queue for a free worker (as a Dask
    scheduler's). One timer thread finishes them at their (real) time."""

    def __init__(self, workers: int, scale: float) -> None:
        self._max_workers = workers  # what the runner sizes its window by
        self.free, self.scale = workers, scale
        self.queue: deque = deque()
        self.heap: list = []
        self.seq = itertools.count()
        self.cond = threading.Condition()
        self.start = time.perf_counter()
        self.last = 0.0  # simulated time the last task finished
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def now(self) -> float:
        return (time.perf_counter() - self.start) / self.scale

    def submit(self, fn, task, *args, **kwargs) -> Future:
        future: Future = Future()
        with self.cond:
            self.queue.append((task, future))
            self._dispatch(self.now())
            self.cond.notify()
        return future

    def _dispatch(self, now: float) -> None:
        while self.free and self.queue:
            task, future = self.queue.popleft()
            self.free -= 1
            heapq.heappush(self.heap, (now + task, next(self.seq), task, future))

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.heap and not self.stop:
                    self.cond.wait(1.0)
                if self.stop:
                    return
                end, _, task, future = self.heap[0]
                wait = (end - self.now()) * self.scale
                if wait > 0:
                    self.cond.wait(wait)
                    continue
                heapq.heappop(self.heap)
                self.free += 1
                self.last = end
                self._dispatch(end)
            future.set_result(task)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self.cond:
            self.stop = True
            self.cond.notify()
        self.thread.join(timeout=PEER_TIMEOUT)


def in_order(executor: Executor, tasks, fn, window: int):
    """The former runner: results in submission order, at most ``window`` submitted."""
    pending: deque = deque()
    for task in tasks:
        pending.append(executor.submit(fn, task))
        while len(pending) >= window:
            yield pending.popleft().result(timeout=PEER_TIMEOUT)
    while pending:
        yield pending.popleft().result(timeout=PEER_TIMEOUT)


def greedy(durations: np.ndarray, workers: int) -> float:
    """The makespan of the tasks, in order, each to the first free worker, no overhead."""
    free = [0.0] * workers
    for d in durations.tolist():
        heapq.heapreplace(free, free[0] + d)
    return max(free)


def bench_sim() -> None:
    rng = np.random.default_rng(0)
    print("simulated executor: makespan / ideal (the same tasks in order, each to the first "
          "free worker, no overhead); lower bound max(sum / workers, longest task)")
    for workers, tasks, real_mean in ((100, 4000, 0.1), (1000, 12000, 1.0)):
        for shape in ("lognormal", "pareto"):
            if shape == "lognormal":  # moderately varying: sigma 0.5
                d = rng.lognormal(0.0, 0.5, tasks)
            else:  # heavy tail: Pareto, alpha 1.5, capped at 30x the mean (a few tasks
                d = rng.pareto(1.5, tasks) + 1.0  # 10-30x the median)
                d = np.minimum(d, 30 * d.mean())
            d = d / d.mean()  # mean 1 simulated second
            ideal = greedy(d, workers)
            bound = max(d.sum() / workers, d.max())
            for name in ("as completed", "in order"):
                before = load()
                ex = SimExecutor(workers, real_mean)
                t0 = time.perf_counter()
                if name == "as completed":
                    n = sum(1 for _ in completed(ex, iter(d), lambda x: x,
                                                 record=lambda r: None))
                else:
                    n = sum(1 for _ in in_order(ex, iter(d), lambda x: x, 2 * workers))
                real = time.perf_counter() - t0
                span = ex.last
                ex.shutdown()
                assert n == tasks
                report(f"  {workers} workers, {tasks} tasks, {shape:9s} {name:12s}", before,
                       f"{span / ideal:.3f}x ideal ({span:.1f} vs {ideal:.1f} simulated s; "
                       f"lower bound {bound:.1f}; {real:.1f} s real)")


# --- cluster -----------------------------------------------------------------------------


def source(root: Path, shape=(256, 256, 512)) -> Path:
    import zarr
    import zarr.codecs

    src = root / "src.zarr"
    rng = np.random.default_rng(1)
    data = (rng.integers(0, 4, shape, dtype=np.uint8) * 60).astype(np.uint8)
    arr = zarr.create_array(store=str(src), shape=shape, chunks=(32, 32, 32),
                            shards=(64, 64, 64), dtype="uint8",
                            compressors=zarr.codecs.ZstdCodec(), fill_value=0)
    arr[...] = data
    return src


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def bench_cluster() -> None:
    import distributed

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        src = source(root)
        job = {"chunk_size": (32, 32, 32), "task_bytes": 64**3, "progress": False}
        before = load()
        t = time.perf_counter()
        stats = ngshard.convert(src, root / "pool", workers=2, **job)
        base = time.perf_counter() - t
        report(f"conversion of 32 MiB, {stats['tasks']} tasks, local pool of 2", before,
               f"{base:.2f} s")
        cores = len(os.sched_getaffinity(0))
        for n in (2, 4, 8):
            procs = min(n, cores)
            with distributed.LocalCluster(n_workers=procs, threads_per_worker=n // procs,
                                          processes=True, dashboard_address=":0") as cluster, \
                    distributed.Client(cluster) as client:
                before = load()
                t = time.perf_counter()
                ngshard.convert(src, root / f"dask{n}", executor=client.get_executor(), **job)
                took = time.perf_counter() - t
            same = files(root / f"dask{n}") == files(root / "pool")
            report(f"  LocalCluster {procs} processes x {n // procs} threads", before,
                   f"{took:.2f} s ({took / base:.2f}x the pool; "
                   f"{stats['tasks'] / took:.0f} tasks/s; bytes equal to the pool: {same})")


# --- memory ------------------------------------------------------------------------------

MURMUR = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0,
          "hash": "murmurhash3_x86_128", "minishard_bits": 6, "shard_bits": 15,
          "minishard_index_encoding": "gzip", "data_encoding": "gzip"}


def plan_child(src: str, dst: str, sharding: str) -> None:
    """In a child: peak memory over the imports of planning and making every task."""
    from ngshard.pipelines.layout import zarr_to_precomputed

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    plan = zarr_to_precomputed(src, dst, sharding=json.loads(sharding))
    planned = time.perf_counter() - t
    n = chunks = 0
    for stage in plan.stages:
        for tasks in stage:
            for task in tasks:
                n += 1
                if task.positions is not None:
                    chunks += len(task.positions)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"tasks": n, "scattered_chunks": chunks, "plan_s": planned,
                      "all_s": time.perf_counter() - t, "peak_mib": (peak - base) / 1024,
                      "base_mib": base / 1024}))


def bench_memory(tib: float) -> None:
    from ngshard.zarr import create_array

    with tempfile.TemporaryDirectory() as tmp:
        voxels = tib * 2**40
        x = y = 65536
        z = int(round(voxels / (x * y) / 64)) * 64
        src = create_array(Path(tmp) / "big.zarr", (z, y, x), "uint8", (64, 64, 64),
                           shards=(512, 512, 512))
        size = z * y * x / 2**40
        for name, sharding in (("auto (box shards)", '"auto"'),
                               ("murmurhash (scattered)", json.dumps(MURMUR))):
            before = load()
            out = subprocess.run([sys.executable, __file__, "plan-child", src.url,
                                  str(Path(tmp) / "dst"), sharding], capture_output=True,
                                 text=True, timeout=3 * PEER_TIMEOUT)
            if out.returncode:
                raise RuntimeError(out.stderr)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            report(f"client memory planning {size:.1f} TiB (64^3 uint8 chunks), {name}",
                   before, f"{r['peak_mib']:.0f} MiB over the imports ({r['base_mib']:.0f} "
                   f"MiB); {r['tasks']} tasks made in {r['all_s']:.0f} s (plan "
                   f"{r['plan_s']:.0f} s)" + (f"; {r['scattered_chunks']} chunks placed"
                                              if r["scattered_chunks"] else ""))


# --- cleanup -----------------------------------------------------------------------------


def moto_server() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "moto_server"),
                             "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.1)
    raise TimeoutError("moto_server did not start")


def bench_cleanup(tasks: int, objects: int) -> None:
    import requests

    from ngshard.limits import RECORD_TASKS
    from ngshard.pipelines import resume
    from ngshard.storage import open_storage

    proc, url = moto_server()
    try:
        options = {"key": "k", "secret": "s", "endpoint_url": url, "region": "us-east-1"}
        requests.put(f"{url}/bench", timeout=PEER_TIMEOUT).raise_for_status()
        root = open_storage("s3://bench/job", storage_options=options)
        resume.start(root, {"from": "a", "to": "b"}, False)
        before = load()
        t = time.perf_counter()
        with resume.Recorder(root) as recorder:
            for i in range(tasks):
                recorder.add(f"8_8_8/{i:08x}.shard")
        wrote = time.perf_counter() - t
        report(f"records of {tasks} finished tasks ({tasks // RECORD_TASKS} records)", before,
               f"written in {wrote:.1f} s")
        before = load()
        t = time.perf_counter()
        done = resume.start(root, {"from": "a", "to": "b"}, True)
        read = time.perf_counter() - t
        assert len(done) == tasks
        t = time.perf_counter()
        resume.clear(root)
        took = time.perf_counter() - t
        report("  read back (resume) / removed (clear)", before,
               f"{read:.1f} s / {took:.1f} s")
        # one object per task, as records were before: batched deletes vs one at a time
        many = root.child("many")
        before = load()
        t = time.perf_counter()
        many.write_many([(f"{i:08x}", b"") for i in range(objects)])
        made = time.perf_counter() - t
        t = time.perf_counter()
        many.delete_many(many.list())
        bulk = time.perf_counter() - t
        few = min(300, objects)
        many.write_many([(f"{i:08x}", b"") for i in range(few)])
        t = time.perf_counter()
        for name in many.list():
            many.delete(name)
        single = (time.perf_counter() - t) / few
        report(f"  {objects} objects: one listing and batched deletes", before,
               f"{bulk:.2f} s ({bulk / objects * 1e3:.2f} ms each; 800,000: "
               f"{bulk / objects * 8e5 / 60:.1f} min extrapolated); one at a time "
               f"{single * 1e3:.1f} ms each (800,000: {single * 8e5 / 3600:.1f} h "
               f"extrapolated); creating them took {made:.0f} s")
    finally:
        proc.terminate()
        proc.wait(timeout=PEER_TIMEOUT)


# --- write_kv ----------------------------------------------------------------------------


def kv_partition(i: int, n: int, value_bytes: int):
    import pandas as pd

    rng = np.random.default_rng(i)
    keys = rng.integers(0, 2**63, n, dtype=np.uint64)
    blob = rng.bytes(value_bytes * n)
    values = [blob[j * value_bytes:(j + 1) * value_bytes] for j in range(n)]
    return pd.DataFrame({"key": keys, "value": pd.Series(values, dtype=object)})


def rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def bench_write_kv(keys: int, limit: str, value_bytes: int) -> None:
    import dask
    import dask.dataframe as dd
    import distributed
    import pandas as pd

    spec = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0,
            "hash": "murmurhash3_x86_128", "minishard_bits": 6, "shard_bits": 10,
            "minishard_index_encoding": "gzip", "data_encoding": "raw"}
    with tempfile.TemporaryDirectory() as tmp, \
            dask.config.set({"dataframe.convert-string": False}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     memory_limit=limit, dashboard_address=":0",
                                     local_directory=tmp) as cluster, \
            distributed.Client(cluster) as client:
        meta = pd.DataFrame({"key": pd.Series(dtype="u8"), "value": pd.Series(dtype=object)})
        frame = dd.from_map(kv_partition, [0, 1], n=keys // 2, value_bytes=value_bytes,
                            meta=meta)
        peaks: dict[str, int] = {}
        pids: dict[str, set] = {}
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                try:
                    for addr, (pid, mem) in client.run(lambda: (os.getpid(), rss()),
                                                       ).items():
                        peaks[addr] = max(peaks.get(addr, 0), mem)
                        pids.setdefault(addr, set()).add(pid)
                except Exception:  # a worker restarting
                    pass
                stop.wait(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        before = load()
        t = time.perf_counter()
        kv = ngshard.dask.write_kv(Path(tmp) / "kv", spec, frame)
        took = time.perf_counter() - t
        stop.set()
        watcher.join(timeout=PEER_TIMEOUT)
        shards = len(list((Path(tmp) / "kv").glob("*.shard")))
        restarts = sum(len(p) - 1 for p in pids.values())
        per = ", ".join(f"{m / 2**30:.2f}" for m in peaks.values())
        report(f"dask.write_kv of {keys} keys ({value_bytes} B values) in 2 partitions, 2 "
               f"workers of {limit}", before,
               f"{took:.0f} s, {shards} shards, info {'written' if kv else 'missing'}; peak "
               f"memory per worker {per} GiB; worker restarts seen {restarts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", nargs="?", default="all",
                        choices=["all", "sim", "cluster", "memory", "cleanup", "write_kv"])
    parser.add_argument("--tib", type=float, default=100, help="memory: the volume's size")
    parser.add_argument("--tasks", type=int, default=800_000, help="cleanup: tasks recorded")
    parser.add_argument("--objects", type=int, default=3000,
                        help="cleanup: objects deleted in batches (then extrapolated)")
    parser.add_argument("--keys", type=int, default=10_000_000, help="write_kv: keys")
    parser.add_argument("--memory-limit", default="4GiB", help="write_kv: per worker")
    parser.add_argument("--value-bytes", type=int, default=16, help="write_kv: value size")
    args = parser.parse_args()
    print(machine(), flush=True)
    parts = ["sim", "cluster", "memory", "cleanup", "write_kv"] if args.part == "all" \
        else [args.part]
    for part in parts:
        if part == "sim":
            bench_sim()
        elif part == "cluster":
            bench_cluster()
        elif part == "memory":
            bench_memory(args.tib)
        elif part == "cleanup":
            bench_cleanup(args.tasks, args.objects)
        else:
            bench_write_kv(args.keys, args.memory_limit, args.value_bytes)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "plan-child":
        plan_child(*sys.argv[2:5])
    else:
        main()
