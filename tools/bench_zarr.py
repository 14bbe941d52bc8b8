"""Benchmark of Zarr v3 sharded reads: ngshard's ``open_array`` beside tensorstore's zarr3
driver and zarr-python, same array, one process.

    python tools/bench_zarr.py [--size 512] [--chunk 64] [--repeat 3]

A size x size x size/2 uint8 array (smooth noise, so zstd has work), 64^3 inner chunks in
256^3 shards, bytes + zstd per inner chunk, written by tensorstore. Rows: the whole array;
100 small random boxes (8 to 40 voxels a side) in one batch: ngshard's ``read_many`` (each
inner chunk decoded once), tensorstore under ``ts.Batch``, zarr-python one after another (it
has no batch read); and the same boxes read one after another by each. Every turn opens the
array afresh, so no cache outlives a turn. Equal cache budgets: ngshard's decoded-chunk cache
(``chunk_cache_bytes``) and tensorstore's cache pool (which holds its shard indices too;
ngshard's separate index cache holds here 4 indices of 8 KiB) both get ``CACHE_BYTES``;
zarr-python has no cache. The libraries take turns (tools/benchlib.py), no fsync.
"""

from __future__ import annotations

import shutil
import tempfile

import numpy as np
import tensorstore as ts
import zarr
from benchlib import CACHE_BYTES, PEER_TIMEOUT, TS_CONTEXT, report, summary, take_turns, volume_args

import ngshard.zarr

zarr.config.set({"async.timeout": PEER_TIMEOUT})


def sample(n: int, rng: np.random.Generator) -> np.ndarray:
    """Smooth uint8 noise of n x n x n/2: blocks of 4^3 equal values, plus some noise."""
    coarse = rng.integers(0, 256, (n // 4, n // 4, n // 8), dtype=np.uint8)
    data = np.repeat(np.repeat(np.repeat(coarse, 4, 0), 4, 1), 4, 2)
    return data + (rng.random(data.shape) < 0.05).astype(np.uint8)


def main() -> None:
    args = volume_args("bench_zarr", __doc__, size=512)
    n, c = args.size, args.chunk
    rng = np.random.default_rng(0)
    data = sample(n, rng)
    shard = min(4 * c, n // 2)
    work = tempfile.mkdtemp(prefix="ngshard-zarrbench-")
    path = f"{work}/a.zarr"
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": path},
            "context": TS_CONTEXT}
    try:
        ts.open({**spec, "create": True, "metadata": {
            "shape": list(data.shape), "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [shard] * 3}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [c] * 3,
                "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {
                    "level": 3}}]}}]}}).result(timeout=PEER_TIMEOUT)[...].write(data).result(
            timeout=PEER_TIMEOUT)
        boxes = []
        for _ in range(100):
            size = rng.integers(8, 41, 3)
            start = [int(rng.integers(0, s - w)) for s, w in zip(data.shape, size)]
            boxes.append(tuple(slice(a, a + int(w)) for a, w in zip(start, size)))
        want = [data[b] for b in boxes]

        def ng_open():
            return ngshard.zarr.open_array(path, chunk_cache_bytes=CACHE_BYTES)

        def ng_boxes():
            return ng_open().read_many(boxes)

        def ng_each():
            array = ng_open()
            return [array[b] for b in boxes]

        def ts_each():
            array = ts.open(spec).result(timeout=PEER_TIMEOUT)
            return [array[b].read().result(timeout=PEER_TIMEOUT) for b in boxes]

        def ts_boxes():
            array = ts.open(spec).result(timeout=PEER_TIMEOUT)
            with ts.Batch() as batch:
                futures = [array[b].read(batch=batch) for b in boxes]
            return [f.result(timeout=PEER_TIMEOUT) for f in futures]

        def zarr_boxes():
            array = zarr.open_array(path, mode="r")
            return [array[b] for b in boxes]

        for who, fn in (("ngshard", ng_boxes), ("tensorstore", ts_boxes),
                        ("zarr-python", zarr_boxes), ("ngshard, one by one", ng_each),
                        ("tensorstore, one by one", ts_each)):
            assert all(np.array_equal(g, w) for g, w in zip(fn(), want)), who
        assert np.array_equal(ngshard.zarr.open_array(path)[...], data)
        print(f"{data.shape} uint8, {c}^3 inner chunks in {shard}^3 shards, zstd")
        report("zarr v3 sharded zstd: whole read", take_turns({
            "ngshard": lambda: ng_open()[...],
            "tensorstore": lambda: ts.open(spec).result(timeout=PEER_TIMEOUT).read().result(
                timeout=PEER_TIMEOUT),
            "zarr-python": lambda: zarr.open_array(path, mode="r")[...]}, args.repeat),
            per=(data.nbytes / 1e6, "MB"))
        report("zarr v3 sharded zstd: 100 small boxes", take_turns({
            "ngshard": ng_boxes, "tensorstore": ts_boxes, "zarr-python": zarr_boxes},
            args.repeat))
        report("zarr v3 sharded zstd: 100 small boxes, one by one", take_turns({
            "ngshard": ng_each, "tensorstore": ts_each, "zarr-python": zarr_boxes},
            args.repeat))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary("tools/bench_zarr.py")


if __name__ == "__main__":
    main()
