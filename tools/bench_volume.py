"""Benchmark of precomputed volumes: ngshard beside tensorstore (and cloud-volume when it is
installed: `pip install cloud-volume`), same data, one process.

    python tools/bench_volume.py [--size 512] [--chunk 64] [--repeat 3]

A uint8 raw volume and a uint64 compressed_segmentation volume, sharded into one shard: whole
write, whole read, and 100 random chunks read at once (ngshard ``read_chunks``; tensorstore
reads under ``ts.Batch``; cloud-volume has no call for many boxes, so it reads them one after
another). tensorstore gets a cache pool as large as ngshard's index cache and no fsync, as in
tools/benchlib.py. The libraries take turns; prints the median times and the median of the
per-turn ratios, and a Markdown summary.
"""

from __future__ import annotations

import shutil
import tempfile

import numpy as np
import tensorstore as ts
from benchlib import (
    FSYNC,
    PEER_TIMEOUT,
    TS_CONTEXT,
    report,
    sample_volumes,
    summary,
    take_turns,
    volume_args,
)

import ngshard
from ngshard.storage import open_storage
from ngshard.volume import auto_sharding

try:
    import cloudvolume
except ImportError:  # an optional peer
    cloudvolume = None


def ts_open(path: str, scale: dict, dtype: str, create: bool = False):
    spec = {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": path},
            "context": TS_CONTEXT}
    if create:
        spec.update(create=True, delete_existing=True, scale_metadata=scale,
                    multiscale_metadata={"data_type": dtype, "num_channels": 1,
                                         "type": "image" if dtype == "uint8" else
                                         "segmentation"})
    return ts.open(spec).result(timeout=PEER_TIMEOUT)


def cloudvolume_fns(work: str, dtype: str, encoding: str, spec, data: np.ndarray, n: int,
                    c: int, picks: np.ndarray):
    """(write, read, random chunks) through cloud-volume on the same layout. cloud-volume has
    no call that reads many separate boxes at once: the chunks are read one after another."""
    path = f"file://{work}/cv"
    info = cloudvolume.CloudVolume.create_new_info(
        1, "image" if dtype == "uint8" else "segmentation", dtype, encoding, [1, 1, 1],
        [0, 0, 0], [n] * 3, chunk_size=[c] * 3, compressed_segmentation_block_size=[8, 8, 8])
    info["scales"][0]["sharding"] = spec.to_json()

    def write():
        shutil.rmtree(f"{work}/cv", ignore_errors=True)
        cv = cloudvolume.CloudVolume(path, info=info, progress=False)
        cv.commit_info()
        cv[:] = data

    def random():
        cv = cloudvolume.CloudVolume(path, progress=False)
        return [cv[p[0]:p[0] + c, p[1]:p[1] + c, p[2]:p[2] + c] for p in picks]

    return write, lambda: cloudvolume.CloudVolume(path, progress=False)[:], random


def bench_case(work: str, name: str, dtype: str, encoding: str, data: np.ndarray, n: int,
               c: int, picks: np.ndarray, repeat: int) -> None:
    # one shard, chunk data stored as it is (the setting of the figures)
    spec = ngshard.ShardingSpec.from_json(dict(
        auto_sharding((n, n, n), (c, c, c), c**3 * data.itemsize, n**3 * data.itemsize,
                      encoding).to_json(), data_encoding="raw"))
    scale = {"size": [n] * 3, "chunk_size": [c] * 3, "resolution": [1, 1, 1],
             "encoding": encoding, "sharding": spec.to_json()}
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [8, 8, 8]
    ours, theirs = f"{work}/ours", f"{work}/ts"

    def ng_write():
        shutil.rmtree(ours, ignore_errors=True)
        with ngshard.create_volume(open_storage(ours, durable=FSYNC), dtype=dtype,
                                   shape=(n, n, n), chunk_size=(c,) * 3,
                                   encoding=encoding, sharding=spec,
                                   compressed_segmentation_block_size=(8, 8, 8)) as vol:
            vol[:] = data

    def ts_write():
        ts_open(theirs, scale, dtype, create=True)[ts.d[:].translate_to[0]].write(data).result(
            timeout=PEER_TIMEOUT)

    def ng_random():
        return ngshard.open_volume(ours).read_chunks(picks // c)

    def ts_random():
        store = ts_open(theirs, scale, dtype)
        with ts.Batch() as batch:
            futures = [store[p[0]:p[0] + c, p[1]:p[1] + c, p[2]:p[2] + c].read(batch=batch)
                       for p in picks]
        return [f.result(timeout=PEER_TIMEOUT) for f in futures]

    ng_write()
    ts_write()
    assert np.array_equal(ngshard.open_volume(ours)[:], data), "ngshard misread its volume"
    cv = cloudvolume_fns(work, dtype, encoding, spec, data, n, c, picks) if cloudvolume \
        else (None,) * 3
    rows = [("write whole", ng_write, ts_write, cv[0]),
            ("read whole", lambda: ngshard.open_volume(ours)[:],
             lambda: ts_open(theirs, scale, dtype).read().result(timeout=PEER_TIMEOUT), cv[1]),
            ("100 random chunks", ng_random, ts_random, cv[2])]
    for label, ng_fn, ts_fn, cv_fn in rows:
        cases = {"ngshard": ng_fn, "tensorstore": ts_fn}
        if cv_fn is not None:
            cases["cloud-volume"] = cv_fn
        report(f"{name}: {label}", take_turns(cases, repeat))
    want = [data[p[0]:p[0] + c, p[1]:p[1] + c, p[2]:p[2] + c] for p in picks]
    for who, read in (("ngshard", ng_random), ("tensorstore", ts_random), ("cloud-volume", cv[2])):
        if read is not None:  # every library reads the random chunks right (each its own volume)
            assert all(np.array_equal(np.asarray(g), w) for g, w in zip(read(), want)), who
    shutil.rmtree(ours, ignore_errors=True)
    shutil.rmtree(theirs, ignore_errors=True)


def main() -> None:
    args = volume_args("bench_volume", __doc__, size=512)
    if cloudvolume is None:
        print("cloud-volume columns skipped: not importable")
    n, c = args.size, args.chunk
    rng = np.random.default_rng(0)
    cases = sample_volumes(n, rng)
    picks = rng.integers(0, n // c, (100, 3)) * c
    work = tempfile.mkdtemp(prefix="ngshard-volbench-")
    try:
        for name, (encoding, data) in cases.items():
            if args.only not in name:
                continue
            print(f"{name}: {n}^3 voxels, {c}^3 chunks, one shard")
            bench_case(work, name, data.dtype.name, encoding, data, n, c, picks, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary("tools/bench_volume.py")


if __name__ == "__main__":
    main()
