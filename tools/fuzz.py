"""Fuzz ngshard's readers against tensorstore, the reference implementation, as the oracle.

Each case damages one file of a small store (a sharded key-value store, or a precomputed volume
of any encoding, sharded or not) and reads it with both libraries. They must agree: the same
value, or both an error. ngshard must never raise anything but NgShardError or KeyError, and its
peak memory during a read must stay below ``64 x the largest file + 64 MiB``.

Some differences are deliberate: ngshard checks a whole shard index or minishard index where
tensorstore looks only at the entry of the key it reads; and tensorstore cannot read some
valid files. Those are counted by class (``KNOWN``), after checking that the damaged file
really holds that defect and that ngshard's error names it; anything else is a mismatch,
printed with its case number for ``--replay``.

Cases are reproducible: case n of seed s damages, with its own generator, the base store of its
group (``GROUP`` consecutive cases share one base, written once: writing costs more than
reading). Usage::

    python tools/fuzz.py --cases 100000 --seed 1 --jobs 2
    python tools/fuzz.py --seed 1 --replay 4711      # one case, every comparison printed
    python tools/fuzz.py --surfaces all --cases 5000 # every other format surface, per surface

``--surfaces`` hands the run to ``tools/fuzz_surfaces.py`` (zarr v2/v3, volumes, skeletons,
meshes, annotations, segment properties, each case in a memory-limited child).
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.connection
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import fuzz_reads  # noqa: E402
from fuzz_probes import Memory  # noqa: E402
from fuzz_reads import Read, check_kv, check_volume  # noqa: E402
from fuzz_shardfmt import MiB  # noqa: E402
from fuzz_stores import Case, Store, damage, make_kv, make_volume  # noqa: E402
from fuzz_verdicts import verdict  # noqa: E402

GROUP = 50  # cases per base store
STALL = 2 * fuzz_reads.PEER_TIMEOUT  # seconds without a finished case: a hung piece
START = 120  # seconds a piece's process may take to start (import tensorstore) on a busy machine


# --- running ----------------------------------------------------------------------------------

@dataclass
class Summary:
    cases: int = 0
    seconds: float = 0.0
    by_kind: Counter = field(default_factory=Counter)
    case_outcomes: Counter = field(default_factory=Counter)
    reads: Counter = field(default_factory=Counter)
    mutations: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # verdict -> first case number
    mismatches: list = field(default_factory=list)  # printed lines
    worst_growth: tuple = (0, -1, 0)  # KiB, case, largest file

    @property
    def failures(self) -> int:
        """Cases with a mismatch, a foreign exception or memory over the bound."""
        return sum(n for v, n in self.case_outcomes.items()
                   if not v.startswith(("agree", "known")))

    def merge(self, other: Summary) -> None:
        """Add the counts of another run (of other cases)."""
        self.cases += other.cases
        for name in ("by_kind", "case_outcomes", "reads", "mutations"):
            getattr(self, name).update(getattr(other, name))
        for verdict_, number in other.examples.items():
            self.examples[verdict_] = min(self.examples.get(verdict_, number), number)
        self.mismatches += other.mismatches
        self.worst_growth = max(self.worst_growth, other.worst_growth)


def run_parallel(seed: int, cases: int, start: int, jobs: int, out=None,
                 seconds: float | None = None, runner=None, **kwargs) -> Summary:
    """:func:`run` in ``jobs`` processes, on pieces of whole groups (each run gives the same
    counts as one process would); no piece is started after ``seconds``. ``runner`` stands
    for :func:`run` (a module-level function taking its arguments and ``beat``).

    A piece whose process finishes no case for ``STALL`` seconds is killed and run again in a
    fresh one, once: tensorstore's sharded ``list`` can deadlock in its own mutex, where no
    timeout reaches (its ``result(timeout=)`` waits inside the lock). Each piece writes in a
    folder of its own, removed here however the piece ends."""
    step = 20 * GROUP
    edges = sorted({start, start + cases, *range(-(-start // step) * step, start + cases, step)})
    todo = [(a, b, 0) for a, b in zip(edges, edges[1:])]
    summary, t0 = Summary(), time.perf_counter()
    spawn = multiprocessing.get_context("spawn")  # tensorstore's threads and fork do not mix
    running: dict = {}  # receiving end -> (process, heartbeat, (a, b, tries), folder)
    try:
        while todo or running:
            while todo and len(running) < jobs and (
                    seconds is None or time.perf_counter() - t0 < seconds):
                a, b, tries = todo.pop(0)
                receive, send = spawn.Pipe(duplex=False)
                beat = spawn.Value("d", time.monotonic() + START, lock=False)
                folder = scratch(kwargs.get("workdir"))
                proc = spawn.Process(target=_piece, args=(
                    send, beat, runner or run, seed, b - a, a, {**kwargs, "workdir": folder}))
                proc.start()
                send.close()
                running[receive] = (proc, beat, (a, b, tries), folder)
            if not running:
                break
            for receive in multiprocessing.connection.wait(list(running), 5):
                proc, _, (a, b, _), folder = running.pop(receive)
                try:
                    piece = receive.recv()
                except EOFError:
                    raise RuntimeError(f"fuzz piece {a}..{b} of seed {seed}: its process died "
                                       f"(exit code {proc.exitcode})") from None
                finally:
                    _end(proc, folder)
                for line in piece.mismatches if out else ():
                    print(line, file=out, flush=True)
                summary.merge(piece)
            for receive, (proc, beat, (a, b, tries), folder) in list(running.items()):
                if time.monotonic() - beat.value > STALL:
                    _end(proc, folder, kill=True)
                    del running[receive]
                    if tries:
                        raise RuntimeError(f"fuzz piece {a}..{b} of seed {seed} stalled twice")
                    todo.insert(0, (a, b, tries + 1))
    finally:
        for proc, _, _, folder in running.values():
            _end(proc, folder, kill=True)
    summary.seconds = time.perf_counter() - t0
    return summary


def scratch(workdir: str | None) -> str:
    """A new folder for stores, in ``workdir`` (default /dev/shm where there is one)."""
    return tempfile.mkdtemp(prefix="ngshard-fuzz-", dir=workdir or (
        "/dev/shm" if os.path.isdir("/dev/shm") else None))


def _end(proc, folder: str, kill: bool = False) -> None:
    """Wait for a piece's process (killing it first if ``kill``), then remove its folder."""
    if kill:
        proc.kill()
    proc.join()
    shutil.rmtree(folder, ignore_errors=True)


