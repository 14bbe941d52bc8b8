"""Benchmark of updates and of bulk writes from an iterator: ngshard beside tensorstore.

    python tools/bench_update.py [--keys 200000] [--changes 1000] [--bulk-keys 2000000]
                                 [--repeat 3] [--sequence-keys 50000] [--max-updates 300]

1. Update: a store of --keys x 1 KiB values is written once per library; in each turn every
   case updates --changes random keys of a fresh copy (tensorstore: one transaction; ngshard:
   open_kv "r+" with strategy "rewrite" or "append", compaction off (compact_ratio=None) and
   at the default compact_ratio=0.5). Prints median times, bytes written and read, per-turn
   ratios, and checks through ngshard's reader that the changed keys read new and others old.
   One update leaves too little garbage to compact, so appends cost the same with or without
   compaction there; the cost that compaction defers shows in 2.
2. Successive updates: each library updates one copy of a store of --sequence-keys x 1 KiB
   (smaller, so that tensorstore's whole-shard rewrites fit the time) again and again, with
   --changes new random keys each time, the libraries taking turns per update, until append
   at the default compact_ratio has compacted every shard once (at most --max-updates).
   Prints the totals over the sequence (time, bytes written), the slowest single update and
   the store's size at the end: without compaction, append's garbage grows without bound.
3. Bulk: --bulk-keys x 1 KiB from a generator through write_kv (default buffer), and
   --keys x 1 KiB from a dict, each in a subprocess of its own so that its peak RSS is its own.
   This part runs first, while this process is small: a child's ru_maxrss starts from the size
   of its parent at exec, so it is reported beside VmHWM (the child's own peak). ngshard only.

tensorstore runs without fsync, as ngshard (see tools/benchlib.py). Everything lives under one
temp directory (GBs at full size), removed at the end. Needs tensorstore.
"""

from __future__ import annotations

import argparse
import inspect
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

# tools/bench_kv.py, tools/benchlib.py and tensorstore are imported by the parent only, so
# that the children's peak RSS is ngshard's and numpy's alone; children get the spec as JSON.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SIZE = 1024
BLOCK = 1 << 20
BUFFER = inspect.signature(ngshard.write_kv).parameters["buffer_bytes"].default
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


def random_changes(keys: np.ndarray, count: int, rng) -> dict[int, bytes]:
    changed = rng.choice(keys, count, replace=False).tolist()
    blob = rng.integers(0, 256, count * SIZE, dtype=np.uint8).tobytes()
    return {k: blob[i * SIZE:(i + 1) * SIZE] for i, k in enumerate(changed)}


def store_bytes(path: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())


# --- 1. and 2. updates -------------------------------------------------------------------


class Updater:
    """The update cases: each applies a dict of changes to the store at a path, counting the
    bytes its system calls wrote and read, and keeps ngshard's commit plans."""

    def __init__(self, spec) -> None:
        from bench_kv import ts_write
        from benchlib import FSYNC

        self.spec, self.ts_write, self.durable = spec, ts_write, FSYNC
        self.io: dict[str, list[tuple[int, int]]] = {}
        self.plans: dict[str, list] = {}

    def case(self, name: str, strategy: str | None, compact_ratio: float | None = None):
        """fn(path, changes) for tensorstore (strategy None) or ngshard."""
        def run(path: str, changes: dict[int, bytes]) -> None:
            before = io_counters()
            if strategy is None:
                self.ts_write(path, changes)
            else:
                with ngshard.open_kv(path, self.spec, "r+", strategy=strategy,
                                     compact_ratio=compact_ratio,
                                     durable=self.durable) as kv:
                    kv.update(changes)
                    self.plans.setdefault(name, []).append(kv.commit())
            after = io_counters()
            self.io.setdefault(name, []).append((after["wchar"] - before["wchar"],
                                                 after["rchar"] - before["rchar"]))
        return run


CASES = {"tensorstore (one transaction)": (None, None),
         "ngshard rewrite, compact_ratio=None": ("rewrite", None),
         "ngshard append, compact_ratio=None": ("append", None),
         "ngshard append, compact_ratio=0.5 (default)": ("append", 0.5)}
