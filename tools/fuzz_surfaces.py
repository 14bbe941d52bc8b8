"""Fuzz every format surface ngshard reads (``tools/fuzz_layers.py``: zarr v2 and v3 arrays
with their shards, precomputed volumes, skeletons, multi-resolution and legacy meshes,
annotations with spatial and relationship indices, segment properties, and the ``info`` of
each): case n of a seed damages one file of an honest dataset (JSON-aware for metadata,
integer fields and bytes for the rest) and reads it all.

Each worker is a child process under a memory limit (RLIMIT_AS); a case that outlives its
time is a hang (the worker is killed and restarted after it), a worker that dies is a crash.
Per case: ngshard's outcome (value, our error, foreign exception, MemoryError), the peak
memory of ngshard's reads (VmHWM, reset per case) against the bytes of the dataset, any file
opened under the ``outside`` directory beside the dataset (an escape: the mutations plant
names pointing there), and, where tensorstore or zarr-python read the surface, values that
differ from theirs. Usage::

    python tools/fuzz_surfaces.py --cases 20000 --jobs 2 --seed 1
    python tools/fuzz_surfaces.py --surfaces zarr3 --seed 1 --replay 417
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import fuzz_cloudvolume  # noqa: E402
import fuzz_layers  # noqa: E402
from fuzz_layers import OUTSIDE, SURFACES, mutate_file  # noqa: E402
from fuzz_mutate import pick  # noqa: E402
from fuzz_probes import Memory  # noqa: E402

import ngshard  # noqa: E402

GROUP = 25  # cases per honest dataset
CASE_SECONDS = 20  # a case taking longer is a hang
#: Cases per worker process: its imports (ngshard, tensorstore, zarr, a cloud-volume child)
#: cost seconds on a loaded machine, a case milliseconds.
BATCH = 1000
MEMORY_LIMIT = 6 << 30  # RLIMIT_AS of a worker (tensorstore reserves address space)
MiB = 1 << 20
#: Peers asked only where ngshard reads a value (the wrong-value oracle; a case in the
#: cloud-volume child costs more than ngshard's reads).
CALLED_ON_VALUES = {"cloud-volume"}
#: The Python of the peers' venv (cloud-volume; tests/peers.py makes it).
PEER_PYTHON = os.environ.get("NGSHARD_PEER_PYTHON", str(
    Path(__file__).resolve().parents[1] / ".ci/peers/bin/python"))
COUNTS = ("cases", "wrong values", "foreign exceptions", "hangs", "crashes", "over memory",
          "escapes", "ngshard errors", "peer disagrees (error)", "peer crashes", "compared")


def files_of(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


class Escapes:
    """Records opens under the ``outside`` directory (a Python audit hook: every open by
    ngshard's local storage goes through os.open or open)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.watch: str | None = None
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if self.watch and event in ("open", "os.listdir", "os.scandir") and args and \
                isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.abspath(os.fsdecode(args[0]))
            if path.startswith(self.watch):
                self.seen.append(path)


def outcome(fn, *args) -> tuple[str, object]:
    try:
        return "value", fn(*args)
    except (ngshard.NgShardError, KeyError) as e:
        return "error", str(e)[:200]
    except MemoryError:
        return "memory", "MemoryError"
    except TimeoutError:
        raise
    except Exception as e:
        tb = traceback.extract_tb(e.__traceback__)[-1]
        return "foreign", f"{type(e).__name__}: {str(e)[:150]} at {tb.filename}:{tb.lineno}"


def peer_outcome(fn, *args) -> tuple[str, object]:
    try:
        return "value", fn(*args)
    except TimeoutError:
        raise
    except ChildProcessError as e:  # a peer's child overran or died: no outcome to compare
        return "crash", str(e)
    except Exception as e:
        return "error", str(e)[:200]


def differing(a: dict, b: dict) -> str | None:
    """The first result both sides read whose values differ (floats within 1e-5 relative,
    1e-4 absolute: the peers apply a mesh's transform in another precision), else None."""
    for k in sorted(a.keys() & b.keys()):
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.shape != y.shape:
            return k
        if x.dtype.kind == "f" or y.dtype.kind == "f":
            if not np.allclose(x, y, rtol=1e-5, atol=1e-4, equal_nan=True):
                return k
        elif not np.array_equal(x, y):
            return k
    return None


def run_case(surface: str, root: Path, originals: dict, keys: list[int], seed: int,
             number: int, mem: Memory, escapes: Escapes) -> dict:
    """Damage one file, read, and judge: one record per case."""
    rng = np.random.default_rng([seed, 2, number])
    infos = [n for n in originals if n.rsplit("/", 1)[-1] in ("info", "zarr.json", ".zarray")]
    name = pick(rng, infos) if infos and rng.random() < 0.35 else pick(rng, sorted(originals))
    data, mutation = mutate_file(rng, name, originals[name])
    if data is None:
        (root / name).unlink()
    else:
        (root / name).write_bytes(data)
    try:  # the readers write nothing: the damaged file is all there is to put back
        return read_case(surface, root, name, data, mutation, originals, keys, number, mem,
                         escapes)
    finally:
        (root / name).write_bytes(originals[name])


def read_case(surface: str, root: Path, name: str, data: bytes | None, mutation: str,
              originals: dict, keys: list[int], number: int, mem: Memory,
              escapes: Escapes) -> dict:
    """Read a damaged dataset with ngshard and its peers, and judge."""
    _, read, peers = SURFACES[surface]
    size = sum(len(d) for d in originals.values()) - len(originals[name]) + len(data or b"")
    rec = {"case": number, "file": name, "mutation": mutation, "bytes": size}
    escapes.seen, escapes.watch = [], str(root.parent / OUTSIDE)
    mem.growth = 0
    with mem:
        kind, value = outcome(read, root, keys)
    escapes.watch = None
    rec["ngshard"] = kind if kind == "value" else f"{kind}: {value}"
    rec["peak_kib"] = mem.growth
    rec["escapes"] = escapes.seen[:3]
    for peer, fn in peers.items():
        if kind != "value" and peer in CALLED_ON_VALUES:
            continue
        pk, pv = peer_outcome(fn, root, CASE_SECONDS, keys)
        if pk == "crash":
            rec["peer crashes"] = 1
        elif kind == "value" and pk == "value":
            if value.keys() & pv.keys():
                rec.setdefault("compared", []).append(peer)
            key = differing(value, pv)
            if key is not None:
                rec.setdefault("wrong", []).append(f"{peer}: {key}")
        elif kind == "error" and pk == "value":
            rec.setdefault("peer reads", []).append(peer)
    return rec


def judge(rec: dict) -> list[str]:
    """The counts a record adds to (besides "cases")."""
    out = []
    ng = rec.get("ngshard", "")
    if rec.get("wrong"):
        out.append("wrong values")
    if ng.startswith("foreign"):
        out.append("foreign exceptions")
    if ng.startswith("memory") or rec.get("peak_kib", 0) * 1024 > 64 * MiB + 4 * rec["bytes"]:
        out.append("over memory")
    if rec.get("escapes"):
        out.append("escapes")
    if ng.startswith("error"):
        out.append("ngshard errors")
    if rec.get("peer reads"):
        out.append("peer disagrees (error)")
    if rec.get("compared"):
        out.append("compared")
    for special in ("hangs", "crashes", "peer crashes"):
        if rec.get(special):
            out.append(special)
    return out


def worker(surface: str, seed: int, start: int, count: int, workdir: str | None,
           peers: bool = True) -> None:
    """Run cases ``start ..`` in this process (a child of :func:`run`), one JSON line each
    (without ``peers``: ngshard's reads only)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    if not peers:
        make, read, _ = SURFACES[surface]
        SURFACES[surface] = (make, read, {})
    mem, escapes = Memory(), Escapes()
    if peers and surface in fuzz_cloudvolume.SURFACES:
        fuzz_layers.CLOUD_VOLUME[:] = [fuzz_cloudvolume.CloudVolumePeer(PEER_PYTHON)]
    make = SURFACES[surface][0]
    base = Path(tempfile.mkdtemp(prefix="ngshard-surfaces-", dir=workdir))
    (base / OUTSIDE).mkdir()
    (base / OUTSIDE / "secret").write_bytes(b"SECRET" * 100)
    group, root, originals = None, base / "data", {}

    def alarm(*_):
        raise TimeoutError("case took too long")

    signal.signal(signal.SIGALRM, alarm)
    try:
        for number in range(start, start + count):
            if number // GROUP != group:
                group = number // GROUP
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir()
                make(np.random.default_rng([seed, 1, group, len(surface)]), root)
                originals = files_of(root)
                keys = honest_keys(root)
            signal.alarm(CASE_SECONDS * 3)
            try:
                rec = run_case(surface, root, originals, keys, seed, number, mem, escapes)
            except TimeoutError:
                rec = {"case": number, "hangs": 1, "bytes": 0}
            signal.alarm(0)
            print(json.dumps(rec), flush=True)
    finally:
        for peer in fuzz_layers.CLOUD_VOLUME:
            peer.close()
        shutil.rmtree(base, ignore_errors=True)


def honest_keys(root: Path) -> list[int]:
    """The ids of an honest layer (none for an array or a volume): what the peers read."""
    try:
        return ngshard.open(root).keys_array().tolist()
    except (ngshard.NgShardError, AttributeError):
        return []


def run(surfaces: list[str], seed: int, cases: int, jobs: int = 2, start: int = 0,
        workdir: str | None = None, out=None, seconds: float | None = None) -> dict:
    """Run ``cases`` cases per surface in ``jobs`` worker processes; returns per-surface
    counts, the worst peak memory against input, and the failing records."""
    workdir = workdir or ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    todo = [(s, a, min(a + BATCH, start + cases)) for a in range(start, start + cases, BATCH)
            for s in surfaces]  # surfaces in turn, so a run cut short covers them all
    counts: dict = defaultdict(Counter)
    worst: dict = {}
    failures: list = []
    running: list = []
    t0 = time.monotonic()

    def add(s: str, rec: dict) -> None:
        counts[s]["cases"] += 1
        verdicts = judge(rec)
        counts[s].update(verdicts)
        ratio = (rec.get("peak_kib", 0) * 1024, rec["bytes"], rec["case"])
        worst[s] = max(worst.get(s, ratio), ratio)
        if set(verdicts) - {"ngshard errors", "peer disagrees (error)", "peer crashes",
                            "compared"}:
            failures.append((s, rec))
            if out:
                print(s, json.dumps(rec), file=out, flush=True)
        elif "peer disagrees (error)" in verdicts and out:
            print("note:", s, json.dumps(rec), file=out, flush=True)

    while todo or running:
        while todo and len(running) < jobs and (seconds is None or
                                                time.monotonic() - t0 < seconds):
            s, a, b = todo.pop(0)
            cmd = [sys.executable, __file__, "--worker", s, str(seed), str(a), str(b - a),
                   workdir or ""]
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True)
            running.append([p, s, a, b, a, time.monotonic(), "crashes"])
        if not running:
            break
        ready, _, _ = select.select([j[0].stdout for j in running], [], [], 5)
        for job in list(running):
            p, s, a, b, nxt, last, _ = job
            if p.stdout not in ready:
                if time.monotonic() - last > CASE_SECONDS * 4:  # stuck where no alarm reaches
                    p.kill()
                    job[6] = "hangs"
                continue
            line = p.stdout.readline()
            if line:
                rec = json.loads(line)
                job[4], job[5] = rec["case"] + 1, time.monotonic()
                add(s, rec)
                continue
            p.wait(timeout=CASE_SECONDS)  # its output ended: it has exited, or is exiting
            running.remove(job)
            if job[4] < b:  # died before its last case: a crash (or killed as hung)
                what = job[6]
                if what == "crashes" and ngshard_survives(s, seed, job[4], workdir):
                    what = "peer crashes"
                add(s, {"case": job[4], what: 1, "bytes": 0, "code": p.returncode})
                if job[4] + 1 < b:
                    todo.insert(0, (s, job[4] + 1, b))
    return {"counts": counts, "worst": worst, "failures": failures,
            "seconds": time.monotonic() - t0}


def ngshard_survives(surface: str, seed: int, case: int, workdir: str | None) -> bool:
    """Whether a case that killed its worker runs to its end with ngshard's reads alone (then
    a peer crashed: tensorstore does on some of these)."""
    cmd = [sys.executable, __file__, "--worker", surface, str(seed), str(case), "1",
           workdir or "", "no-peers"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CASE_SECONDS * 4)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0 and '"case"' in done.stdout


def report(result: dict) -> str:
    lines = [f"{result['seconds']:.0f} s; per surface: " + ", ".join(COUNTS)]
    total = Counter()
    for s, c in sorted(result["counts"].items()):
        total.update(c)
        peak, size, case = result["worst"].get(s, (0, 0, -1))
        lines.append(f"{s:20s} " + " ".join(f"{c[k]:7d}" for k in COUNTS) +
                     f"   worst peak {peak / MiB:.1f} MiB on {size} bytes (case {case})")
    lines.append(f"{'all':20s} " + " ".join(f"{total[k]:7d}" for k in COUNTS))
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        s, seed, a, n, wd = argv[1:6]
        worker(s, int(seed), int(a), int(n), wd or None, argv[6:7] != ["no-peers"])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--surfaces", default=",".join(SURFACES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=1000, help="per surface")
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--seconds", type=float, help="start no new batch after this long")
    p.add_argument("--replay", type=int, help="run this one case in this process, print it")
    args = p.parse_args(argv)
    surfaces = args.surfaces.split(",")
    if args.replay is not None:
        for s in surfaces:
            worker(s, args.seed, args.replay, 1, None)
        return 0
    result = run(surfaces, args.seed, args.cases, args.jobs, args.start, out=sys.stdout,
                 seconds=args.seconds)
    print(report(result))
    bad = sum(c[k] for c in result["counts"].values() for k in COUNTS[1:7])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