def _piece(send, beat, runner, seed: int, cases: int, start: int, kwargs: dict) -> None:
    """One piece of :func:`run_parallel`, in its own process: each finished case beats."""
    def tick() -> None:
        beat.value = time.monotonic()

    tick()  # started: from here on, STALL seconds per case
    send.send(runner(seed, cases, start, beat=tick, **kwargs))


def run(seed: int, cases: int, start: int = 0, kinds: tuple[str, ...] = ("kv", "volume"),
        encodings: tuple[str, ...] = (), workdir: str | None = None, out=None,
        replay: bool = False, beat=None) -> Summary:
    """Run cases ``start .. start + cases - 1`` of ``seed``; mismatches are printed to ``out``."""
    base = scratch(workdir)
    summary, mem, store, group = Summary(), Memory(), None, None
    t0 = time.perf_counter()
    try:
        for number in range(start, start + cases):
            if number // GROUP != group:
                group = number // GROUP
                grng = np.random.default_rng([seed, 1, group])
                kind = kinds[0] if len(kinds) == 1 else ("kv" if grng.random() < 0.7
                                                         else "volume")
                root = Path(base) / str(group)
                store = make_kv(grng, root) if kind == "kv" else \
                    make_volume(grng, root, encodings)
                if group > 0:
                    shutil.rmtree(Path(base) / str(group - 1), ignore_errors=True)
            store.restore()
            rng = np.random.default_rng([seed, 2, number])
            case = Case(number)
            damage(rng, store, case)
            mem.growth = 0
            reads = (check_kv if store.kind == "kv" else check_volume)(store, case, rng, mem)
            record(summary, store, case, reads, mem, seed, out, replay)
            if beat:
                beat()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary.seconds = time.perf_counter() - t0
    return summary


RANK = {"equal": 0, "both missing": 0, "agree": 0, "both error": 1}


def case_outcome(verdicts: list[str]) -> str:
    """The worst verdict of a case's reads: agreement, then known differences, then failures."""
    def rank(v: str) -> int:
        return RANK.get(v, 2 if v.startswith("known") else 3)

    worst = max(verdicts, key=rank, default="equal")
    return {0: "agree, no error", 1: "agree, both error somewhere"}.get(rank(worst), worst)


