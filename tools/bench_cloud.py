"""Benchmark of object-store work: ngshard beside tensorstore's s3 driver (at its best request
concurrency) and, for the region read, cloud-volume, on a local S3 server (moto) behind a
proxy that adds --latency seconds to every request (a distant bucket).

    python tools/bench_cloud.py [--latency 0.02] [--keys 20000] [--reads 1000]
                                [--convert-mib 64] [--repeat 3]

Three jobs, each run by every library in turns (the libraries take turns, so a slow minute
of the busy machine falls on all of them alike; ratios are ngshard's time over the peer's in
the same turn, median of the turns):

- read --reads random keys of a store of --keys x 1 KiB values (16 shards) in one batch,
  from a fresh store (nothing cached): ngshard ``get_many``, tensorstore ``ts.Batch``;
- read a 512 x 512 x 128 uint8 region of a sharded volume (64^3 chunks) from a fresh open:
  ngshard ``open_volume(...)[...]``, tensorstore ``neuroglancer_precomputed`` over s3,
  cloud-volume (over the proxy as plain HTTP, in a child process: this Python where it has
  cloud-volume, as the bench extra installs it, or another venv's, --cloudvolume);
- convert a local Zarr v3 array of --convert-mib MiB (the issue asks for 512 MiB; that takes
  far longer than a few minutes on two busy cores, so the default is 64 MiB) to a sharded
  precomputed layer on s3: ``ngshard.convert`` (its default local pool) and tensorstore
  (read the zarr array, write a neuroglancer_precomputed layer of the same sharding).

The floor of a read is its round trips times the latency: three (shard index, minishard
index, data) for a batch of keys and for a region of a sharded volume. moto and the proxy
run in processes of their own (no GIL shared with the clients).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tensorstore as ts

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tools")]

from benchlib import machine  # noqa: E402
from objectstores import BUCKET, start_s3  # noqa: E402

import ngshard  # noqa: E402

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
        "preshift_bits": 0, "minishard_bits": 6, "shard_bits": 4,
        "minishard_index_encoding": "gzip", "data_encoding": "raw"}
REGION = (512, 512, 128)
TIMEOUT = 600
PROXY = """
import sys, time
sys.path.insert(0, {tests!r})
from faultproxy import FaultProxy
p = FaultProxy({upstream!r}, delay={delay!r})
print(p.endpoint, flush=True)
time.sleep(10 ** 6)
"""
CLOUDVOLUME = """
import sys, time
from cloudvolume import CloudVolume
url, box = sys.argv[1], [int(v) for v in sys.argv[2].split(",")]
t = time.perf_counter()
vol = CloudVolume(url, mip=0, progress=False, parallel=1, fill_missing=True)
data = vol[0:box[0], 0:box[1], 0:box[2]]
print(time.perf_counter() - t, int(data.astype("uint64").sum()))
"""


def proxy(upstream: str, delay: float) -> tuple[subprocess.Popen, str]:
    """The delaying proxy in a process of its own, and its endpoint."""
    child = subprocess.Popen([sys.executable, "-c", PROXY.format(
        tests=str(ROOT / "tests"), upstream=upstream, delay=delay)], stdout=subprocess.PIPE,
        text=True)
    return child, child.stdout.readline().strip()


def public_reads(s3) -> None:
    """Let anyone GET the bucket's objects: cloud-volume reads them as plain HTTP."""
    import boto3

    boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id="testing",
                 aws_secret_access_key="testing", region_name="us-east-1").put_bucket_policy(
        Bucket=BUCKET, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
            "Resource": f"arn:aws:s3:::{BUCKET}/*"}]}))


def ts_s3(endpoint: str, path: str) -> dict:
    return {"driver": "s3", "bucket": BUCKET, "path": path.rstrip("/") + "/",
            "endpoint": endpoint, "aws_region": "us-east-1",
            "aws_credentials": {"type": "environment"}}


def ts_context(concurrency: int) -> ts.Context:
    return ts.Context({"s3_request_concurrency": {"limit": concurrency},
                       "cache_pool": {"total_bytes_limit": 256 << 20}})


class Measured(tuple):
    """(seconds, value) of a run timed by itself (a child process, its start left out)."""


def timed(fn) -> tuple[float, object]:
    t = time.perf_counter()
    out = fn()
    if isinstance(out, Measured):
        return out
    return time.perf_counter() - t, out


