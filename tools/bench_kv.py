"""Benchmark of the sharded key-value store: ngshard beside tensorstore, same data, one process.

    python tools/bench_kv.py [--keys 200000] [--value-size 1024] [--repeat 3]

Prints medians and the ratio ngshard / peer for each figure of issue 2 (lower is better for
times, higher for rates). Needs the test extra (tensorstore).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import tracemalloc

import mmh3
import numpy as np
import tensorstore as ts

import ngshard

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
        "preshift_bits": 0, "minishard_bits": 6, "shard_bits": 4,
        "minishard_index_encoding": "gzip", "data_encoding": "raw"}


def timed(fn, repeat: int, setup=None) -> float:
    times = []
    for _ in range(repeat):
        arg = setup() if setup else None
        t = time.perf_counter()
        fn(arg)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def row(name: str, ours: float, peer: float, unit: str = "s", peer_name: str = "tensorstore"):
    ratio = ours / peer if peer else float("nan")
    print(f"{name:<44} ngshard {ours:>10.4g} {unit:<6} {peer_name} {peer:>10.4g} {unit:<6} "
          f"ratio {ratio:.2f}")


def ts_open(path: str):
    return ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{path}/",
                            "metadata": SPEC}).result()


def ts_write(path: str, items: dict[int, bytes]) -> None:
    """Write or update items through tensorstore, in one transaction."""
    kv = ts_open(path)
    txn = ts.Transaction()
    kvt = kv.with_transaction(txn)
    for k, v in items.items():
        kvt[k.to_bytes(8, "big")] = v
    txn.commit_async().result()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--reads", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n, size = args.keys, args.value_size
    keys = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))
    n = len(keys)
    blob = rng.integers(0, 256, n * size, dtype=np.uint8).tobytes()
    items = {int(k): blob[i * size:(i + 1) * size] for i, k in enumerate(keys)}
    spec = ngshard.ShardingSpec.from_json(SPEC)
    work = tempfile.mkdtemp(prefix="ngshard-bench-")
    print(f"{n} keys x {size} B, spec {SPEC}")

    # Locating: vectorized numpy hash against a Python loop over mmh3 (the peers' way).
    million = rng.integers(0, 2**64 - 1, 1_000_000, dtype=np.uint64, endpoint=True)
    spec.locate(million)  # warm up: thread pool start, first page faults
    t_ours = timed(lambda _: spec.locate(million), args.repeat)
    few = million[:200_000].tolist()
    t_loop = timed(lambda _: [mmh3.hash128(k.to_bytes(8, "little"), 0, False, signed=False)
                              for k in few], args.repeat) * 5
    row("locate 1M keys (M keys/s)", 1 / t_ours, 1 / t_loop, "Mkey/s", "mmh3 loop")

    # Bulk write, each repetition into a fresh directory.
    counter = iter(range(10**6))

    def fresh():
        return f"{work}/w{next(counter)}"

    t_ours = timed(lambda p: ngshard.write_kv(p, spec, items), args.repeat, fresh)
    t_ts = timed(lambda p: ts_write(p, items), args.repeat, fresh)
    row(f"write {n} keys (one transaction)", t_ours, t_ts)

    ours_dir, ts_dir = f"{work}/ours", f"{work}/ts"
    ngshard.write_kv(ours_dir, spec, items)
    ts_write(ts_dir, items)

    tracemalloc.start()
    ngshard.write_kv(f"{work}/mem", spec, items)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{'peak Python/numpy memory of the write':<44} {peak / 2**20:.0f} MiB for "
          f"{n * size / 2**20:.0f} MiB written ({peak / (n * size):.2f}x)")

    sample = rng.choice(keys, args.reads, replace=False)
    sample_list = sample.tolist()
    sample_bytes = [k.to_bytes(8, "big") for k in sample_list]

    def ts_batch(kv):
        futures = [kv.read(k) for k in sample_bytes]
        return [f.result().value for f in futures]

    t_ours = timed(lambda kv: kv.get_many(sample), args.repeat,
                   lambda: ngshard.open_kv(ours_dir, spec))
    t_ts = timed(ts_batch, args.repeat, lambda: ts_open(ts_dir))
    row(f"get_many {args.reads} random keys, fresh store", t_ours, t_ts)

    warm = ngshard.open_kv(ours_dir, spec)
    warm.get_many(sample)
    ts_warm = ts_open(ts_dir)
    ts_batch(ts_warm)
    t_ours = timed(lambda _: [warm[k] for k in sample_list], args.repeat)
    t_ts = timed(lambda _: [ts_warm.read(k).result().value for k in sample_bytes], args.repeat)
    row("one by one, warm store (keys/s)", args.reads / t_ours, args.reads / t_ts, "key/s")

    t_ours = timed(lambda kv: kv.keys_array(), args.repeat,
                   lambda: ngshard.open_kv(ours_dir, spec))
    t_ts = timed(lambda kv: kv.list().result(), args.repeat, lambda: ts_open(ts_dir))
    row(f"list all {n} keys, fresh store", t_ours, t_ts)

    check = ngshard.open_kv(ts_dir, spec).get_many(sample)
    assert all(check[k] == items[k] for k in sample_list), "ngshard misread tensorstore's store"
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
