"""Run the benchmarks of BENCHMARKS.md one after another, as one run on a quiet machine.

Before each script it waits (up to ``--wait`` seconds) for the 1-minute load average to fall
below ``--quiet`` (1.5), prints the load before and after, and runs the script again once if
the load after is above it: a figure taken beside other work is marked as such, not passed
off as quiet. Everything goes to stdout and to ``--log`` with a header naming the commit, the
machine and the peers' versions, so the tables of BENCHMARKS.md can be made from one file.

    .venv-bench/bin/python tools/bench_all.py --log bench-run.log
    .venv-bench/bin/python tools/bench_all.py --only kv,zarr
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (name, environment, arguments): the main run first, then the rows with tools of their own.
RUNS: list[tuple[str, dict[str, str], list[str]]] = [
    ("kv", {}, ["tools/bench_kv.py"]),
    ("http", {}, ["tools/bench_http.py"]),
    ("update", {}, ["tools/bench_update.py"]),
    ("volume", {}, ["tools/bench_volume.py"]),
    ("update-fsync", {"BENCH_FSYNC": "1"}, ["tools/bench_update.py", "--skip-bulk"]),
    ("kv-fsync", {"BENCH_FSYNC": "1"}, ["tools/bench_kv.py"]),
    ("volume-fsync", {"BENCH_FSYNC": "1"}, ["tools/bench_volume.py"]),
    ("cseg", {}, ["tools/bench_cseg.py"]),
    # 9 turns: a zarr row takes 25-70 ms, and 3 turns' medians moved by a fifth between runs
    ("zarr", {}, ["tools/bench_zarr.py", "--repeat", "9"]),
    ("staged", {}, ["tools/bench_staged.py"]),
    ("layers", {}, ["tools/bench_layers.py"]),
    ("serve-32", {}, ["tools/bench_serve.py", "--connections", "32", "--rounds", "3"]),
    ("serve-256", {}, ["tools/bench_serve.py", "--connections", "256", "--rounds", "3"]),
    # latency below saturation: 256 viewers pacing themselves to 20,000 requests/s in all
    ("serve-256-paced", {}, ["tools/bench_serve.py", "--connections", "256", "--rounds", "3",
                             "--rate", "20000"]),
    ("cloud", {}, ["tools/bench_cloud.py"]),
]


def load() -> float:
    return os.getloadavg()[0]


def header() -> str:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, timeout=60).stdout.strip()
    versions = []
    for name in ("numpy", "tensorstore", "zarr", "cloud-volume", "obstore", "fsspec"):
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} absent")
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) \
        if Path("/proc/cpuinfo").exists() else platform.processor()
    return (f"# bench_all: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"ngshard {commit}\n# nproc {os.cpu_count()}, {cpu}, Python "
            f"{platform.python_version()}\n# {', '.join(versions)}\n")


def wait_quiet(quiet: float, most: float) -> float:
    end = time.monotonic() + most
    while load() >= quiet and time.monotonic() < end:
        time.sleep(5)
    return load()


def run(name: str, env: dict[str, str], argv: list[str], args: argparse.Namespace,
        out) -> None:
    for attempt in (1, 2):
        before = wait_quiet(args.quiet, args.wait)
        start = time.monotonic()
        line = f"\n## {name} (turn {attempt}): {' '.join(argv)}  load before {before:.2f}\n"
        print(line, end="", flush=True)
        out.write(line)
        proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env={**os.environ, **env},
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for text in proc.stdout:
            print(text, end="", flush=True)
            out.write(text)
        code = proc.wait(timeout=60)  # its output has ended: it is exiting
        after = load()
        line = (f"## {name}: exit {code}, {time.monotonic() - start:.0f} s, load after "
                f"{after:.2f}{'' if after < args.quiet else ' (NOT QUIET)'}\n")
        print(line, end="", flush=True)
        out.write(line)
        out.flush()
        if after < args.quiet or code:
            return


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated names of: " + ", ".join(n for n, *_ in RUNS))
    ap.add_argument("--log", default="bench-run.log")
    ap.add_argument("--quiet", type=float, default=1.5, help="the load a quiet machine has")
    ap.add_argument("--wait", type=float, default=300, help="longest wait for quiet, seconds")
    args = ap.parse_args()
    chosen = set(args.only.split(",")) if args.only else {n for n, *_ in RUNS}
    unknown = chosen - {n for n, *_ in RUNS}
    if unknown:
        ap.error(f"no benchmark named {', '.join(sorted(unknown))}")
    with open(args.log, "w") as out:
        out.write(header())
        print(header(), end="")
        for name, env, argv in RUNS:
            if name in chosen:
                run(name, env, argv, args, out)


if __name__ == "__main__":
    main()