def turns(cases: dict, repeat: int, check) -> dict[str, list[float]]:
    """Each case run ``repeat`` times, in turns, rotating which goes first."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for r in range(repeat):
        for name in names[r % len(names):] + names[:r % len(names)]:
            seconds, out = timed(cases[name])
            check(name, out)
            times[name].append(seconds)
    return times


def report(title: str, times: dict[str, list[float]], floor: float | None) -> None:
    print(f"\n{title}" + (f" (floor {floor * 1000:.0f} ms)" if floor else ""))
    ours = times["ngshard"]
    for name, values in times.items():
        median = statistics.median(values)
        line = f"  {name:<40} {median:8.3f} s"
        if floor:
            line += f"  {median / floor:5.1f}x floor"
        if name != "ngshard":
            ratios = sorted(a / b for a, b in zip(ours, values))
            line += (f"  ngshard/this {statistics.median(ratios):.2f} "
                     f"({ratios[0]:.2f}..{ratios[-1]:.2f})")
        print(line, flush=True)


def best_concurrency(run, limits=(32, 64, 128, 256)) -> int:
    """tensorstore's fastest s3 request concurrency for ``run(limit)``, tried once each."""
    seconds = {limit: timed(lambda limit=limit: run(limit))[0] for limit in limits}
    return min(seconds, key=seconds.get)


def bench_keys(s3, endpoint: str, args) -> None:
    rng = np.random.default_rng(0)
    prefix = f"bench-keys-{os.getpid()}"
    url = f"s3://{BUCKET}/{prefix}"
    keys = rng.choice(1 << 40, args.keys, replace=False).astype(np.uint64)
    ngshard.write_kv(url, SPEC, keys=keys, values=rng.integers(0, 255, (args.keys, 1024),
                                                               dtype=np.uint8),
                     storage_options=s3.options)
    sample = rng.choice(keys, args.reads, replace=False).tolist()
    options = {**s3.options, "endpoint_url": endpoint}
    want = ngshard.open_kv(url, storage_options=s3.options).get_many(sample)

    def ngshard_read():
        return ngshard.open_kv(url, storage_options=options).get_many(sample)

    def ts_read(limit: int):
        kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                              "base": ts_s3(endpoint, prefix), "metadata": SPEC},
                             context=ts_context(limit)).result(timeout=TIMEOUT)
        with ts.Batch() as batch:
            futures = [kv.read(int(k).to_bytes(8, "big"), batch=batch) for k in sample]
        return {k: f.result(timeout=TIMEOUT).value for k, f in zip(sample, futures)}

    limit = best_concurrency(ts_read)
    times = turns({"ngshard": ngshard_read,
                   f"tensorstore (s3_request_concurrency {limit})": lambda: ts_read(limit)},
                  args.repeat, lambda name, out: _same(name, out, want))
    report(f"read {args.reads} random keys of {args.keys} x 1 KiB, fresh store",
           times, 3 * args.latency)


def _same(name: str, got, want) -> None:
    if got != want:
        raise SystemExit(f"{name} read other values")


def bench_region(s3, endpoint: str, args) -> None:
    prefix = f"bench-region-{os.getpid()}"
    url = f"s3://{BUCKET}/{prefix}"
    data = np.random.default_rng(1).integers(0, 255, REGION, dtype=np.uint8)
    vol = ngshard.create_volume(url, dtype="uint8", shape=REGION, chunk_size=(64, 64, 64),
                                layer_type="image", sharding="auto",
                                storage_options=s3.options)
    vol[:, :, :] = data
    vol.commit()
    # the same reads through a proxy that adds nothing: what a library's time is beside its
    # serial round trips (moto answers each request in Python, so no library is near the
    # floor; (time - time at 0 ms) / latency counts the round trips one after another)
    zero, zero_endpoint = proxy(s3.endpoint, 0.0)

    def ngshard_read(at: str):
        options = {**s3.options, "endpoint_url": at}
        return ngshard.open_volume(url, storage_options=options)[:, :, :, 0]

    def ts_read(limit: int, at: str = endpoint):
        store = ts.open({"driver": "neuroglancer_precomputed",
                         "kvstore": ts_s3(at, prefix)},
                        context=ts_context(limit)).result(timeout=TIMEOUT)
        return store[:, :, :, 0].read().result(timeout=TIMEOUT)

    limit = best_concurrency(ts_read)
    libraries = {"ngshard": ngshard_read,
                 f"tensorstore (s3_request_concurrency {limit})": lambda at: ts_read(limit, at)}
    cv = Path(args.cloudvolume) if args.cloudvolume else None
    if cv is not None and cv.exists():
        libraries["cloud-volume (parallel=1, over HTTP)"] = lambda at: _cloudvolume(
            cv, f"precomputed://{at}/{BUCKET}/{prefix}")
    else:
        print(f"(no cloud-volume {f'at {cv}' if cv else 'here, and no --cloudvolume'}: its row "
              f"is skipped)")
    total = int(data.astype(np.uint64).sum())

    def check(name, out):
        if isinstance(out, int):
            if out != total:
                raise SystemExit(f"{name} read other values")
        elif not np.array_equal(out, data):
            raise SystemExit(f"{name} read other values")

    try:
        times = turns({name: lambda read=read: read(endpoint)
                       for name, read in libraries.items()}, args.repeat, check)
        at_zero = turns({name: lambda read=read: read(zero_endpoint)
                         for name, read in libraries.items()}, args.repeat, check)
    finally:
        zero.kill()
    report(f"read a {'x'.join(map(str, REGION))} uint8 region (64^3 chunks, sharded), fresh "
           f"open", times, 3 * args.latency)
    print(f"  the same at 0 ms added: (time - that) / {args.latency * 1000:g} ms = serial round "
          f"trips")
    for name in libraries:
        t, t0 = statistics.median(times[name]), statistics.median(at_zero[name])
        print(f"  {name:<40} {t0:8.3f} s  {(t - t0) / args.latency:5.1f} round trips",
              flush=True)


