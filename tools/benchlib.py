"""What the benchmarks share: the libraries take turns, and every row prints each library's
median and, for each peer, the median over the turns of ngshard's figure over the peer's.

Why turns: the benchmarks run on a 2-core machine beside other work, and its speed drifts over
minutes; a library timed in a block of its own could land on a fast or a slow minute. Within a
turn the libraries run back to back, so the per-turn ratio compares like with like. The first
library of a turn rotates, so none is always first (or always right after another's garbage).

Also here: the one spec of the key-value benchmarks, the cache budget every library gets, and
the machine line every script prints, and the options and sample data of the volume
benchmarks.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
        "preshift_bits": 0, "minishard_bits": 6, "shard_bits": 4,
        "minishard_index_encoding": "gzip", "data_encoding": "raw"}

#: Index cache of every library (ngshard's default ``cache_bytes``; tensorstore's default
#: context has no cache pool at all, so it is given one of the same size). tensorstore and
#: ngshard fsync what they write by default (``file_io_sync``, ``durable``); cloud-volume never
#: does. So by default all three leave written data to the page cache alike; with the
#: environment variable BENCH_FSYNC=1, ngshard and tensorstore both fsync (the cost of
#: durability; cloud-volume rows are then not like for like).
FSYNC = os.environ.get("BENCH_FSYNC") == "1"
CACHE_BYTES = 256 << 20
TS_CONTEXT = {"cache_pool": {"total_bytes_limit": CACHE_BYTES}, "file_io_sync": FSYNC}

#: How long a tool waits on a peer call (a tensorstore future, zarr-python, a child process)
#: before calling it hung: every one is given this timeout, so a run that would hang fails
#: instead. A benchmark's largest peer call takes well under a minute here.
PEER_TIMEOUT = 600
#: How long a benchmark's child process (one measured run, up to 16 M keys) may take.
CHILD_TIMEOUT = 3600

RATIO_NOTE = ("ratio = median over the turns of ngshard's figure / the peer's figure in the "
              "same turn (times: below 1 means ngshard is faster), then (lowest..highest)")

#: Every row reported so far, for the summary table at the end of a script.
ROWS: list[tuple[str, str, str, str, str, str]] = []

Case = (Callable[[], Any] | tuple[Callable[[], Any], Callable[[Any], Any]]
        | tuple[Callable[[], Any], Callable[[Any], Any], Callable[[Any, Any], Any]])


def machine() -> str:
    """Date, cores, CPU model, Python and the versions of the libraries compared."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import ngshard

    versions = [f"ngshard {ngshard.__version__} ({_commit(ngshard.__file__)})"]
    for name in ("numpy", "tensorstore", "cloud-volume", "cloud-files", "fsspec",
                 "aiohttp", "mmh3"):
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{datetime.datetime.now().isoformat(timespec='minutes')}; nproc "
            f"{os.cpu_count()}; {cpu}; load average {load} (other work on the machine); "
            f"Python {platform.python_version()}; " + ", ".join(versions))