TS_NAME = next(iter(CASES))
DEFAULT = "ngshard append, compact_ratio=0.5 (default)"


class Stores:
    """A store of n random keys written once by each library (``pristine``), and the check
    that an updated copy reads the new values of changed keys and the old ones of others."""

    def __init__(self, work: str, n: int, seed: int) -> None:
        from benchlib import SPEC

        self.spec = ngshard.ShardingSpec.from_json(SPEC)
        items = random_items(n, seed)
        self.keys = np.fromiter(items, np.uint64, count=len(items))
        self.pristine = {"ngshard": f"{work}/pristine-{seed}-ngshard",
                         "tensorstore": f"{work}/pristine-{seed}-ts"}
        ngshard.write_kv(self.pristine["ngshard"], self.spec, items)
        Updater(self.spec).ts_write(self.pristine["tensorstore"], items)
        self.items = items

    def source(self, strategy: str | None) -> str:
        return self.pristine["ngshard" if strategy else "tensorstore"]

    def check(self, name: str, path: str, new: dict[int, bytes], old: list[int]) -> None:
        reader = ngshard.open_kv(path, self.spec)
        got = reader.get_many(list(new) + old)
        bad = [k for k in new if got.get(k) != new[k]]
        bad += [k for k in old if got.get(k) != self.items[k]]
        assert not bad, f"{name}: {len(bad)} of {len(new) + len(old)} keys misread"
        assert len(reader.keys_array()) == len(self.keys), f"{name}: key count changed"


def bench_update(args, work: str) -> None:
    """1. One update of a fresh copy, the cases taking turns."""
    from benchlib import SPEC, report, take_turns

    stores = Stores(work, args.keys, 0)
    keys = stores.keys
    rng = np.random.default_rng(1)
    changes = random_changes(keys, args.changes, rng)
    untouched = [k for k in rng.choice(keys, 2 * args.check, replace=False).tolist()
                 if k not in changes][:args.check]
    sample = {k: changes[k] for k in list(changes)[:args.check]}
    changed_bytes = args.changes * SIZE
    print(f"update: {len(keys)} keys x {SIZE} B, {args.changes} keys changed "
          f"({changed_bytes / 1e6:.3g} MB), spec {SPEC}")
    updater = Updater(stores.spec)
    counter = iter(range(10**6))
    cases = {}
    for name, (strategy, ratio) in CASES.items():
        def copy(strategy=strategy) -> str:
            path = f"{work}/update-{next(counter)}"
            shutil.copytree(stores.source(strategy), path)
            return path

        def after(path: str, _, name=name) -> None:
            stores.check(name, path, sample, untouched)
            shutil.rmtree(path)

        fn = updater.case(name, strategy, ratio)
        cases[name] = (copy, lambda path, fn=fn: fn(path, changes), after)
    times = take_turns(cases, args.repeat)
    for name, plans in updater.plans.items():
        actions = sorted({p.action for plan in plans for p in plan.shards})
        assert actions == [CASES[name][0]], f"{name}: plans have actions {actions}"
    print("  (each turn on fresh copies; bytes are the growth of wchar/rchar in /proc/self/io, "
          "i.e. bytes passed to write/read system calls: the data may stay in the page cache)")
    for ours in (n for n in CASES if n != TS_NAME):
        report(f"update {args.changes} random keys of {len(keys)}, fresh copy",
               {ours: times[ours], TS_NAME: times[TS_NAME]})
        for i, what in enumerate(("written (wchar)", "read (rchar)")):
            report(f"  bytes {what} by that update", {
                n: [io[i] / 1e6 for io in updater.io[n]] for n in (ours, TS_NAME)}, unit="MB")
    print("  written / changed bytes: " + ", ".join(
        f"{n}: {statistics.median(w for w, _ in updater.io[n]) / changed_bytes:.3g}x"
        for n in CASES))
    print(f"  compact_ratio=0.5 plans only appends on one update (the garbage is ~1% of each "
          f"shard); checked after every update: {len(sample)} changed and {len(untouched)} "
          f"untouched keys read back new and old through ngshard.open_kv")


