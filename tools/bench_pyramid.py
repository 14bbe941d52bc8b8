"""A 5-level pyramid of a sharded precomputed layer, and a transfer of an unsharded layer to
sharded. The pyramid: ngshard (``ngshard.downsample`` on N
local worker processes: each task reads a box once and writes every level of it) against a
tensorstore copy from its ``downsample`` driver, level by level (each level read back from
the one written before, into the same scale geometry and sharding ngshard chose), and, when
``--igneous PYTHON`` names an interpreter with ``igneous-pipeline`` installed, igneous'
sharded downsampling (``create_image_shard_downsample_tasks``, one mip per run, as
``igneous image downsample --sharded`` does) on a ``LocalTaskQueue`` of N processes.

    python tools/bench_pyramid.py [--repeat 1] [--workers 2] [--scale 1.0]
        [--igneous /work/igvenv/bin/python] [--dir /tmp] [--nofsync] [--before SRC]

``--nofsync`` adds ngshard with its fsyncs made no-ops (a ``sitecustomize`` on the child's
path: the peers do not fsync); ``--before SRC`` adds ngshard imported from SRC (the ``src``
folder of an earlier checkout, its compiled ``_kernels`` beside it), for a before/after
in one run. Every ngshard's modules are compiled to bytecode first, as installing a wheel
does for the peers (an editable install under PYTHONDONTWRITEBYTECODE compiles them in every
process). Each row gives the CPU time of each run's process tree (each process's at its last
sample, 50 ms apart: a little short).

The re-shard: the transfer's sharded result (gzip shards) into shards of another spec:
ngshard carries each chunk's gzip stream, tensorstore inflates and compresses again (igneous
is left out: its ``image xfer`` of a sharded layer copies the shard files whole but writes
another sharding spec into the info, so its result does not read back).

Sources (scaled down from the issue's 4 GiB / 2 GiB, say so when reporting): a uint8 image
of 1024 x 1024 x 512 (512 MiB) and a uint64 segmentation of 512 x 512 x 128 (256 MiB), 4 x 4
x 40 nm, 64^3 chunks in ngshard's auto shards, raw (image) and compressed_segmentation
(segmentation); every level by the factor 2 x 2 x 1 (igneous' default, so all three do the
same work): mean for the image, mode for the segmentation. The transfer: an unsharded raw
uint8 layer of 1024 x 512 x 512 (256 MiB, 64^3 chunk files gzip'd as ``.gz`` files, as
cloud-volume and igneous write raw chunks by default) into ngshard's auto shards (gzip data
encoding): ``ngshard.transfer`` (each file's gzip stream carried into the shard), a
tensorstore copy (one transaction, the same spec; it reads no ``.gz`` files, so it copies
the same chunks stored as plain files) and igneous' ``create_image_shard_transfer_tasks``
(``igneous image xfer --sharded``).

Fairness: igneous writes its shards' gzip at libdeflate level 9 (cloud-files' default),
tensorstore through its own zlib (its streams match no level of Python's zlib; about 1% larger
than libdeflate's here), ngshard at libdeflate level 1 (``compression.GZIP_LEVEL``): each row
gives the bytes each wrote. All three gzip the compressed_segmentation shards (igneous' default
data encoding for it, and ngshard's auto sharding's since it takes igneous' rule), so the
segmentation row writes the same encoding on every side. ngshard fsyncs what it writes (its
pipelines are durable), the peers do not (``--nofsync`` measures ngshard without). igneous'
tasks are its defaults (``--memory 3.5e9``, at most 3 levels a run): at this size each of its
runs is one task, so its second process idles. Each run is a child process on a fresh copy of
the source; peak memory is the largest VmHWM of a worker process (tensorstore: its one
process). The load average is printed before and after: the machine is shared.
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

LEVELS, FACTOR, CHUNK = 5, (2, 2, 1), 64
#: The re-shard's destination spec (ngshard's and tensorstore's; igneous picks its own)
RESHARD = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
           "minishard_bits": 3, "shard_bits": 3, "minishard_index_encoding": "gzip",
           "data_encoding": "gzip"}

IGNEOUS = """
import json, sys, time
from taskqueue import LocalTaskQueue
import igneous.task_creation as tc
from cloudvolume import CloudVolume
path, levels, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
t = time.perf_counter()
mip, tasks_run = 0, []
while mip < levels:  # as `igneous image downsample --sharded --mip M` run until done
    tasks = list(tc.create_image_shard_downsample_tasks(
        f"file://{path}", mip=mip, factor=(2, 2, 1), num_mips=min(3, levels - mip)))
    LocalTaskQueue(parallel=workers, progress=False).insert_all(tasks)
    tasks_run.append(len(tasks))
    mip = len(CloudVolume(f"file://{path}").info["scales"]) - 1