def _commit(path: str) -> str:
    """The git commit of the checkout a module was imported from, if any."""
    try:
        out = subprocess.run(["git", "-C", os.path.dirname(path), "log", "-1",
                              "--format=%h %cs"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "no git"
    dirty = subprocess.run(["git", "-C", os.path.dirname(path), "status", "--porcelain", "--",
                            "."], capture_output=True, text=True, timeout=10).stdout.strip()
    return (out.stdout.strip() or "no git") + (", modified" if dirty else "")


def hwm(pid: int | str = "self") -> int:
    """A process's peak resident memory (VmHWM; unlike ru_maxrss, not inherited over exec)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        return 0


def run_watched(kind: str, cmd: list[str], env: dict | None = None,
                cpu: dict[int, float] | None = None) -> tuple[int, int, dict]:
    """Run the child ``cmd`` (in the environment ``env``, default this one's) under
    :func:`watch`: its own peak memory, its descendants' and the JSON object its last line of
    output holds (``cpu``: filled as :func:`watch` does). A failing child ends the benchmark
    with its standard error, named ``kind``."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env)
        own, workers = watch(proc, cpu)
        if proc.returncode:
            err.seek(0)
            raise SystemExit(f"{kind} failed:\n{err.read()[-3000:]}")
        out.seek(0)
        return own, workers, json.loads(out.read().strip().splitlines()[-1])


def watch(proc: subprocess.Popen, cpu: dict[int, float] | None = None) -> tuple[int, int]:
    """Wait for ``proc``, sampling the peak memory (VmHWM) of it and of its descendants
    (worker processes, a forkserver's children among them) from outside, so the child's own
    thread count (which chooses how workers start) is not changed by the measuring. VmHWM
    only grows: the last sample of each process is its peak but for its last moments.
    ``cpu``, if given, gets each process's CPU time (user + system) at its last sample."""
    import psutil

    me = psutil.Process(proc.pid)
    peaks: dict[int, int] = {}
    while proc.poll() is None:
        try:
            for p in [me, *me.children(recursive=True)]:
                peaks[p.pid] = max(peaks.get(p.pid, 0), hwm(p.pid))
                if cpu is not None:
                    times = p.cpu_times()
                    cpu[p.pid] = times.user + times.system
        except psutil.Error:
            pass
        time.sleep(0.05)
    own = peaks.pop(proc.pid, 0)
    return own, max(peaks.values(), default=own)


def header(what: str) -> None:
    print(what)
    print(machine())
    print(RATIO_NOTE)


def take_turns(cases: dict[str, Case], repeat: int, warmup: bool = False
               ) -> dict[str, list[float]]:
    """Seconds of each case in each of ``repeat`` turns. A case is ``fn`` (timed), or
    ``(setup, fn)``: ``setup()`` untimed, then ``fn(its result)`` timed, or ``(setup, fn,
    after)``: then ``after(setup's result, fn's result)`` untimed (checks, clean-up). Turn
    ``i`` runs every case once, starting at the ``i``-th. ``warmup``: one untimed turn first
    (thread pools, first page faults, imports). Before each timed call, ``os.sync()``: no
    library writes through to disk (none fsyncs here), so without it one would pay for the
    writeback of the pages the one before it (or a setup's copy) left dirty. Also untimed:
    each case drops its result as soon as it is checked, and a full garbage collection runs
    before each timed call. Otherwise a case would pay for freeing the result of the case
    before it (a 128 MiB array, say), and for collecting that case's garbage: tensorstore,
    after ngshard in the turns, paid 40-90 ms a call that way (BENCHMARKS.md, tenth
    session)."""
    names = list(cases)
    times: dict[str, list[float]] = {name: [] for name in names}
    for turn in range(-1 if warmup else 0, repeat):
        for j in range(len(names)):
            name = names[(max(turn, 0) + j) % len(names)]
            case = cases[name]
            setup, fn, after = (*case, None)[:3] if isinstance(case, tuple) else \
                (None, case, None)
            arg = setup() if setup else None
            os.sync()
            gc.collect()
            t = time.perf_counter()
            result = fn(arg) if setup else fn()
            elapsed = time.perf_counter() - t
            if after:
                after(arg, result)
            del arg, result
            if turn >= 0:
                times[name].append(elapsed)
    return times


def _fmt(x: float) -> str:
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


def report(label: str, values: dict[str, list[float]], unit: str = "s",
           per: tuple[float, str] | None = None, extra: dict[str, str] | None = None) -> None:
    """Print one row: ``label``, then each library's median (the first entry is ngshard's) and
    for each peer the median of the per-turn ratios ngshard / peer. ``per=(count, name)`` adds
    a rate beside a time, e.g. (10000, "key") prints key/s; ``extra`` a note per library."""
    print(label)
    ours = next(iter(values))
    mine = values[ours]

    def figure(name: str) -> str:
        med = statistics.median(values[name])
        text = f"{_fmt(med)} {unit}"
        if per:
            text += f" ({_fmt(per[0] / med)} {per[1]}/s)"
        if extra and name in extra:
            text += f"; {extra[name]}"
        return text

    for name, vals in values.items():
        line = f"  {name:<52} {figure(name)}"
        if name != ours:
            ratios = [a / b for a, b in zip(mine, vals) if b]
            ratio = f"{statistics.median(ratios):.3g}"
            if len(ratios) > 1:  # the spread over the turns, to judge a ratio near 1 by
                ratio += f" ({min(ratios):.3g}..{max(ratios):.3g})"
            line += f"   ratio {ratio}"
            ROWS.append((label, f"{ours}: {figure(ours)}", ratio, name, figure(name), ""))
        print(line)


def note(text: str) -> None:
    """A line under the last row, kept in the summary too."""
    print(f"  {text}")
    if ROWS:
        label, ours, ratio, peer, theirs, notes = ROWS[-1]
        ROWS[-1] = (label, ours, ratio, peer, theirs, f"{notes} {text}".strip())


def summary(script: str) -> None:
    """The rows of this run as Markdown table rows (for BENCHMARKS.md)."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nsummary of {script} (Markdown; load average at the end {load}):")
    print("| row | ngshard | peer | peer's figure | ratio |")
    print("|---|---|---|---|---|")
    for label, ours, ratio, peer, theirs, _ in ROWS:
        print(f"| {label} | {ours} | {peer} | {theirs} | {ratio} |")


def volume_args(script: str, doc: str, size: int) -> argparse.Namespace:
    """The options of a volume benchmark (``--size``: voxels a side, ``--chunk``: chunk edge,
    ``--repeat``: turns, ``--only``: a part of the volume names), parsed, and the header
    printed."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--size", type=int, default=size)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="only the volumes whose name holds this")
    args = ap.parse_args()
    header(f"{script}: {args}")
    return args


def sample_volumes(n: int, rng: np.random.Generator) -> dict[str, tuple[str, np.ndarray]]:
    """name: (encoding, data) of the two n^3 one-channel volumes the volume benchmarks time:
    uint8 noise, stored raw, and uint64 labels repeated in slabs of 16 along x, stored as
    compressed_segmentation."""
    return {
        "uint8 raw": ("raw", rng.integers(0, 256, (n, n, n, 1), dtype=np.uint8)),
        "uint64 compressed_segmentation": ("compressed_segmentation", np.repeat(
            rng.integers(0, 2**40, (n // 16, n, n, 1), dtype=np.uint64), 16, axis=0)),
    }
