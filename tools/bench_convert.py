"""Converting a Zarr v3 sharded array to sharded precomputed: ngshard (``ngshard.convert`` on 2
local worker processes, and on a Dask LocalCluster of 2 worker processes) against a
tensorstore copy (both arrays opened with tensorstore, the source assigned to the destination
in one transaction, a cache pool of the same budget, its default concurrency: every core).

    python tools/bench_convert.py [--repeat 2] [--shape 512,1024,1024] [--dir /tmp]

Source: a uint8 (z, y, x) array, 64^3 inner chunks in 256^3 shards, written by tensorstore;
smooth EM-like data with noise (zstd and gzip store it in about 80% of its size). Rows: zstd
inner chunks to precomputed raw with the shard data gzip-encoded (what ``sharding="auto"``
picks) and with raw shard data, then gzip inner chunks to gzip shard data. All three take
ngshard's fast path (the inner chunk is the precomputed chunk: zstd chunks are only
inflated, gzip streams are carried as they are); "ngshard without fast path" is the same
conversion with every chunk decoded into an array, cut and encoded, to show what the fast
path buys. Destination: 64^3 chunks, identity-hash box shards of 128 MiB (ngshard's auto
sharding), the same spec for both libraries.

Every run is a child process (timed inside it, from the call to the end); peak memory is the
largest VmHWM of the process and its worker processes (ngshard: per worker; tensorstore: its
one process). The libraries take turns (``benchlib``); the result of every run is checked
against the source (a sample of chunks) before it is timed again.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import benchlib  # noqa: E402
from benchlib import PEER_TIMEOUT  # noqa: E402

CHUNK = 64


def make_source(path: str, shape: tuple[int, int, int], compressor: str) -> None:
    import tensorstore as ts

    codec = {"name": compressor, "configuration": {"level": 3 if compressor == "zstd" else 5}}
    arr = ts.open({"driver": "zarr3", "kvstore": f"file://{path}", "metadata": {
        "shape": list(shape), "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [256] * 3}},
        "codecs": [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [CHUNK] * 3,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, codec],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                             {"name": "crc32c"}]}}]}}, create=True,
        delete_existing=True).result(timeout=PEER_TIMEOUT)
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:shape[1], 0:shape[2]]
    for z in range(0, shape[0], 64):
        base = (96 + 60 * np.sin(x / 37.0 + z / 50.0) * np.cos(y / 23.0)).astype(np.int16)
        slab = base[None] + rng.integers(-8, 8, (64, *shape[1:]), dtype=np.int16)
        arr[z:z + 64].write(np.clip(slab, 0, 255).astype(np.uint8)
                            ).result(timeout=PEER_TIMEOUT)


def spec(shape: tuple[int, int, int], data_encoding: str) -> dict:
    from ngshard.pipelines.layout import DEFAULT_TASK_BYTES
    from ngshard.volume.sharding import auto_sharding

    s = auto_sharding(shape[::-1], (CHUNK,) * 3, CHUNK**3, DEFAULT_TASK_BYTES)
    return {**s.to_json(), "data_encoding": data_encoding}


# --- the children ----------------------------------------------------------------------

def child_ngshard(src: str, dst: str, sharding: dict, dask: bool, fast: bool = True
                  ) -> dict:
    import ngshard

    if not fast:  # what the fast path buys: every chunk decoded, cut and encoded
        from ngshard.pipelines import fastpath

        fastpath.eligible = lambda *args: False  # forked workers inherit it

    t = time.perf_counter()
    if dask:
        import distributed

        with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                      dashboard_address=":0") as cluster, \
                distributed.Client(cluster) as client:
            t = time.perf_counter()  # the cluster's start is not the conversion's
            ngshard.convert(src, dst, sharding=sharding, executor=client.get_executor(),
                            progress=False, resume=False)
            elapsed = time.perf_counter() - t
            workers = client.run(benchlib.hwm)
        return {"seconds": elapsed, "peak_worker": max(workers.values())}
    ngshard.convert(src, dst, sharding=sharding, workers=2, progress=False, resume=False)
    return {"seconds": time.perf_counter() - t}


def child_tensorstore(src: str, dst: str, sharding: dict) -> dict:
    import tensorstore as ts

    t = time.perf_counter()
    context = ts.Context(benchlib.TS_CONTEXT)
    source = ts.open({"driver": "zarr3", "kvstore": f"file://{src}"}, context=context
                     ).result(timeout=PEER_TIMEOUT)
    shape = source.shape
    dest = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dst}/",
                    "multiscale_metadata": {"type": "image", "data_type": "uint8",
                                            "num_channels": 1},
                    "scale_metadata": {"size": list(shape[::-1]), "resolution": [1, 1, 1],
                                       "encoding": "raw", "chunk_size": [CHUNK] * 3,
                                       "sharding": sharding}},
                   create=True, delete_existing=True, context=context
                   ).result(timeout=PEER_TIMEOUT)
    with ts.Transaction() as txn:
        dest.with_transaction(txn)[..., 0].write(source.T).result(timeout=PEER_TIMEOUT)
    return {"seconds": time.perf_counter() - t}


def check(src: str, dst: str) -> None:
    """A sample of chunks of the result equals the source (read by tensorstore)."""
    import tensorstore as ts

    source = ts.open({"driver": "zarr3", "kvstore": f"file://{src}"}).result(timeout=PEER_TIMEOUT)
    dest = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dst}/"}).result(timeout=PEER_TIMEOUT)
    rng = np.random.default_rng(1)
    for _ in range(6):
        z, y, x = (int(rng.integers(0, n - 70)) for n in source.shape)
        a = source[z:z + 70, y:y + 70, x:x + 70].read().result(timeout=PEER_TIMEOUT)
        b = dest[x:x + 70, y:y + 70, z:z + 70, 0].read().result(timeout=PEER_TIMEOUT)
        if not np.array_equal(a, b.T):
            raise SystemExit(f"{dst}: differs from {src} at z, y, x = {z}, {y}, {x}")


def run_child(kind: str, src: str, dst: str, sharding: dict) -> dict:
    shutil.rmtree(dst, ignore_errors=True)
    os.sync()
    own, workers, result = benchlib.run_watched(
        kind, [sys.executable, __file__, "--child", kind, src, dst, json.dumps(sharding)])
    check(src, dst)
    return {"peak_process": own, "peak_worker": workers, **result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--shape", default="512,1024,1024", help="z,y,x")
    parser.add_argument("--dir", default=None, help="scratch directory (default: /tmp)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, src, dst, sharding = args.child
        sharding = json.loads(sharding)
        result = child_tensorstore(src, dst, sharding) if kind == "tensorstore" else \
            child_ngshard(src, dst, sharding, kind == "dask", kind != "decoding")
        print(json.dumps(result))
        return
    shape = tuple(int(n) for n in args.shape.split(","))
    mb = np.prod(shape) / 1e6
    benchlib.header(f"zarr v3 sharded {shape} (z, y, x) uint8 -> sharded precomputed raw, "
                    f"{mb:.0f} MB; ngshard: 2 worker processes")
    scratch = tempfile.mkdtemp(prefix="bench-convert-", dir=args.dir)
    try:
        rows = [("zstd", "gzip"), ("zstd", "raw"), ("gzip", "gzip")]
        sources = {}
        for compressor in {c for c, _ in rows}:
            sources[compressor] = os.path.join(scratch, f"src-{compressor}.zarr")
            make_source(sources[compressor], shape, compressor)
            stored = sum(os.path.getsize(os.path.join(d, f))
                         for d, _, files in os.walk(sources[compressor]) for f in files)
            print(f"source with {compressor} inner chunks: {stored / 1e6:.0f} MB stored")
        for compressor, data_encoding in rows:
            src, sharding = sources[compressor], spec(shape, data_encoding)
            kinds = ["ngshard", "tensorstore", "ngshard on dask", "ngshard without fast path"]
            runs: dict[str, list[dict]] = {k: [] for k in kinds}
            for turn in range(args.repeat):
                for j in range(len(kinds)):
                    kind = kinds[(turn + j) % len(kinds)]
                    child = "dask" if "dask" in kind else "decoding" if "without" in kind \
                        else kind
                    runs[kind].append(run_child(child, src, os.path.join(scratch, "dst"),
                                                sharding))
            fast = " (streams carried)" if compressor == data_encoding == "gzip" else ""
            extra = {k: f"peak {max(r['peak_worker'] for r in v) / 2**20:.0f} MiB per "
                        f"{'worker' if k != 'tensorstore' else 'process'}"
                     for k, v in runs.items()}
            times = {k: [r["seconds"] for r in v] for k, v in runs.items()}
            benchlib.report(f"{compressor} inner chunks -> shard data_encoding "
                            f"{data_encoding}{fast}", times, per=(mb, "MB"), extra=extra)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    benchlib.summary("tools/bench_convert.py")


if __name__ == "__main__":
    main()