print(json.dumps({"seconds": time.perf_counter() - t, "tasks": tasks_run}))
"""

IGNEOUS_XFER = """
import json, sys, time
from taskqueue import LocalTaskQueue
import igneous.task_creation as tc
src, dst, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = time.perf_counter()
tasks = tc.create_image_shard_transfer_tasks(f"file://{src}", f"file://{dst}", mip=0)
LocalTaskQueue(parallel=workers, progress=False).insert_all(tasks)
print(json.dumps({"seconds": time.perf_counter() - t}))
"""


#: ngshard's variants beside itself: name -> the environment of its child (main fills it)
VARIANTS: dict[str, dict] = {}
NOFSYNC = "ngshard, no fsync"
BEFORE = "ngshard before"


def variants(scratch: str, nofsync: bool, before: str | None) -> None:
    """Compile ngshard (and ``before``) to bytecode; the environments of the variants."""
    import compileall

    import ngshard

    for tree in [os.path.dirname(ngshard.__file__)] + ([before] if before else []):
        compileall.compile_dir(tree, quiet=1)
    if nofsync:
        site = os.path.join(scratch, "nofsync")
        os.makedirs(site, exist_ok=True)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.fsync = lambda fd: None\n")
        VARIANTS[NOFSYNC] = {**os.environ, "PYTHONPATH": site}
    if before:
        VARIANTS[BEFORE] = {**os.environ, "PYTHONPATH": before}


def ngshards() -> list[str]:
    return ["ngshard", *VARIANTS]


def make_source(path: str, shape, dtype: str) -> None:
    import ngshard

    seg = dtype == "uint64"
    vol = ngshard.create_volume(path, shape=shape, dtype=dtype, chunk_size=(CHUNK,) * 3,
                                resolution=(4, 4, 40), sharding="auto",
                                encoding="compressed_segmentation" if seg else "raw",
                                layer_type="segmentation" if seg else "image")
    rng = np.random.default_rng(0)
    x, y = np.mgrid[0:shape[0], 0:shape[1]]
    for z in range(0, shape[2], CHUNK):
        n = min(CHUNK, shape[2] - z)
        if seg:  # cells of a few hundred voxels across, labels up to 2**40
            cells = ((x // 37) * 1000 + (y // 29) + (1 << 40)).astype(np.uint64)
            slab = np.repeat(cells[..., None], n, axis=2) + np.uint64(z // 16)
        else:
            base = (96 + 60 * np.sin(x / 37.0 + z / 50.0) * np.cos(y / 23.0))
            slab = (base[..., None] + rng.integers(-8, 8, (*shape[:2], n))).clip(0, 255)
        vol[:, :, z:z + n] = slab.astype(dtype)
        vol.commit()


def child_ngshard(path: str, workers: int) -> dict:
    import ngshard

    t = time.perf_counter()
    ngshard.downsample(path, levels=LEVELS, factor=FACTOR, workers=workers, progress=False,
                       resume=False)
    return {"seconds": time.perf_counter() - t}


def child_tensorstore(path: str, reference: str) -> dict:
    """Each level from the one written before, into the scale ngshard's run laid out."""
    import tensorstore as ts

    with open(os.path.join(reference, "info")) as f:
        info = json.load(f)
    context = ts.Context(benchlib.TS_CONTEXT)
    seg = info["type"] == "segmentation"
    t = time.perf_counter()
    prev = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                    "scale_index": 0}, context=context).result(timeout=PEER_TIMEOUT)
    for scale in info["scales"][1:LEVELS + 1]:
        meta = {k: scale[k] for k in ("key", "size", "voxel_offset", "resolution", "encoding",
                                      "sharding") if k in scale}
        meta["chunk_size"] = scale["chunk_sizes"][0]
        if "compressed_segmentation_block_size" in scale:
            meta["compressed_segmentation_block_size"] = \
                scale["compressed_segmentation_block_size"]
        dest = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                        "scale_metadata": meta}, create=True, context=context
                       ).result(timeout=PEER_TIMEOUT)
        source = ts.downsample(prev, [*FACTOR, 1], "mode" if seg else "mean")
        with ts.Transaction() as txn:
            dest.with_transaction(txn).write(source).result(timeout=PEER_TIMEOUT)
        prev = dest
    return {"seconds": time.perf_counter() - t}


