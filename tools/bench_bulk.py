"""Bulk writes at scale: time and peak memory of ``write_kv`` by key count, one child process
per run (peak RSS is the child's VmHWM, so runs do not inherit each other's peaks).

    python tools/bench_bulk.py generator --keys 2e6 8e6 16e6
    python tools/bench_bulk.py pairs --keys 2e6 8e6 16e6
    python tools/bench_bulk.py arrays --keys 16e6
    python tools/bench_bulk.py dask --keys 4e6

``generator``: ``((k, value) for k in range(n))`` with one 100-byte value (issue 14's
measurement: the cost is ngshard's, not the generator's). ``pairs``: distinct values made a
block at a time (keys a bijective scramble of 0..n-1), the per-key Python work a user's own
loop does. ``arrays``: the array API (keys as a uint64 array, values as one buffer with
offsets); peak RSS is also given beyond the input arrays. ``dask``: ``ngshard.dask.write_kv``
on a LocalCluster of worker processes, compared byte for byte with the local writer and read
back with tensorstore. Spec: murmur hash, 64 shards x 1,024 minishards, gzip minishard
indices, raw data; writes durable (fsynced).
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
        "preshift_bits": 0, "minishard_bits": 10, "shard_bits": 6,
        "minishard_index_encoding": "gzip", "data_encoding": "raw"}
VALUE_SIZE = int(os.environ.get("BENCH_VALUE_SIZE", 100))  # --value-size, for the children
BLOCK = max(16, min(1 << 16, (6 << 20) // VALUE_SIZE))  # pairs made at a time
_ODD = np.uint64(0x9E3779B97F4A7C15)  # multiplying by an odd number permutes the uint64s


def make_keys(first: int, n: int) -> np.ndarray:
    return np.arange(first, first + n, dtype=np.uint64) * _ODD


def make_values(keys: np.ndarray, size: int = VALUE_SIZE) -> np.ndarray:
    """(n, size) uint8: each value starts with its key, then bytes that depend on it."""
    out = np.empty((len(keys), size), np.uint8)
    out[:, :8] = keys.view(np.uint8).reshape(-1, 8)
    np.add(np.arange(size - 8, dtype=np.uint8)[None, :],
           (keys % np.uint64(251)).astype(np.uint8)[:, None], out=out[:, 8:])
    return out


def pairs(n: int):
    """(key, bytes) pairs, BLOCK at a time: the per-key Python work a user's loop does."""
    return pairs_range(0, n)


def peak_rss() -> tuple[int, int]:
    """(current, peak) resident set size of this process in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out["VmRSS"], out["VmHWM"]


def reset_peak() -> None:
    """Start VmHWM afresh from the current RSS (Linux >= 4.0), so a figure excludes setup."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def child(mode: str, n: int, path: str) -> dict:
    import ngshard

    result: dict = {}
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    if mode == "generator":
        value = bytes(VALUE_SIZE)
        t = time.perf_counter()
        ngshard.write_kv(path, SPEC, ((k, value) for k in range(n)))
    elif mode == "pairs":
        t = time.perf_counter()
        ngshard.write_kv(path, SPEC, pairs(n))
    elif mode == "arrays":
        keys = make_keys(0, n)
        values = make_values(keys).reshape(-1)
        offsets = np.arange(0, (n + 1) * VALUE_SIZE, VALUE_SIZE, dtype=np.uint64)
        reset_peak()
        result["input_rss"] = peak_rss()[0]
        t = time.perf_counter()
        ngshard.write_kv(path, SPEC, keys=keys, values=values, offsets=offsets)
    elif mode == "dask":
        return dask_child(n, path)
    else:
        raise SystemExit(f"unknown mode {mode}")
    result["seconds"] = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu"] = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    result["peak_rss"] = peak_rss()[1]
    return result


def pairs_range(first: int, count: int):
    for a in range(first, first + count, BLOCK):
        keys = make_keys(a, min(BLOCK, first + count - a))
        blob = make_values(keys).tobytes()
        yield from zip(keys.tolist(), [blob[i:i + VALUE_SIZE]
                                       for i in range(0, len(blob), VALUE_SIZE)])


