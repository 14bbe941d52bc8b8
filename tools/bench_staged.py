"""Benchmark of staged writes into sharded precomputed volumes: ngshard beside tensorstore
writing the same pieces inside one ``ts.Transaction()`` and committing it, one process.

    python tools/bench_staged.py [--repeat 3] [--only slices,boxes,whole] [--dtypes uint8,uint32]

1. slices: 128 z-slices of 512x512 written one at a time into a 512x512x128 volume with 64^3
   chunks, then committed (the image-stack-to-volume job: each slice is an image of its own,
   (y, x) in C order as an image file reads, assigned as its (x, y) transpose).
2. boxes: 1,000 random 8^3 boxes written into a 512^3 volume with 64^3 chunks, then committed.
3. whole: a 512^3 volume written with one assignment, then read whole.

Each for uint8 raw and uint32 compressed_segmentation, one shard, chunk data stored as it is
(``data_encoding`` raw). Both libraries get the same memory: tensorstore a 1 GiB cache pool,
ngshard its default 1 GiB of staged chunks; both fsync what they write (their defaults:
tensorstore's ``file_io_sync``, ngshard's durable local storage), so BENCH_FSYNC does not
apply here. The libraries take turns (``benchlib.take_turns``: the first of a turn rotates, and
the page cache is synced before each timed call); prints the median times and the median of
the per-turn ratios with their range (ngshard time over tensorstore time: below 1 is faster).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile

import numpy as np
import tensorstore as ts
from benchlib import PEER_TIMEOUT, header, report, summary, take_turns

import ngshard
from ngshard.volume import auto_sharding

CACHE_BYTES = 1 << 30
CASES = {"uint8 raw": ("uint8", "raw"),
         "uint32 compressed_segmentation": ("uint32", "compressed_segmentation")}


def sample(dtype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random bytes for images; few labels per region, as segmentations have."""
    if dtype == "uint8":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    coarse = rng.integers(0, 2**31, tuple(-(-n // 16) for n in shape), dtype=np.uint32)
    for axis, n in enumerate(shape):
        coarse = np.repeat(coarse, 16, axis=axis).take(np.arange(n), axis=axis)
    return coarse


class Case:
    """One volume layout, written by both libraries under ``work``."""

    def __init__(self, work: str, dtype: str, encoding: str, size: tuple[int, int, int],
                 chunk: int = 64) -> None:
        self.dtype, self.encoding, self.size, self.chunk = dtype, encoding, size, chunk
        itemsize = np.dtype(dtype).itemsize
        self.spec = ngshard.ShardingSpec.from_json(dict(
            auto_sharding(size, (chunk,) * 3, chunk**3 * itemsize, int(np.prod(size)) *
                          itemsize, encoding).to_json(), data_encoding="raw"))
        self.ours, self.theirs = f"{work}/ours", f"{work}/ts"

    def scale(self) -> dict:
        scale = {"size": list(self.size), "chunk_size": [self.chunk] * 3,
                 "resolution": [1, 1, 1], "encoding": self.encoding,
                 "sharding": self.spec.to_json()}
        if self.encoding == "compressed_segmentation":
            scale["compressed_segmentation_block_size"] = [8, 8, 8]
        return scale

    def ts_open(self, create: bool = False):
        spec = {"driver": "neuroglancer_precomputed",
                "kvstore": {"driver": "file", "path": self.theirs},
                "context": {"cache_pool": {"total_bytes_limit": CACHE_BYTES}}}
        if create:
            spec.update(create=True, delete_existing=True, scale_metadata=self.scale(),
                        multiscale_metadata={"data_type": self.dtype, "num_channels": 1,
                                             "type": "image" if self.dtype == "uint8"
                                             else "segmentation"})
        return ts.open(spec).result(timeout=PEER_TIMEOUT)

    def ng_create(self):
        shutil.rmtree(self.ours, ignore_errors=True)
        return ngshard.create_volume(self.ours, dtype=self.dtype, shape=self.size,
                                     chunk_size=(self.chunk,) * 3, encoding=self.encoding,
                                     sharding=self.spec,
                                     compressed_segmentation_block_size=(8, 8, 8))

    def ng_write(self, pieces: list[tuple[tuple, np.ndarray]]) -> None:
        vol = self.ng_create()
        for index, value in pieces:
            vol[index] = value
        vol.commit()

    def ts_write(self, pieces: list[tuple[tuple, np.ndarray]]) -> None:
        store = self.ts_open(create=True)
        txn = ts.Transaction()
        staged = store.with_transaction(txn)
        for index, value in pieces:
            staged[index].write(value).result(timeout=PEER_TIMEOUT)
        txn.commit_async().result(timeout=PEER_TIMEOUT)

    def check(self, expect: np.ndarray) -> None:
        ours = ngshard.open_volume(self.ours)[:]
        theirs = self.ts_open().read().result(timeout=PEER_TIMEOUT)
        assert np.array_equal(ours, expect), "ngshard wrote something else"
        assert np.array_equal(theirs, expect), "tensorstore wrote something else"
        back = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {
            "driver": "file", "path": self.ours}}).result(timeout=PEER_TIMEOUT)
        assert np.array_equal(back.read().result(timeout=PEER_TIMEOUT), expect), \
            "tensorstore misreads ngshard's volume"


def row(label: str, ng_fn, ts_fn, repeat: int, peer: str = "tensorstore, one transaction"
        ) -> None:
    report(label, take_turns({"ngshard": ng_fn, peer: ts_fn}, repeat))


def bench_slices(work: str, dtype: str, encoding: str, repeat: int) -> None:
    case = Case(work, dtype, encoding, (512, 512, 128))
    data = sample(dtype, (*case.size, 1), np.random.default_rng(1))
    # each slice an image of its own, (y, x) in C order as image files read, given as (x, y)
    images = [np.ascontiguousarray(data[:, :, z, 0].T) for z in range(case.size[2])]
    pieces = [((slice(None), slice(None), z), image.T[:, :, None])
              for z, image in enumerate(images)]
    case.ng_write(pieces), case.ts_write(pieces), case.check(data)
    row(f"{dtype} {encoding}: 128 z-slices of 512x512, commit", lambda: case.ng_write(pieces),
        lambda: case.ts_write(pieces), repeat)


def bench_boxes(work: str, dtype: str, encoding: str, repeat: int) -> None:
    case = Case(work, dtype, encoding, (512, 512, 512))
    rng = np.random.default_rng(2)
    corners = rng.integers(0, 512 - 8, (1000, 3))
    values = sample(dtype, (1000, 8, 8, 8, 1), rng)
    pieces = [(tuple(slice(int(a), int(a) + 8) for a in corner), value)
              for corner, value in zip(corners, values)]
    expect = np.zeros((*case.size, 1), dtype)
    for index, value in pieces:
        expect[index] = value
    case.ng_write(pieces), case.ts_write(pieces), case.check(expect)
    row(f"{dtype} {encoding}: 1,000 random 8^3 boxes, commit", lambda: case.ng_write(pieces),
        lambda: case.ts_write(pieces), repeat)


def bench_whole(work: str, dtype: str, encoding: str, repeat: int) -> None:
    case = Case(work, dtype, encoding, (512, 512, 512))
    data = sample(dtype, (*case.size, 1), np.random.default_rng(3))
    pieces = [((Ellipsis,), data)]

    def ts_whole() -> None:
        case.ts_open(create=True).write(data).result(timeout=PEER_TIMEOUT)

    case.ng_write(pieces), ts_whole(), case.check(data)
    row(f"{dtype} {encoding}: whole 512^3 write, commit", lambda: case.ng_write(pieces),
        ts_whole, repeat, "tensorstore")
    row(f"{dtype} {encoding}: whole 512^3 read", lambda: ngshard.open_volume(case.ours)[:],
        lambda: case.ts_open().read().result(timeout=PEER_TIMEOUT), repeat, "tensorstore")


BENCHES = {"slices": bench_slices, "boxes": bench_boxes, "whole": bench_whole}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default=",".join(BENCHES),
                    help="comma-separated subset of: " + ", ".join(BENCHES))
    ap.add_argument("--dtypes", default="uint8,uint32",
                    help="comma-separated subset of: uint8 (raw), uint32 (compressed_segmentation)")
    args = ap.parse_args()
    header(__doc__.splitlines()[0])
    work = tempfile.mkdtemp(prefix="ngshard-stagedbench-")
    try:
        for name in args.only.split(","):
            for label, (dtype, encoding) in CASES.items():
                if dtype not in args.dtypes.split(","):
                    continue
                print(f"{name}: {label}, 64^3 chunks, one shard", flush=True)
                BENCHES[name](work, dtype, encoding, args.repeat)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary("tools/bench_staged.py")


if __name__ == "__main__":
    main()
