"""Benchmark of the sharded key-value store on local files: ngshard beside tensorstore and
cloud-volume (when installed), same data, one process, the libraries taking turns.

    python tools/bench_kv.py [--keys 200000] [--value-size 1024] [--reads 10000]
                             [--one-by-one 2000] [--locate-keys 200000] [--repeat 5]

Each peer gets its best call: tensorstore reads a batch under ``ts.Batch`` (futures), writes
in one transaction and has a cache pool as large as ngshard's index cache (its default context
has none); cloud-volume reads a batch with ``ShardReader.get_data`` (its one call for many
labels, at parallel=1, its default, and at parallel=nproc) with LRUs large enough for every
index of the store (they count entries, not bytes), and writes with ``synthesize_shard_files``.
Reads go to one store (written by tensorstore, with a Neuroglancer skeleton info for
cloud-volume), so no library reads a layout of its own making. tensorstore exposes no shard
location in Python: locate compares with cloud-volume's ``compute_shard_location`` and with a
bare mmh3 loop, a baseline (hashing only, no peer does less). Prints per-turn median ratios
(see tools/benchlib.py) and a Markdown summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import tracemalloc

import mmh3
import numpy as np
import tensorstore as ts
from benchlib import (
    CACHE_BYTES,
    FSYNC,
    PEER_TIMEOUT,
    SPEC,
    TS_CONTEXT,
    header,
    note,
    report,
    summary,
    take_turns,
)

import ngshard

try:
    import cloudvolume
    from cloudfiles import CloudFiles
    from cloudvolume.datasource.precomputed.sharding import (
        ShardingSpecification,
        ShardReader,
        synthesize_shard_files,
    )
except ImportError as e:  # an optional peer
    cloudvolume, CLOUDVOLUME_MISSING = None, f"{type(e).__name__}: {e}"


def ts_open(url: str, context: dict | None = None):
    """tensorstore's sharded kvstore over ``url`` (``file://...`` or ``http://...``), on a new
    context with the same cache budget as ngshard."""
    return ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"{url}/",
                            "metadata": SPEC, "context": context or TS_CONTEXT}
                           ).result(timeout=PEER_TIMEOUT)


def ts_write(path: str, items: dict[int, bytes]) -> None:
    """Write or update items through tensorstore, in one transaction."""
    kv = ts_open(f"file://{path}")
    txn = ts.Transaction()
    kvt = kv.with_transaction(txn)
    for k, v in items.items():
        kvt[k.to_bytes(8, "big")] = v
    txn.commit_async().result(timeout=PEER_TIMEOUT)


def ts_batch_read(kv, keys: list[bytes]) -> list[bytes]:
    with ts.Batch() as batch:
        futures = [kv.read(k, batch=batch) for k in keys]
    return [f.result(timeout=PEER_TIMEOUT).value for f in futures]


def make_layer(layer: str, kind: str = "skeletons") -> str:
    """A segmentation layer's info and a sharded ``skeletons`` info beside it, so that
    cloud-volume finds the store; returns the store's directory."""
    os.makedirs(f"{layer}/{kind}", exist_ok=True)
    with open(f"{layer}/info", "w") as f:
        json.dump({"type": "segmentation", "data_type": "uint64", "num_channels": 1,
                   "skeletons": kind, "scales": [{
                       "key": "1_1_1", "size": [64, 64, 64], "voxel_offset": [0, 0, 0],
                       "resolution": [1, 1, 1], "chunk_sizes": [[64, 64, 64]],
                       "encoding": "raw"}]}, f)
    with open(f"{layer}/{kind}/info", "w") as f:
        json.dump({"@type": "neuroglancer_skeletons", "vertex_attributes": [],
                   "transform": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0], "sharding": SPEC}, f)
    return f"{layer}/{kind}"


