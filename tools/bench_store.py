"""Benchmark of ngshard.zarr.PrecomputedStore: a precomputed volume read through zarr-python
(and dask) beside tensorstore's neuroglancer_precomputed driver and ngshard's own Volume.

    python tools/bench_store.py [--size 256] [--chunk 64] [--repeat 3]

One volume per case, written by ngshard, sharded ("auto"): uint8 raw (whole chunks pass
through the store as stored) and uint64 compressed_segmentation (decoded by the store). Rows:
the whole volume, and a box of 2x2x2 chunks off the chunk grid. zarr runs with its default
``async.concurrency`` (10 chunks asked for at once, which the store reads as one batch).
The libraries take turns (tools/benchlib.py); ratios are zarr-through-the-store over the peer.
"""

from __future__ import annotations

import shutil
import tempfile

import dask.array as da
import numpy as np
import tensorstore as ts
import zarr
from benchlib import (
    PEER_TIMEOUT,
    TS_CONTEXT,
    report,
    sample_volumes,
    summary,
    take_turns,
    volume_args,
)

import ngshard
from ngshard.zarr import PrecomputedStore

zarr.config.set({"async.timeout": PEER_TIMEOUT})  # its synchronous calls, as tensorstore's


def bench_case(path: str, name: str, data: np.ndarray, encoding: str, c: int,
               repeat: int) -> None:
    with ngshard.create_volume(path, dtype=data.dtype, shape=data.shape, chunk_size=(c,) * 3,
                               encoding=encoding, sharding="auto") as vol:
        vol[...] = data
    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": path},
            "context": TS_CONTEXT}
    half = c // 2
    box = (slice(half, half + 2 * c),) * 3

    def through_zarr(index):
        return lambda: zarr.open_array(store=PrecomputedStore(path))[index]

    def through_tensorstore(index):
        return lambda: ts.open(spec).result(timeout=PEER_TIMEOUT)[ts.d[:].translate_to[0]][
            index].read().result(timeout=PEER_TIMEOUT)

    def through_volume(index):
        return lambda: ngshard.open_volume(path)[index]

    whole = (slice(None),) * 4
    assert np.array_equal(through_zarr(whole)(), data), "zarr misread the store"
    assert np.array_equal(da.from_zarr(PrecomputedStore(path)).compute(), data)
    for label, index in (("whole volume", whole), ("box of 2^3 chunks off the grid", box)):
        cases = {"zarr + PrecomputedStore": through_zarr(index),
                 "tensorstore": through_tensorstore(index),
                 "ngshard Volume": through_volume(index)}
        if index is whole:
            cases["dask.from_zarr + PrecomputedStore"] = \
                lambda: da.from_zarr(PrecomputedStore(path)).compute()
        report(f"{name}: {label}", take_turns(cases, repeat, warmup=True),
               per=(data[index].nbytes / 1e6, "MB"))


def main() -> None:
    args = volume_args("bench_store", __doc__, size=256)
    n, c = args.size, args.chunk
    cases = sample_volumes(n, np.random.default_rng(0))
    work = tempfile.mkdtemp(prefix="ngshard-storebench-")
    try:
        for i, (name, (encoding, data)) in enumerate(cases.items()):
            print(f"{name}: {n}^3 voxels, {c}^3 chunks, sharded (auto)")
            bench_case(f"{work}/{i}", name, data, encoding, c, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary("tools/bench_store.py")


if __name__ == "__main__":
    main()