def child_transfer(kind: str, src: str, dst: str, workers: int) -> dict:
    import ngshard

    reshard = kind.startswith("reshard-")
    kind = kind.removeprefix("reshard-")
    t = time.perf_counter()
    if kind == "ngshard":
        ngshard.transfer(src, dst, workers=workers, progress=False, resume=False,
                         sharding=json.dumps(RESHARD) if reshard else "auto")
        return {"seconds": time.perf_counter() - t}
    import tensorstore as ts

    from ngshard.volume.sharding import auto_sharding

    context = ts.Context(benchlib.TS_CONTEXT)
    source = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{src}/"},
                     context=context).result(timeout=PEER_TIMEOUT)
    size = list(source.shape[:3])
    spec = RESHARD if reshard else auto_sharding(size, (CHUNK,) * 3, CHUNK**3).to_json()
    dest = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dst}/",
                    "multiscale_metadata": {"type": "image", "data_type": "uint8",
                                            "num_channels": 1},
                    "scale_metadata": {"size": size, "resolution": [4, 4, 40],
                                       "encoding": "raw", "chunk_size": [CHUNK] * 3,
                                       "sharding": spec}},
                   create=True, context=context).result(timeout=PEER_TIMEOUT)
    with ts.Transaction() as txn:
        dest.with_transaction(txn).write(source).result(timeout=PEER_TIMEOUT)
    return {"seconds": time.perf_counter() - t}


def transfer_row(scratch: str, workers: int, repeat: int, igneous: str | None,
                 scale: float = 1.0) -> None:
    import ngshard

    shape = (int(1024 * scale), int(512 * scale), 512)
    # tensorstore reads no .gz chunk files: it copies the same chunks as plain files
    src, plain = os.path.join(scratch, "xfer-src"), os.path.join(scratch, "xfer-plain")
    vol, flat = (ngshard.create_volume(path, shape=shape, dtype="uint8", chunk_size=(CHUNK,) * 3,
                                       resolution=(4, 4, 40), compress=compress)
                 for path, compress in ((src, "gzip"), (plain, None)))
    rng = np.random.default_rng(0)
    for z in range(0, shape[2], CHUNK):
        flat[:, :, z:z + CHUNK] = vol[:, :, z:z + CHUNK] = \
            rng.integers(90, 110, (*shape[:2], CHUNK), np.uint8)
        vol.commit()
        flat.commit()
    kinds = [*ngshards(), "tensorstore"] + (["igneous"] if igneous else [])
    sharded = os.path.join(scratch, "xfer-sharded")  # the re-shard's source
    mib = np.prod(shape) / 2**20
    for reshard in (False, True):
        # igneous' xfer of a sharded layer copies its shard files whole under another spec
        # in the info: its result does not read back (igneous-pipeline 4.37)
        these = [k for k in kinds if not (reshard and k == "igneous")]
        runs: dict[str, list[dict]] = {k: [] for k in these}
        for turn in range(repeat):
            for kind in these[turn % len(these):] + these[:turn % len(these)]:
                dst = os.path.join(scratch, "xfer-dst")
                shutil.rmtree(dst, ignore_errors=True)
                os.sync()
                source = sharded if reshard else plain if kind == "tensorstore" else src
                child = "ngshard" if kind in VARIANTS else kind
                cmd = [igneous, "-c", IGNEOUS_XFER, source, dst, str(workers)] \
                    if kind == "igneous" else \
                    [sys.executable, __file__, "--child",
                     f"xfer-{'reshard-' if reshard else ''}{child}", source, dst, str(workers)]
                runs[kind].append(_measure(kind, cmd))
                out = ngshard.open_volume(dst)
                if out.scale.sharding is None or \
                        not np.array_equal(out[:, :, :64], vol[:, :, :64]):
                    raise SystemExit(f"{kind}: the transfer's result differs from the source")
                runs[kind][-1]["written"] = _bytes(dst)
                if kind == "ngshard" and not reshard and not os.path.exists(sharded):
                    shutil.copytree(dst, sharded)
        what = "sharded -> re-sharded (gzip both)" if reshard else "unsharded -> sharded"
        _report(f"transfer uint8 {shape} ({mib:.0f} MiB) {what}", runs, mib)


def _report(label: str, runs: dict[str, list[dict]], mib: float) -> None:
    times = {k: [r["seconds"] for r in v] for k, v in runs.items()}
    extra = {k: f"peak {max(r['peak'] for r in v) / 2**20:.0f} MiB per "
                f"{'process' if k == 'tensorstore' else 'worker'}, cpu "
                f"{np.median([r['cpu'] for r in v]):.1f} s, wrote "
                f"{v[-1]['written'] / 2**20:.2f} MiB" for k, v in runs.items()}
    benchlib.report(label, times, per=(mib, "MiB"), extra=extra)


