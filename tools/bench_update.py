"""Benchmark of updates and of bulk writes from an iterator: ngshard beside tensorstore.

    python tools/bench_update.py [--keys 200000] [--changes 1000] [--bulk-keys 2000000]
                                 [--repeat 3]

1. Update: a store of --keys x 1 KiB values is written once per library; each repetition copies
   it afresh and updates --changes random keys (tensorstore: one transaction; ngshard: open_kv
   "r+" with strategy "rewrite" and with "append"). Prints median times, bytes written and the
   ratios, and checks through ngshard's reader that the changed keys read new and others old.
2. Bulk: --bulk-keys x 1 KiB from a generator through write_kv (default buffer), and
   --keys x 1 KiB from a dict, each in a subprocess of its own so that its peak RSS is its own.
   This part runs first, while this process is small: a child's ru_maxrss starts from the size
   of its parent at exec, so it is reported beside VmHWM (the child's own peak).

Everything lives under one temp directory (GBs at full size), removed at the end. Needs the
test extra (tensorstore).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import ngshard

# tools/bench_kv.py (SPEC, row, ts_open) and tensorstore are imported by the parent only, so
# that the children's peak RSS is ngshard's and numpy's alone; children get the spec as JSON.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZE = 1024
BLOCK = 1 << 20
BUFFER = ngshard.kv.DEFAULT_BUFFER_BYTES
RSS_GOAL_MB = 600
RATE_GOAL = 0.70


def io_counters() -> dict[str, int]:
    """This process's I/O counters (all threads): wchar/rchar count bytes passed to write/read
    system calls, write_bytes/read_bytes what reached the block layer so far."""
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(":") for line in f)}


def peak_rss_mb() -> tuple[float, float]:
    """(ru_maxrss, VmHWM) in MB. ru_maxrss survives execve, so a child started from a big
    parent would report the parent's size; VmHWM is the peak of this process's own memory."""
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6, hwm * 1024 / 1e6


def random_items(n: int, seed: int) -> dict[int, bytes]:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))
    blob = rng.integers(0, 256, len(keys) * SIZE, dtype=np.uint8).tobytes()
    return {int(k): blob[i * SIZE:(i + 1) * SIZE] for i, k in enumerate(keys.tolist())}


# --- 1. updates -------------------------------------------------------------------------------


def bench_updates(args, work: str) -> None:
    from bench_kv import SPEC, row, ts_write

    spec = ngshard.ShardingSpec.from_json(SPEC)
    items = random_items(args.keys, 0)
    keys = np.fromiter(items, np.uint64, count=len(items))
    rng = np.random.default_rng(1)
    changed = rng.choice(keys, args.changes, replace=False).tolist()
    blob = rng.integers(0, 256, args.changes * SIZE, dtype=np.uint8).tobytes()
    changes = {k: blob[i * SIZE:(i + 1) * SIZE] for i, k in enumerate(changed)}
    changed_set = set(changed)
    untouched = [k for k in rng.choice(keys, 2 * args.check, replace=False).tolist()
                 if k not in changed_set][:args.check]
    sample = changed[:args.check]
    changed_bytes = args.changes * SIZE
    print(f"update: {len(items)} keys x {SIZE} B, {args.changes} keys changed "
          f"({changed_bytes / 1e6:.3g} MB), spec {SPEC}")

    pristine = {"ngshard": f"{work}/pristine-ngshard", "tensorstore": f"{work}/pristine-ts"}
    ngshard.write_kv(pristine["ngshard"], spec, items)
    ts_write(pristine["tensorstore"], items)
    del items  # the checks below need only the old values of the untouched sample
    old = ngshard.open_kv(pristine["ngshard"], spec).get_many(untouched)

    def run_ts(path):
        ts_write(path, changes)

    def run_ngshard(strategy):
        def run(path):
            with ngshard.open_kv(path, spec, "r+", strategy=strategy, compact_ratio=None) as kv:
                kv.update(changes)
                return kv.commit()
        return run

    runs = {"tensorstore": ("tensorstore", run_ts),
            "rewrite": ("ngshard", run_ngshard("rewrite")),
            "append": ("ngshard", run_ngshard("append"))}
    results = {}
    for name, (source, fn) in runs.items():
        times, wchar, rchar, planned = [], [], [], []
        for rep in range(args.repeat):
            path = f"{work}/update-{name}-{rep}"
            shutil.copytree(pristine[source], path)
            before = io_counters()
            t = time.perf_counter()
            plan = fn(path)
            times.append(time.perf_counter() - t)
            after = io_counters()
            wchar.append(after["wchar"] - before["wchar"])
            rchar.append(after["rchar"] - before["rchar"])
            if plan is not None:
                planned.append(plan.write_bytes)
                actions = sorted({p.action for p in plan.shards})
                assert actions == [name], f"{name}: plan has actions {actions}"
            reader = ngshard.open_kv(path, spec)
            got = reader.get_many(sample + untouched)
            bad = [k for k in sample if got.get(k) != changes[k]]
            bad += [k for k in untouched if got.get(k) != old[k]]
            assert not bad, f"{name}: {len(bad)} of {len(sample) + len(untouched)} keys misread"
            assert len(reader.keys_array()) == len(keys), f"{name}: key count changed"
            shutil.rmtree(path)
        results[name] = (statistics.median(times), statistics.median(wchar),
                         statistics.median(rchar), statistics.median(planned) if planned else 0)
    print(f"  (median of {args.repeat}, each on a fresh copy of the store; bytes are the growth of "
          f"wchar/rchar in /proc/self/io, i.e. bytes passed to write/read system calls, since "
          f"the data may stay in the page cache)")
    t_ts, w_ts, r_ts, _ = results["tensorstore"]
    for name in ("rewrite", "append"):
        t, w, r, p = results[name]
        row(f"update {args.changes} keys, {name} (s)", t, t_ts)
        row(f"  bytes written, wchar ({name}) (MB)", w / 1e6, w_ts / 1e6, "MB")
        row(f"  bytes read, rchar ({name}) (MB)", r / 1e6, r_ts / 1e6, "MB")
        print(f"  {'written / changed bytes':<42} ngshard {w / changed_bytes:>10.4g} x      "
              f"tensorstore {w_ts / changed_bytes:>10.4g} x      (plan's write_bytes "
              f"{p / 1e6:.4g} MB, {p / changed_bytes:.4g} x)")
    print(f"  all runs: the {len(sample)} changed and {len(untouched)} untouched keys checked "
          f"read back new and old through ngshard.open_kv")


# --- 2. bulk writes, each in its own process ------------------------------------------------


def blocks(seed: int, count: int = 4) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, BLOCK, dtype=np.uint8).tobytes() for _ in range(count)]


def generated_value(blks: list[bytes], i: int) -> bytes:
    j = i * SIZE
    block = blks[(j // BLOCK) % len(blks)]
    return block[j % BLOCK:j % BLOCK + SIZE]


def child_bulk(spec: ngshard.ShardingSpec, n: int, path: str) -> dict:
    """Write n generated items from an iterator; measures time, peak RSS, wchar."""
    keys = np.random.default_rng(2).integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    blks = blocks(3)

    def generate():  # keys converted a slice at a time: the benchmark's own memory stays small
        for start in range(0, n, 1 << 16):
            for i, k in enumerate(keys[start:start + (1 << 16)].tolist(), start):
                yield k, generated_value(blks, i)

    t = time.perf_counter()
    for _ in generate():  # what producing the items costs, apart from writing them
        pass
    generating = time.perf_counter() - t
    before = io_counters()
    t = time.perf_counter()
    ngshard.write_kv(path, spec, generate())  # default buffer; spills beside the shards
    seconds = time.perf_counter() - t
    out = {"seconds": seconds, "generating": generating, "rss_mb": peak_rss_mb(),
           "wchar": io_counters()["wchar"] - before["wchar"], "bytes": n * SIZE}
    # Check a sample (keys are random, so a repeat within n is possible but very unlikely:
    # the last value of a repeated key wins).
    last = {k: i for i, k in enumerate(keys.tolist())}
    pick = np.random.default_rng(4).choice(n, min(n, 1000), replace=False).tolist()
    want = {int(keys[i]): generated_value(blks, last[int(keys[i])]) for i in pick}
    got = ngshard.open_kv(path, spec).get_many(list(want))
    assert got == want, "bulk store misread"
    return out


def child_memory(spec: ngshard.ShardingSpec, n: int, path: str, repeat: int) -> dict:
    """Write n random items from a dict (as tools/bench_kv.py), median of repeat runs."""
    items = random_items(n, 5)
    times = []
    for rep in range(repeat):
        t = time.perf_counter()
        ngshard.write_kv(f"{path}-{rep}", spec, items)
        times.append(time.perf_counter() - t)
        shutil.rmtree(f"{path}-{rep}")
    return {"seconds": statistics.median(times), "rss_mb": peak_rss_mb(),
            "bytes": len(items) * SIZE}


def in_child(what: str, *args) -> dict:
    from bench_kv import SPEC

    cmd = [sys.executable, os.path.abspath(__file__), "--_child", what, json.dumps(SPEC),
           *map(str, args)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def bench_bulk(args, work: str) -> None:
    print("bulk write: each in a subprocess of its own, started before the update phase grows "
          "this process (ru_maxrss survives execve); peak RSS = ru_maxrss, VmHWM beside it; "
          "MB = 1e6 bytes")
    mem = in_child("memory", args.keys, f"{work}/memory", args.repeat)
    bulk = in_child("bulk", args.bulk_keys, f"{work}/bulk")
    shutil.rmtree(f"{work}/bulk", ignore_errors=True)
    mem_rate = mem["bytes"] / 1e6 / mem["seconds"]
    rate = bulk["bytes"] / 1e6 / bulk["seconds"]
    for name, r, rate_, note in (
            (f"in-memory dict, {args.keys} keys", mem, mem_rate, f"median of {args.repeat}"),
            (f"iterator, {args.bulk_keys} keys, {BUFFER >> 20} MiB buffer", bulk, rate,
             f"one run; {bulk['bytes'] / 1e6:.0f} MB of values, wchar "
             f"{bulk['wchar'] / 1e6:.0f} MB incl. spill files")):
        maxrss, hwm = r["rss_mb"]
        print(f"  {name:<42} {r['seconds']:>8.3g} s  {rate_:>7.1f} MB/s  peak RSS {maxrss:>6.0f} "
              f"MB (VmHWM {hwm:.0f})  ({note})")
    frac = rate / mem_rate
    alone = bulk["bytes"] / 1e6 / (bulk["seconds"] - bulk["generating"]) / mem_rate
    peak = max(bulk["rss_mb"])
    print(f"  {'bulk / in-memory throughput':<42} {frac:>8.0%}     goal >= {RATE_GOAL:.0%}  "
          f"{'ok' if frac >= RATE_GOAL else 'MISSED'}")
    print(f"  {'  the same without generating the items':<42} {alone:>8.0%}     (the generator "
          f"alone takes {bulk['generating']:.2f} s; the dict of the in-memory write is made "
          f"before its clock starts)")
    print(f"  {'bulk peak RSS':<42} {peak:>8.0f} MB  goal < {RSS_GOAL_MB} MB  "
          f"{'ok' if peak < RSS_GOAL_MB else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=200_000, help="keys of the updated store")
    ap.add_argument("--changes", type=int, default=1_000, help="keys changed per update")
    ap.add_argument("--check", type=int, default=200, help="keys read back after each update")
    ap.add_argument("--bulk-keys", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-update", action="store_true")
    ap.add_argument("--skip-bulk", action="store_true")
    ap.add_argument("--_child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._child:
        what, spec, n, path, *rest = args._child
        fn = child_bulk if what == "bulk" else child_memory
        print(json.dumps(fn(ngshard.ShardingSpec.from_json(spec), int(n), path,
                            *map(int, rest))))
        return
    work = tempfile.mkdtemp(prefix="ngshard-bench-update-")
    try:
        t = time.perf_counter()
        if not args.skip_bulk:
            bench_bulk(args, work)
        if not args.skip_update:
            bench_updates(args, work)
        print(f"total {time.perf_counter() - t:.0f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