def dask_child(n: int, path: str, workers: int = 2, partitions: int = 16) -> dict:
    """The local writer, then ngshard.dask on a LocalCluster, from the same pairs; the shards
    compared byte for byte, and a sample of keys read back with tensorstore."""
    import dask.bag as db
    import distributed
    import tensorstore as ts
    from benchlib import PEER_TIMEOUT

    import ngshard
    import ngshard.dask

    local, remote = f"{path}/local", f"{path}/dask"
    t = time.perf_counter()
    ngshard.write_kv(local, SPEC, pairs(n))
    local_seconds = time.perf_counter() - t
    step = -(-n // partitions)
    firsts = list(range(0, n, step))
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster):
        bag = db.from_sequence(firsts, npartitions=len(firsts)).map_partitions(
            lambda fs: [p for f in fs for p in pairs_range(f, min(step, n - f))])
        t = time.perf_counter()
        ngshard.dask.write_kv(remote, SPEC, bag)
        dask_seconds = time.perf_counter() - t
    names = sorted(f for f in os.listdir(local) if f.endswith(".shard"))
    same = names == sorted(f for f in os.listdir(remote) if f.endswith(".shard")) and all(
        filecmp.cmp(f"{local}/{f}", f"{remote}/{f}", shallow=False) for f in names)
    store = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                             "base": f"file://{remote}/", "metadata": SPEC}
                            ).result(timeout=PEER_TIMEOUT)
    sample = make_keys(0, n)[np.random.default_rng(0).integers(0, n, 10_000)]
    expected = make_values(sample)
    read = [store.read(int(k).to_bytes(8, "big")) for k in sample]
    ts_ok = all(r.result(timeout=PEER_TIMEOUT).value == e.tobytes() for r, e in zip(read, expected))
    return {"seconds": dask_seconds, "local_seconds": local_seconds, "identical": same,
            "shards": len(names), "tensorstore_reads": ts_ok, "cpu": float("nan"),
            "peak_rss": peak_rss()[1]}


def run_child(mode: str, n: int, path: str) -> dict:
    from benchlib import CHILD_TIMEOUT

    out = subprocess.run([sys.executable, __file__, "--child", mode, str(n), path],
                         capture_output=True, text=True, timeout=CHILD_TIMEOUT)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["generator", "pairs", "arrays", "dask"])
    ap.add_argument("--keys", type=float, nargs="+", default=[2e6])
    ap.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    ap.add_argument("--value-size", type=int, default=100, help="bytes per value")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    if "--child" in sys.argv:
        mode, n, path = sys.argv[sys.argv.index("--child") + 1:][:3]
        print(json.dumps(child(mode, int(n), path)))
        return
    args = ap.parse_args()
    os.environ["BENCH_VALUE_SIZE"] = str(args.value_size)  # for the children
    work = tempfile.mkdtemp(prefix="ngshard-bulk-", dir=args.dir)
    print(f"{args.mode}: {args.value_size}-byte values, spec {json.dumps(SPEC)}")
    print(f"{'keys':>12} {'time':>8} {'keys/s':>9} {'CPU':>8} {'peak RSS':>10}"
          + (f" {'beyond input':>13}" if args.mode == "arrays" else ""))
    try:
        for n in map(int, args.keys):
            path = os.path.join(work, f"{args.mode}-{n}")
            r = run_child(args.mode, n, path)
            extra = f" {(r['peak_rss'] - r['input_rss']) / 1e6:>10.0f} MB" \
                if "input_rss" in r else ""
            if args.mode == "dask":
                print(f"{n:>12,} dask {r['seconds']:.1f}s, local writer {r['local_seconds']:.1f}s"
                      f"; {r['shards']} shards byte for byte the local writer's: "
                      f"{r['identical']}; tensorstore reads 10,000 sampled keys right: "
                      f"{r['tensorstore_reads']}", flush=True)
                shutil.rmtree(path)
                continue
            print(f"{n:>12,} {r['seconds']:>7.1f}s {n / r['seconds'] / 1e6:>7.2f} M "
                  f"{r['cpu']:>7.1f}s "
                  f"{r['peak_rss'] / 1e6:>7.0f} MB{extra}", flush=True)
            shutil.rmtree(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