def cv_reader(layer_url: str, parallel: int):
    """cloud-volume's reader of the store, with LRUs holding every shard and minishard index
    (its defaults, 512 and 128 entries, would evict this store's 1024 minishard indices)."""
    cv = cloudvolume.CloudVolume(layer_url, progress=False, parallel=parallel)
    shards = 1 << SPEC["shard_bits"]
    return ShardReader(cv.cloudpath, cv.cache, ShardingSpecification.from_dict(SPEC),
                       shard_index_cache_size=shards,
                       minishard_index_cache_size=shards << SPEC["minishard_bits"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=1024)
    ap.add_argument("--reads", type=int, default=10_000, help="keys of the batch read")
    ap.add_argument("--one-by-one", type=int, default=2_000, help="keys read one at a time")
    ap.add_argument("--locate-keys", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    header(f"bench_kv: {args}")
    if cloudvolume is None:
        print(f"cloud-volume rows skipped: not importable ({CLOUDVOLUME_MISSING})")
    rng = np.random.default_rng(0)
    n, size = args.keys, args.value_size
    keys = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True))
    n = len(keys)
    blob = rng.integers(0, 256, n * size, dtype=np.uint8).tobytes()
    items = {int(k): blob[i * size:(i + 1) * size] for i, k in enumerate(keys)}
    spec = ngshard.ShardingSpec.from_json(SPEC)
    work = tempfile.mkdtemp(prefix="ngshard-bench-")
    print(f"{n} keys x {size} B, spec {SPEC}")
    try:
        run(args, rng, keys, items, spec, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary("tools/bench_kv.py")


def run(args, rng, keys: np.ndarray, items: dict[int, bytes], spec, work: str) -> None:
    n = len(keys)
    # --- locate: (shard, minishard) of many keys -------------------------------------------
    m = args.locate_keys
    some = rng.integers(0, 2**64 - 1, m, dtype=np.uint64, endpoint=True)
    some_list = some.tolist()
    cases = {"ngshard locate": lambda: spec.locate(some),
             "mmh3 loop, hashing only (baseline, not a peer)": lambda: [
                 mmh3.hash128(k.to_bytes(8, "little"), 0, False, signed=False)
                 for k in some_list]}
    if cloudvolume:
        cv_spec = ShardingSpecification.from_dict(SPEC)
        cases["cloud-volume compute_shard_location loop"] = lambda: [
            cv_spec.compute_shard_location(k) for k in some_list]
        shard, mini = spec.locate(some[:1000])
        want = [(int(s), int(mi)) for s, mi in zip(shard, mini)]
        got = [(int(loc.shard_number, 16), int(loc.minishard_number))
               for loc in map(cv_spec.compute_shard_location, some_list[:1000])]
        assert got == want, "cloud-volume and ngshard locate keys differently"
    report(f"locate {m} keys: (shard, minishard) of each", take_turns(cases, args.repeat, True),
           per=(m, "key"))
    note("tensorstore: no Python call computes a key's shard")

    # --- bulk write, each turn into fresh directories ----------------------------------------
    counter = iter(range(10**6))

    def fresh() -> str:
        return f"{work}/w{next(counter)}"

    def cv_write(path: str) -> None:
        files = synthesize_shard_files(ShardingSpecification.from_dict(SPEC), items)
        CloudFiles(f"file://{path}").puts(list(files.items()), compress=None)

    cases = {"ngshard write_kv": (fresh, lambda p: ngshard.write_kv(p, spec, items,
                                                                    durable=FSYNC)),
             "tensorstore (one transaction)": (fresh, lambda p: ts_write(p, items))}
    if cloudvolume:
        cases["cloud-volume synthesize_shard_files + puts"] = (fresh, cv_write)
    report(f"write {n} keys x {args.value_size} B", take_turns(cases, args.repeat))
    if cloudvolume:  # what cloud-volume wrote reads back through ngshard
        cv_write(f"{work}/cv-check")
        few = keys[:: max(1, n // 1000)].tolist()
        assert ngshard.open_kv(f"{work}/cv-check", spec).get_many(few) == \
            {k: items[k] for k in few}, "cloud-volume's store misread"
    for path in os.listdir(work):
        shutil.rmtree(f"{work}/{path}")

    tracemalloc.start()
    ngshard.write_kv(f"{work}/mem", spec, items)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    shutil.rmtree(f"{work}/mem")
    print(f"peak Python/numpy memory of ngshard's write: {peak / 2**20:.0f} MiB for "
          f"{n * args.value_size / 2**20:.0f} MiB written ({peak / (n * args.value_size):.2f}x)")

    # --- reads: one store, written by tensorstore, read by all --------------------------------
    layer = f"{work}/layer"
    store = make_layer(layer)
    ts_write(store, items)
    print(f"reads: the store tensorstore wrote; index caches: ngshard cache_bytes="
          f"{CACHE_BYTES >> 20} MiB, tensorstore cache_pool {CACHE_BYTES >> 20} MiB"
          + (f", cloud-volume LRUs of {1 << SPEC['shard_bits']} shard and "
             f"{1 << (SPEC['shard_bits'] + SPEC['minishard_bits'])} minishard indices (all)"
             if cloudvolume else ""))
    sample = rng.choice(keys, args.reads, replace=False)
    sample_list = sample.tolist()
    sample_bytes = [k.to_bytes(8, "big") for k in sample_list]
    want = [items[k] for k in sample_list]
    nproc = os.cpu_count() or 1

    def ours():
        return ngshard.open_kv(store, spec, cache_bytes=CACHE_BYTES)

    def check(values: list) -> None:
        assert values == want, "misread"

    cases = {"ngshard get_many": (ours, lambda kv: kv.get_many(sample)),
             "tensorstore read under ts.Batch": (lambda: ts_open(f"file://{store}"),
                                                 lambda kv: ts_batch_read(kv, sample_bytes))}
    got = ours().get_many(sample)
    check([got[k] for k in sample_list])
    check(ts_batch_read(ts_open(f"file://{store}"), sample_bytes))
    if cloudvolume:
        for p in sorted({1, nproc}):
            cases[f"cloud-volume get_data (parallel={p})"] = (
                lambda p=p: cv_reader(f"file://{layer}", p),
                lambda r, p=p: r.get_data(sample_list, "skeletons", parallel=p))
        got = cv_reader(f"file://{layer}", 1).get_data(sample_list, "skeletons")
        check([got[k] for k in sample_list])
    report(f"read {args.reads} random keys at once, fresh store", take_turns(cases, args.repeat),
           per=(args.reads, "key"))

    # --- one key at a time, indices cached -----------------------------------------------------
    one = sample_list[:args.one_by_one]
    one_bytes = sample_bytes[:args.one_by_one]
    warm = ours()
    warm.get_many(one)
    ts_warm = ts_open(f"file://{store}")
    ts_batch_read(ts_warm, one_bytes)
    cases = {"ngshard kv[key]": lambda: [warm[k] for k in one],
             "tensorstore read(key).result()": lambda: [
                 ts_warm.read(k).result(timeout=PEER_TIMEOUT).value for k in one_bytes],
             "tensorstore, staleness_bound=-inf": lambda: [
                 ts_warm.read(k, staleness_bound=float("-inf")).result(timeout=PEER_TIMEOUT).value
                 for k in one_bytes]}
    if cloudvolume:
        cv_warm = cv_reader(f"file://{layer}", 1)
        cv_warm.get_data(one, "skeletons")
        cases["cloud-volume get_data(key)"] = lambda: [
            cv_warm.get_data(k, "skeletons") for k in one]
    report(f"read {len(one)} keys one by one, indices cached", take_turns(cases, args.repeat),
           per=(len(one), "key"))
    note("staleness_bound=-inf: tensorstore uses its cached indices unchecked and checks the "
         "data read's generation, as ngshard does for a key it finds")

    # --- list every key ----------------------------------------------------------------------
    def cv_list(r) -> np.ndarray:
        names = [f for f in CloudFiles(f"file://{store}").list() if f.endswith(".shard")]
        return np.concatenate([r.list_labels(f, "skeletons") for f in names])

    cases = {"ngshard keys_array": (ours, lambda kv: kv.keys_array()),
             "tensorstore list": (lambda: ts_open(f"file://{store}"),
                                  lambda kv: kv.list().result(timeout=PEER_TIMEOUT))}
    if cloudvolume:
        cases["cloud-volume list_labels of each shard"] = (
            lambda: cv_reader(f"file://{layer}", 1), cv_list)
        assert np.array_equal(np.sort(cv_list(cv_reader(f"file://{layer}", 1))), keys)
    assert np.array_equal(np.sort(ours().keys_array()), keys)
    assert len(ts_open(f"file://{store}").list().result(timeout=PEER_TIMEOUT)) == n
    report(f"list all {n} keys, fresh store", take_turns(cases, args.repeat))


if __name__ == "__main__":
    main()