def _measure(kind: str, cmd: list[str]) -> dict:
    """Run a child, its peak memory (a worker's, or tensorstore's process) and the CPU time
    of its process tree (each process's at its last sample, 50 ms apart) with its result."""
    cpu: dict[int, float] = {}
    own, peak, result = benchlib.run_watched(kind, cmd, VARIANTS.get(kind), cpu)
    return {"peak": peak if kind != "tensorstore" else own, "cpu": sum(cpu.values()),
            **result}


def check(path: str, reference: str) -> None:
    """The coarsest level equals ngshard's (read by tensorstore)."""
    import tensorstore as ts

    a, b = (ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{p}/",
                     "scale_index": LEVELS}).result(timeout=PEER_TIMEOUT).read()
            .result(timeout=PEER_TIMEOUT) for p in (path, reference))
    if not np.array_equal(a, b):
        raise SystemExit(f"{path}: its coarsest level differs from ngshard's")


def run_child(kind: str, source: str, scratch: str, workers: int, reference: str | None,
              igneous: str | None) -> dict:
    path = os.path.join(scratch, kind)
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(source, path)
    os.sync()
    if kind == "igneous":
        cmd = [igneous, "-c", IGNEOUS, path, str(LEVELS), str(workers)]
    else:
        cmd = [sys.executable, __file__, "--child", "ngshard" if kind in VARIANTS else kind,
               path, reference or "", str(workers)]
    result = _measure(kind, cmd)
    if reference is not None and kind != "igneous":
        check(path, reference)
    return {**result, "written": _bytes(path) - _bytes(source)}


def _bytes(path: str) -> int:
    """The bytes of the files under ``path``: what a run wrote, compression level and all."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="scale the sources' x, y")
    parser.add_argument("--igneous", metavar="PYTHON", help="a python with igneous-pipeline")
    parser.add_argument("--dir", default=None, help="scratch directory (default: /tmp)")
    parser.add_argument("--only", choices=("pyramid", "transfer"), help="one part only")
    parser.add_argument("--nofsync", action="store_true",
                        help="also ngshard with its fsyncs made no-ops")
    parser.add_argument("--before", metavar="SRC",
                        help="also ngshard imported from SRC (an earlier checkout's src)")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path, reference, workers = args.child
        if kind.startswith("xfer-"):
            result = child_transfer(kind[5:], path, reference, int(workers))
        elif kind == "ngshard":
            result = child_ngshard(path, int(workers))
        else:
            result = child_tensorstore(path, reference)
        print(json.dumps(result))
        return
    print(f"load average before: {os.getloadavg()}")
    benchlib.header(f"{LEVELS}-level pyramid (factor {FACTOR}) of a sharded precomputed "
                    f"layer; ngshard and igneous: {args.workers} worker processes")
    scratch = tempfile.mkdtemp(prefix="bench-pyramid-", dir=args.dir)
    variants(scratch, args.nofsync, args.before)
    s = args.scale
    try:
        pyramids = (("uint8", (int(1024 * s), int(1024 * s), 512)),
                    ("uint64", (int(512 * s), int(512 * s), 128)))
        for dtype, shape in pyramids if args.only != "transfer" else ():
            source = os.path.join(scratch, f"src-{dtype}")
            make_source(source, shape, dtype)
            mib = np.prod(shape) * np.dtype(dtype).itemsize / 2**20
            kinds = [*ngshards(), "tensorstore"] + (["igneous"] if args.igneous else [])
            runs: dict[str, list[dict]] = {k: [] for k in kinds}
            reference = None
            for turn in range(args.repeat):
                if reference is None:  # ngshard first: its levels are the reference
                    runs["ngshard"].append(run_child("ngshard", source, scratch,
                                                     args.workers, None, None))
                    reference = os.path.join(scratch, "reference")
                    shutil.rmtree(reference, ignore_errors=True)
                    shutil.copytree(os.path.join(scratch, "ngshard"), reference)
                    order = kinds[1:]
                else:
                    order = kinds[turn % len(kinds):] + kinds[:turn % len(kinds)]
                for kind in order:
                    runs[kind].append(run_child(kind, source, scratch, args.workers,
                                                reference, args.igneous))
            _report(f"{dtype} {shape} ({mib:.0f} MiB) -> {LEVELS} levels", runs, mib)
        if args.only != "pyramid":
            transfer_row(scratch, args.workers, args.repeat, args.igneous, s)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"load average after: {os.getloadavg()}")
    benchlib.summary("tools/bench_pyramid.py")


if __name__ == "__main__":
    main()
