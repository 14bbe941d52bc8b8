"""Capacity model of a sharded store: what a key count, a value size and a spec cost.

    python tools/capacity.py --keys 1e9 --value-size 100 [--spec JSON | --auto]
    python tools/capacity.py --table          # 1 B keys, sharding="auto" choices (README)
    python tools/capacity.py --check          # beside measured runs at 1 M, 4 M and 16 M keys

Predicts, per spec: shards and their keys (mean and the largest, Poisson), minishards and their
keys, shard index and minishard index sizes (the gzip size by compressing a typical minishard
index of the layout ngshard writes), shard file size; memory of a writer (``write_kv`` from
pairs with its buffer, from arrays, and per Dask task) and of a reader (index cache per shard,
for the whole store); requests and bytes of a random read, cold and warm; and the write time
on this machine (2 cores), from rates measured by ``tools/bench_bulk.py``.

``--check`` runs ``tools/bench_bulk.py`` children (pairs and arrays, 100-byte values,
murmur hash, 64 shards x 1,024 minishards) and prints each prediction beside the measured
figure: peak RSS, time, and the mean shard and minishard index sizes of the files written.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import numpy as np

import ngshard
from ngshard.limits import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_CACHE_BYTES,
    PAIR_BATCH,
    PAIR_BATCH_BYTES,
    SPILL_COPY_BYTES,
)

HERE = os.path.dirname(os.path.abspath(__file__))

# --- this machine (2 cores), measured with tools/bench_bulk.py ------------------------------
BASE_RSS = 45e6  # Python, numpy and ngshard imported
# write_kv from (key, value) pairs: seconds per key and per value byte, both cores busy
PAIRS_KEY_SECONDS, PAIRS_BYTE_SECONDS = 1.0e-6, 3.0e-9
# write_kv from arrays
ARRAYS_KEY_SECONDS, ARRAYS_BYTE_SECONDS = 0.25e-6, 2.0e-9
# the staging's bookkeeping per buffered key (keys, lengths and the sort of a spill) and the
# bytearray's growth slack; the Python objects of one batch of pairs
KEY_BYTES_IN_BUFFER, BUFFER_SLACK, PAIR_OBJECT_BYTES = 48, 1.125, 90
# finishing one spilled shard: its records, their sort, and the copy windows
FINISH_KEY_BYTES, WINDOW_BYTES = 60, 3 * SPILL_COPY_BYTES
# the array path: shard order (int32), minishard (uint16) and shard (uint8) per key, and per
# shard in flight its gathered values and index temporaries
ARRAY_KEY_BYTES, ARRAY_SHARD_KEY_BYTES = 7, 60
# a pandas row of (uint64, bytes object, two int64) in a Dask partition, beyond the value
DASK_ROW_BYTES = 120
WORKERS = 2
DECODED_ENTRY_BYTES = 24  # a cached minishard index entry: key, start, size


@dataclass
class Workload:
    keys: int
    value_bytes: float  # mean stored (encoded) size
    value_spread: float = 0.0  # standard deviation of the size


def auto_spec(keys: int, value_bytes: float) -> ngshard.ShardingSpec:
    """``sharding="auto"`` for a segment layer (ngshard.layers' rule, if that package is
    there; else the same rule: ~64 keys per minishard, at most 2**14 keys and 1 GiB per
    shard, at most 2**11 minishards, murmur hash, gzip'd minishard indices)."""
    try:
        from ngshard.layers.sharding import segment_sharding
    except ImportError:
        per_shard = max(1, min(1 << 14, int((1 << 30) // max(1.0, value_bytes))))
        shard_bits = max(0, math.ceil(math.log2(keys / per_shard))) if keys > per_shard else 0
        in_shard = keys / (1 << shard_bits)
        minishard_bits = min(11, max(0, math.ceil(math.log2(in_shard / 64)))
                             if in_shard > 64 else 0)
        return ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=minishard_bits,
                                    shard_bits=shard_bits, minishard_index_encoding="gzip",
                                    data_encoding="raw" if value_bytes < 128 else "gzip")
    return segment_sharding(keys, value_bytes,
                            data_encoding="raw" if value_bytes < 128 else "gzip")


def largest(mean: float, count: int) -> float:
    """About the largest of ``count`` Poisson counts of ``mean`` (the Gaussian tail)."""
    if count <= 1 or mean <= 0:
        return mean
    return mean + math.sqrt(2 * mean * math.log(count)) + 1


def minishard_index_bytes(spec: ngshard.ShardingSpec, w: Workload, keys: float) -> float:
    """Encoded size of a minishard index of ``keys`` entries, as ngshard lays it out (values
    back to back in index order: a row of zero offsets)."""
    n = max(1, round(keys))
    if spec.minishard_index_encoding == "raw":
        return 24 * keys
    rng = np.random.default_rng(0)
    sample = np.sort(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))
    sizes = np.maximum(0, rng.normal(w.value_bytes, w.value_spread, n)).astype(np.uint64)
    table = np.stack([np.diff(sample, prepend=np.uint64(0)), np.zeros(n, np.uint64), sizes])
    return len(gzip.compress(table.astype("<u8").tobytes(), 6)) * keys / n


def predict(spec: ngshard.ShardingSpec, w: Workload, buffer_bytes: int = DEFAULT_BUFFER_BYTES,
            dask_partitions: int | None = None) -> dict:
    shards = spec.num_shards
    per_shard = w.keys / shards
    present = shards * -math.expm1(w.keys * math.log1p(-1 / shards)) if shards > 1 else 1
    big_shard = largest(per_shard, shards)
    per_minishard = per_shard / spec.num_minishards
    shard_index = spec.shard_index_size
    # minishards that hold keys, and how many keys such a minishard holds on average
    used = spec.num_minishards * -math.expm1(-per_minishard)
    in_used = per_minishard / -math.expm1(-per_minishard) if per_minishard else 0
    mini = minishard_index_bytes(spec, w, in_used) if per_minishard else 0
    shard_file = shard_index + per_shard * w.value_bytes + used * mini
    total_bytes = w.keys * w.value_bytes
    buffered = min(w.keys, buffer_bytes / (w.value_bytes + KEY_BYTES_IN_BUFFER))
    ingest = (BASE_RSS + BUFFER_SLACK * buffered * w.value_bytes
              + (KEY_BYTES_IN_BUFFER + 16) * buffered
              + min(PAIR_BATCH, PAIR_BATCH_BYTES / max(w.value_bytes, 1))
              * (w.value_bytes + PAIR_OBJECT_BYTES))
    finish = BASE_RSS + WORKERS * (big_shard * FINISH_KEY_BYTES + WINDOW_BYTES)
    arrays = (ARRAY_KEY_BYTES * w.keys + (1 << 20) * 48
              + WORKERS * big_shard * (w.value_bytes + ARRAY_SHARD_KEY_BYTES))
    parts = dask_partitions or max(1, min(shards, math.ceil(total_bytes / (256 << 20))))
    task = w.keys / parts * (w.value_bytes * 2 + DASK_ROW_BYTES)
    cached_shard = shard_index + DECODED_ENTRY_BYTES * per_shard
    return {
        "spec": spec,
        "shards": present,
        "keys/shard": per_shard, "largest shard": big_shard,
        "keys/minishard": per_minishard,
        "shard index B": shard_index, "minishard index B": mini,
        "shard file B": shard_file, "store B": present * shard_file,
        "writer pairs B": max(ingest, finish),
        "writer arrays B": arrays,  # beyond the input arrays
        "dask partitions": parts, "dask task B": task,
        "reader per shard B": cached_shard,
        "reader all indices B": present * shard_index + DECODED_ENTRY_BYTES * w.keys,
        "cold read requests": 3, "cold read B": shard_index + mini + w.value_bytes,
        "warm read requests": 1,
        "shards cached (256 MiB)": min(present, DEFAULT_CACHE_BYTES / cached_shard),
        "write pairs s": w.keys * PAIRS_KEY_SECONDS + total_bytes * PAIRS_BYTE_SECONDS,
        "write arrays s": w.keys * ARRAYS_KEY_SECONDS + total_bytes * ARRAYS_BYTE_SECONDS,
    }


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def duration(s: float) -> str:
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def describe(p: dict) -> str:
    spec = p["spec"]
    lines = [f"spec: {json.dumps(spec.to_json())}"]
    rows = [
        ("shards", f"{p['shards']:,.0f} of {spec.num_shards:,}; keys per shard "
                   f"{p['keys/shard']:,.0f} (largest ~{p['largest shard']:,.0f})"),
        ("minishards", f"{spec.num_minishards:,} per shard; keys per minishard "
                       f"{p['keys/minishard']:,.1f}"),
        ("indices", f"shard index {size(p['shard index B'])}, minishard index "
                    f"{size(p['minishard index B'])} ({spec.minishard_index_encoding})"),
        ("files", f"shard file {size(p['shard file B'])}, store {size(p['store B'])}"),
        ("writer", f"pairs {size(p['writer pairs B'])}; arrays "
                   f"+{size(p['writer arrays B'])} beyond the input; Dask "
                   f"{p['dask partitions']:,} tasks of {size(p['dask task B'])}"),
        ("reader", f"{size(p['reader per shard B'])} cached per shard read whole; every "
                   f"index {size(p['reader all indices B'])}; the 256 MiB cache holds "
                   f"{p['shards cached (256 MiB)']:,.0f} shards"),
        ("random read", f"cold {p['cold read requests']} requests, "
                        f"{size(p['cold read B'])}; warm {p['warm read requests']}"),
        ("write time", f"pairs {duration(p['write pairs s'])}, arrays "
                       f"{duration(p['write arrays s'])} (this machine)"),
    ]
    return "\n".join(lines + [f"  {a:<12} {b}" for a, b in rows])


def table(keys: int = 10**9) -> None:
    """The README's table: 1 B keys, the auto spec for a few value sizes, and the benchmark's
    64 x 1,024 spec for contrast."""
    print(f"| {keys:,} keys | spec (S/M bits) | keys per shard / minishard | shard index / "
          f"minishard index | shard file | writer (pairs) | writer (arrays, beyond input) "
          f"| Dask tasks | cold read | write (pairs / arrays) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    bench = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=10, shard_bits=6,
                                 minishard_index_encoding="gzip")
    cases = [(v, auto_spec(keys, v), "auto") for v in (100, 2048, 65536)]
    cases.append((100, bench, "64 x 1,024"))
    for value, spec, label in cases:
        p = predict(spec, Workload(keys, value))
        print(f"| {size(value)} values, {label} | {spec.shard_bits}/{spec.minishard_bits} "
              f"| {p['keys/shard']:,.0f} / {p['keys/minishard']:,.0f} "
              f"| {size(p['shard index B'])} / {size(p['minishard index B'])} "
              f"| {size(p['shard file B'])} | {size(p['writer pairs B'])} "
              f"| {size(p['writer arrays B'])} "
              f"| {p['dask partitions']:,} of {size(p['dask task B'])} "
              f"| 3 requests, {size(p['cold read B'])} "
              f"| {duration(p['write pairs s'])} / {duration(p['write arrays s'])} |")


def measured_indices(path: str, spec: ngshard.ShardingSpec) -> tuple[float, float]:
    """Mean shard file size and mean encoded minishard index size of a written store."""
    names = [n for n in os.listdir(path) if n.endswith(".shard")]
    files, minis = [], []
    for name in names:
        with open(os.path.join(path, name), "rb") as f:
            head = f.read(spec.shard_index_size)
            files.append(os.fstat(f.fileno()).st_size)
        ranges = np.frombuffer(head, "<u8").reshape(-1, 2)
        used = ranges[ranges[:, 1] > ranges[:, 0]]
        minis.append(float((used[:, 1] - used[:, 0]).mean()))
    return float(np.mean(files)), float(np.mean(minis))


def check() -> None:
    """Predictions beside measured runs of tools/bench_bulk.py at 1 M, 4 M and 16 M keys."""
    sys.path.insert(0, HERE)
    import bench_bulk
    from benchlib import CHILD_TIMEOUT, PEER_TIMEOUT

    spec = ngshard.ShardingSpec.from_json(bench_bulk.SPEC)
    print(f"spec {json.dumps(bench_bulk.SPEC)}, {bench_bulk.VALUE_SIZE}-byte values; load "
          f"average {os.getloadavg()[0]:.1f} (times are predicted for an idle machine)")
    print(f"{'keys':>11} {'path':<9} {'peak RSS pred/meas':>20} {'time pred/meas':>16} "
          f"{'shard file pred/meas':>24} {'minishard idx pred/meas':>24}")
    work = tempfile.mkdtemp(prefix="ngshard-capacity-")
    try:
        for n in (1_000_000, 4_000_000, 16_000_000):
            p = predict(spec, Workload(n, bench_bulk.VALUE_SIZE))
            for mode in ("pairs", "arrays"):
                path = os.path.join(work, f"{mode}-{n}")
                out = subprocess.run([sys.executable, os.path.join(HERE, "bench_bulk.py"),
                                      "--child", mode, str(n), path],
                                     capture_output=True, text=True, timeout=CHILD_TIMEOUT)
                if out.returncode:
                    raise SystemExit(out.stderr)
                r = json.loads(out.stdout.strip().splitlines()[-1])
                file_b, mini_b = measured_indices(path, spec)
                if mode == "pairs":
                    rss, pred_rss, t = r["peak_rss"], p["writer pairs B"], p["write pairs s"]
                else:
                    rss = r["peak_rss"] - r["input_rss"]
                    pred_rss, t = p["writer arrays B"], p["write arrays s"]
                print(f"{n:>11,} {mode:<9} {size(pred_rss):>9} / {size(rss):>9} "
                      f"{t:>6.1f}s / {r['seconds']:>5.1f}s "
                      f"{size(p['shard file B']):>11} / {size(file_b):>10} "
                      f"{size(p['minishard index B']):>11} / {size(mini_b):>10}", flush=True)
                subprocess.run(["rm", "-rf", path], check=True, timeout=PEER_TIMEOUT)
    finally:
        subprocess.run(["rm", "-rf", work], check=True, timeout=PEER_TIMEOUT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=float, default=1e9)
    ap.add_argument("--value-size", type=float, default=100, help="mean stored value bytes")
    ap.add_argument("--value-spread", type=float, default=0, help="its standard deviation")
    ap.add_argument("--spec", help="sharding spec JSON (default: the auto choice)")
    ap.add_argument("--buffer-bytes", type=int, default=DEFAULT_BUFFER_BYTES)
    ap.add_argument("--table", action="store_true", help="the README's table for 1 B keys")
    ap.add_argument("--check", action="store_true",
                    help="predictions beside measured runs at 1 M, 4 M and 16 M keys")
    args = ap.parse_args()
    if args.table:
        table(int(args.keys))
        return
    if args.check:
        check()
        return
    keys = int(args.keys)
    spec = ngshard.ShardingSpec.from_json(args.spec) if args.spec else \
        auto_spec(keys, args.value_size)
    print(f"{keys:,} keys of {args.value_size:.0f} bytes (spread {args.value_spread:.0f})")
    print(describe(predict(spec, Workload(keys, args.value_size, args.value_spread),
                           args.buffer_bytes)))


if __name__ == "__main__":
    main()