def _cloudvolume(python: Path, url: str) -> Measured:
    """cloud-volume's read in its own venv, timed from its CloudVolume(...) on (Python's
    start and imports left out)."""
    out = subprocess.run([str(python), "-c", CLOUDVOLUME, url, ",".join(map(str, REGION))],
                         capture_output=True, text=True, timeout=TIMEOUT, check=True)
    seconds, total = out.stdout.split()
    return Measured((float(seconds), int(total)))


def bench_convert(s3, endpoint: str, args) -> None:
    shape = (512, 512, max(1, args.convert_mib * 4))  # x, y, z: --convert-mib MiB of uint8
    work = Path(tempfile.mkdtemp(prefix="bench-cloud-"))
    src = work / "src.zarr"
    arr = ngshard.zarr.create_array(src, shape[::-1], "uint8", chunks=(64, 64, 64),
                                    shards=(256, 256, 256))
    arr[...] = np.random.default_rng(2).integers(0, 255, shape[::-1], dtype=np.uint8)
    options = {**s3.options, "endpoint_url": endpoint}
    runs = iter(range(10 ** 6))

    def ngshard_convert():
        dst = f"s3://{BUCKET}/bench-convert-{os.getpid()}-{next(runs)}"
        ngshard.convert(str(src), dst, chunk_size=(64, 64, 64), encoding="raw",
                        progress=False, storage_options=options)
        return dst

    def ts_convert(limit: int):
        prefix = f"bench-convert-ts-{os.getpid()}-{next(runs)}"
        source = ts.open({"driver": "zarr3", "kvstore": f"file://{src}/"}
                         ).result(timeout=TIMEOUT)
        dst = ts.open({"driver": "neuroglancer_precomputed", "kvstore": ts_s3(endpoint, prefix),
                       "create": True, "multiscale_metadata": {
                           "type": "image", "data_type": "uint8", "num_channels": 1},
                       "scale_metadata": {"size": list(shape), "resolution": [1, 1, 1],
                                          "chunk_size": [64, 64, 64], "encoding": "raw",
                                          "sharding": sharding}},
                      context=ts_context(limit)).result(timeout=TIMEOUT)
        dst[..., 0].write(source.T).result(timeout=TIMEOUT)  # zarr is z, y, x
        return prefix

    # tensorstore writes the sharding ngshard chose for the layer
    sharding = ngshard.open_volume(ngshard_convert(), storage_options=options).info.to_json()[
        "scales"][0]["sharding"]
    limit = best_concurrency(ts_convert, (64, 128))
    times = turns({"ngshard": ngshard_convert,
                   f"tensorstore (s3_request_concurrency {limit})": lambda: ts_convert(limit)},
                  args.repeat, lambda name, out: None)
    report(f"convert a local {args.convert_mib} MiB zarr v3 array {shape} to a sharded "
           f"precomputed layer on s3", times, None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.02)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--reads", type=int, default=1000)
    ap.add_argument("--convert-mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cloudvolume", help="the python of a venv with cloud-volume (default: "
                    "this one, if it has cloud-volume)",
                    default=sys.executable if importlib.util.find_spec("cloudvolume") else None)
    ap.add_argument("--only", choices=("keys", "region", "convert"))
    args = ap.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # tensorstore signs with these
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    print(machine(), flush=True)
    print(f"moto S3 server behind a proxy adding {args.latency * 1000:.0f} ms per request")
    s3 = start_s3()
    public_reads(s3)
    child, endpoint = proxy(s3.endpoint, args.latency)
    try:
        for job in ("keys", "region", "convert"):
            if args.only in (None, job):
                globals()[f"bench_{job}"](s3, endpoint, args)
    finally:
        child.kill()
        s3.stop()
    print(f"\nload average after: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