def bench_sequence(args, work: str) -> None:
    """2. Successive updates of one copy per library, until the default policy has compacted
    every shard once."""
    from benchlib import SPEC, report, take_turns

    stores = Stores(work, args.sequence_keys, 3)
    keys = stores.keys
    seq = [TS_NAME, DEFAULT, "ngshard append, compact_ratio=None"]
    updater = Updater(stores.spec)
    paths, fns = {}, {}
    for i, name in enumerate(seq):
        strategy, ratio = CASES[name]
        paths[name] = f"{work}/sequence-{i}"
        shutil.copytree(stores.source(strategy), paths[name])
        fns[name] = updater.case(name, strategy, ratio)
    size_before = store_bytes(stores.pristine["ngshard"])
    latest: dict[int, bytes] = {}
    compacted: set[str] = set()
    num_shards = 1 << SPEC["shard_bits"]
    rng = np.random.default_rng(4)
    times: dict[str, list[float]] = {name: [] for name in seq}
    steps = 0
    while steps < args.max_updates and len(compacted) < num_shards:
        step = random_changes(keys, args.changes, rng)
        latest.update(step)
        order = seq[steps % len(seq):] + seq[:steps % len(seq)]
        turn = take_turns({name: (lambda p=paths[name]: p,
                                  lambda p, fn=fns[name], step=step: fn(p, step))
                           for name in order}, 1)
        for name, t in turn.items():
            times[name] += t
        compacted |= {p.name for p in updater.plans[DEFAULT][-1].shards
                      if p.action == "compact"}
        steps += 1
    first = next((i + 1 for i, plan in enumerate(updater.plans[DEFAULT])
                  if any(p.action == "compact" for p in plan.shards)), None)
    print(f"successive updates of a store of {len(keys)} keys x {SIZE} B "
          f"({size_before / 1e6:.0f} MB): {steps} updates of {args.changes} random keys each, "
          f"one copy per library, turns per update; the default compact_ratio first compacted "
          f"a shard at update {first} and had compacted {len(compacted)} of {num_shards} "
          f"shards by update {steps}")
    for ours in seq[1:]:
        pair = (ours, TS_NAME)
        report(f"{steps} successive updates of {args.changes} keys, total time",
               {n: [sum(times[n])] for n in pair})
        report(f"  slowest single update of the {steps}", {n: [max(times[n])] for n in pair})
        report(f"  bytes written (wchar) by the {steps} updates",
               {n: [sum(w for w, _ in updater.io[n]) / 1e6] for n in pair}, unit="MB")
        report(f"  store size after them (before: {size_before / 1e6:.0f} MB)",
               {n: [store_bytes(paths[n]) / 1e6] for n in pair}, unit="MB")
    old = [k for k in rng.choice(keys, 2 * args.check, replace=False).tolist()
           if k not in latest][:args.check]
    sample = dict(list(latest.items())[:: max(1, len(latest) // args.check)])
    for name, path in paths.items():
        stores.check(name, path, sample, old)
    print(f"  checked: {len(sample)} changed and {len(old)} untouched keys of each store read "
          f"back latest and old")


# --- 3. bulk writes, each in its own process ------------------------------------------------


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
    from benchlib import CHILD_TIMEOUT, SPEC

    cmd = [sys.executable, os.path.abspath(__file__), "--_child", what, json.dumps(SPEC),
           *map(str, args)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True,
                         timeout=CHILD_TIMEOUT).stdout
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
    ap.add_argument("--sequence-keys", type=int, default=50_000,
                    help="keys of the store updated again and again")
    ap.add_argument("--max-updates", type=int, default=300,
                    help="bound of the successive updates")
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
    from benchlib import header, summary

    header(f"bench_update: {args}")
    work = tempfile.mkdtemp(prefix="ngshard-bench-update-")
    try:
        t = time.perf_counter()
        if not args.skip_bulk:
            bench_bulk(args, work)
        if not args.skip_update:
            bench_update(args, work)
            bench_sequence(args, work)
        print(f"total {time.perf_counter() - t:.0f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary("tools/bench_update.py")


if __name__ == "__main__":
    main()