def record(summary: Summary, store: Store, case: Case, reads: list[Read], mem: Memory,
           seed: int, out, replay: bool) -> None:
    summary.cases += 1
    summary.by_kind[store.kind if store.kind == "kv" else
                    f"volume {store.volume['encoding']}{' sharded' if store.spec else ''}"] += 1
    summary.mutations[case.mutation] += 1
    for read in reads:
        v = read.verdict = verdict(store, read, case)
        summary.reads[v] += 1
        if v.startswith(("mismatch", "foreign", "known")):
            summary.examples.setdefault(v, case.number)
        if replay or v.startswith(("mismatch", "foreign")):
            line = (f"{v}: seed={seed} case={case.number} file={case.name} "
                    f"mutation={case.mutation!r} read={read.what} ngshard={read.ng} "
                    f"tensorstore={read.ts}")
            summary.mismatches.append(line)
            if out:
                print(line, file=out, flush=True)
    outcome = case_outcome([r.verdict for r in reads])
    largest = max(len(store.read(n)) for n in store.files())
    bound = (64 * largest + 64 * MiB) // 1024
    if mem.growth > bound:
        outcome = "memory over bound"
        if out:
            print(f"memory: seed={seed} case={case.number} grew {mem.growth} KiB, bound {bound}",
                  file=out, flush=True)
    if mem.growth > summary.worst_growth[0]:
        summary.worst_growth = (mem.growth, case.number, largest)
    summary.case_outcomes[outcome] += 1


def report(s: Summary, seed: int, start: int) -> str:
    rate = s.cases / s.seconds if s.seconds else 0
    lines = [f"seed {seed}, cases {start}..{start + s.cases - 1}: {s.cases} cases in "
             f"{s.seconds:.0f} s ({rate:.0f}/s)",
             "stores: " + ", ".join(f"{k} {n}" for k, n in sorted(s.by_kind.items())),
             "case outcomes (worst read of each case):"]
    lines += [f"  {n:8d}  {v}" for v, n in s.case_outcomes.most_common()]
    lines.append("reads compared:")
    lines += [f"  {n:8d}  {v}" + (f"  (e.g. case {s.examples[v]})" if v in s.examples else "")
              for v, n in s.reads.most_common()]
    lines.append("mutations: " + ", ".join(f"{k} {n}" for k, n in s.mutations.most_common()))
    growth, case, largest = s.worst_growth
    lines.append(f"largest peak RSS growth during an ngshard read: {growth / 1024:.1f} MiB "
                 f"(case {case}, largest file {largest} bytes, bound "
                 f"{(64 * largest + 64 * MiB) / MiB:.1f} MiB)")
    lines.append(f"mismatches + foreign exceptions + memory: {s.failures} cases")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--start", type=int, default=0, help="number of the first case")
    p.add_argument("--replay", type=int, help="run this one case, printing every read")
    p.add_argument("--kinds", default="kv,volume", help="kv, volume or both")
    p.add_argument("--encodings", default="", help="volume encodings to use (default all)")
    p.add_argument("--dir", help="where to write the stores (default /dev/shm)")
    p.add_argument("--jobs", type=int, default=1, help="processes to run cases in")
    p.add_argument("--seconds", type=float, help="with --jobs: start no new piece after this")
    p.add_argument("--surfaces", help="fuzz these format surfaces instead (or 'all'): "
                   "see tools/fuzz_surfaces.py")
    args = p.parse_args(argv)
    if args.surfaces:
        import fuzz_surfaces

        names = ",".join(fuzz_surfaces.SURFACES) if args.surfaces == "all" else args.surfaces
        return fuzz_surfaces.main(["--surfaces", names, "--seed", str(args.seed), "--cases",
                                   str(args.cases), "--jobs", str(args.jobs)])
    start, cases = (args.replay, 1) if args.replay is not None else (args.start, args.cases)
    options = {"kinds": tuple(args.kinds.split(",")),
               "encodings": tuple(e for e in args.encodings.split(",") if e),
               "workdir": args.dir}
    if args.jobs > 1 and args.replay is None:
        s = run_parallel(args.seed, cases, start, args.jobs, sys.stdout, args.seconds,
                         **options)
    else:
        s = run(args.seed, cases, start, out=sys.stdout, replay=args.replay is not None,
                **options)
    print(report(s, args.seed, start))
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
