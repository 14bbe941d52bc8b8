"""A small mutation run: bugs the test suite must catch, each made on a copy of the source.

Each mutation is an exact text replacement in one module (each ``old`` must occur exactly
once, or the mutation is reported as stale rather than run) and names the tests that guard
it. For every mutation the script copies ``src/`` into a fresh temporary directory, patches
the copy, runs ``pytest -x -q`` on the guarding tests with ``PYTHONPATH=<copy>/src`` (the tests
themselves come from this tree, unmodified) and reports the mutation killed (some test
failed) or survived (all passed: a gap in the suite). The real tree is never written.

Usage::

    python tools/mutate.py            # baseline, then every mutation
    python tools/mutate.py --list     # the mutations and their tests
    python tools/mutate.py stale-absent etag-ignored --no-baseline

Exits 1 if any mutation survived, its edit no longer applies, or the baseline fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    module: str  # path under src/ngshard
    edits: tuple[tuple[str, str], ...]  # (old, new): old must occur exactly once
    tests: tuple[str, ...]  # pytest arguments: files or node ids under tests/
    what: str


MUTATIONS = [
    Mutation(
        "stale-absent", "sharded/reader.py",
        (("            if not fresh and self.shards([name])[name] is not shard:\n"
          "                raise self.cache.stale(name, self.storage.path(name))\n", ""),),
        ("tests/sharded/test_freshness.py",),
        "a single-key read trusts a cached index when it says a key is absent"),
    Mutation(
        "misplaced-minishard", "sharded/reader.py",
        (("hit[hit] = owner[pos[hit]] == minishards[g][hit]", "hit[hit] = True"),),
        ("tests/sharded/test_misplaced_keys.py",),
        "batched reads accept a key found in a minishard it does not hash to"),
    Mutation(
        "etag-ignored", "storage/remote.py",
        (('(info["size"], token))', '(info["size"],))'),),
        ("tests/sharded/test_freshness.py",),
        "a remote object's generation is its size alone, without ETag or mtime"),
    Mutation(
        "spill-merge-order", "sharded/spill.py",
        (("    return gather(buf, base[owner] + offsets - spans[owner, 0], sizes)\n",
          "    return buf[:int(sizes.sum())]\n"),),
        ("tests/sharded/test_update.py",),
        "a spilled shard's runs are copied as they lie, not merged into index order"),
    Mutation(
        "non-atomic-replace", "storage/local.py",
        (("                os.replace(tmp, path)\n",
          "                shutil.copyfile(tmp, path)  # in place: a kill leaves it half done\n"
          "                os.unlink(tmp)\n"),
         ("import contextlib\n", "import contextlib\nimport shutil\n")),
        ("tests/sharded/test_crash.py::test_commits_never_write_over_bytes_a_crash_could_leave",
         "tests/sharded/test_crash.py::test_sigkill_during_commit_leaves_old_or_new",
         "tests/sharded/test_crash.py::test_reader_sees_only_written_values_during_updates"),
        "a rewritten shard is copied over the old file instead of renamed into place"),
    Mutation(
        "swapped-locate-bits", "sharded/spec.py",
        (("        minishard = h & np.uint64(self.num_minishards - 1)\n"
          "        shard = (h >> np.uint64(self.minishard_bits)) & "
          "np.uint64(self.num_shards - 1)\n",
          "        shard = h & np.uint64(self.num_shards - 1)\n"
          "        minishard = (h >> np.uint64(self.shard_bits)) & "
          "np.uint64(self.num_minishards - 1)\n"),),
        ("tests/sharded/test_hashing.py", "tests/sharded/test_interop_tensorstore.py"),
        "ShardingSpec.locate takes the shard from the low bits, the minishard above them"),
    Mutation(
        "no-offset-deltas", "sharded/format.py",
        (("    starts = rows[1] + sizes\n    cumsum(starts, out=starts)\n    starts -= sizes\n",
          "    starts = rows[1].astype(np.uint64)\n"),),
        ("tests/sharded/test_format.py",),
        "minishard index offsets are read as absolute, not delta decoded"),
    Mutation(
        "morton-off-by-one", "volume/grid.py",
        (("return tuple((n - 1).bit_length() for n in self.shape)",
          "return tuple(n.bit_length() for n in self.shape)"),),
        ("tests/volume/test_grid.py",),
        "Morton bits per dimension are ceil(log2(n + 1)) instead of ceil(log2(n))"),
    Mutation(
        "no-gzip-decoding", "compression.py",
        (('return gzip_decompress(data, where, limit, False) if encoding == "gzip" '
          'else bytes(data)',
          "return bytes(data)"),),
        ("tests/sharded/test_format.py", "tests/sharded/test_kv.py"),
        "gzip data encoding is returned undecoded"),
    Mutation(
        "no-edge-clipping", "volume/grid.py",
        (("stops = np.minimum(starts + np.array(self.chunk_size), np.array(self.size))",
          "stops = starts + np.array(self.chunk_size)"),),
        ("tests/volume/test_grid.py",),
        "edge chunks are not clipped to the volume bounds"),
    Mutation(
        "preshift-ignored", "sharded/spec.py",
        (("shifted = keys >> np.uint64(self.preshift_bits)", "shifted = keys"),),
        ("tests/sharded/test_hashing.py",),
        "preshift_bits is ignored when hashing arrays of keys"),
    Mutation(
        "zarr-index-at-the-other-end", "zarr/shard_index.py",
        (('return (0, nbytes) if location == "start" else',
          'return (0, nbytes) if location == "end" else'),),
        ("tests/zarr/test_zarr_interop.py",),
        "a zarr shard's index is looked for at the wrong end"),
    Mutation(
        "zarr-crc32c-unchecked", "zarr/codecs.py",
        (("        if stored != actual:\n", "        if False:\n"),),
        ("tests/zarr/test_zarr_codecs.py",),
        "a crc32c checksum that does not match is accepted"),
    Mutation(
        "zarr-index-outside-accepted", "zarr/shard_index.py",
        (("    if len(outside):\n", "    if False:\n"),),
        ("tests/zarr/test_zarr_codecs.py",),
        "a shard index entry pointing outside its shard is accepted"),
    Mutation(
        "fastpath-edges-uncut", "convert/fastpath.py",
        (("        if not interior[i]:\n", "        if False:\n"),),
        ("tests/pipelines/test_to_precomputed.py",),
        "the fast path stores zarr's padded edge chunks whole in precomputed"),
]


def copy_source(dest: Path) -> Path:
    """A copy of src/ under ``dest``, without bytecode caches."""
    src = dest / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc",
                                                                        "*.egg-info"))
    return src


def apply(src: Path, mutation: Mutation) -> str | None:
    """Patch the copy; None if done, else why the edit does not apply."""
    path = src / "ngshard" / mutation.module
    text = path.read_text()
    for old, new in mutation.edits:
        count = text.count(old)
        if count != 1:
            return f"{mutation.module}: text to replace found {count} times: {old.strip()!r}"
        text = text.replace(old, new)
    path.write_text(text)
    return None


def run_tests(src: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float, str]:
    """('passed' | 'failed' | 'timeout', seconds, summary) of pytest -x on ``tests``."""
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    # make sure the copy, not an installed ngshard, is what the tests import
    where = subprocess.run([sys.executable, "-c", "import ngshard; print(ngshard.__file__)"],
                           env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=60).stdout.strip()
    if not where.startswith(str(src)):
        raise SystemExit(f"the tests would import ngshard from {where!r}, not from {src}")
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                               "no:cacheprovider", *tests], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - t0, f"no result in {timeout:.0f} s"
    elapsed = time.monotonic() - t0
    lines = proc.stdout.strip().splitlines()
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    summary = (failed[0] if failed else lines[-1] if lines else proc.stderr.strip()[-200:])
    return ("passed" if proc.returncode == 0 else "failed"), elapsed, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutations to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the run of the chosen tests on the unmutated copy")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds per test run; a mutant that runs longer is killed")
    args = parser.parse_args(argv)
    by_name = {m.name: m for m in MUTATIONS}
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"unknown mutations {unknown}; known: {', '.join(by_name)}")
    chosen = [by_name[n] for n in args.names] or MUTATIONS
    if args.list:
        for m in chosen:
            print(f"{m.name:22} {m.module:20} {m.what}\n{'':22} tests: {' '.join(m.tests)}")
        return 0
    failures = 0
    if not args.no_baseline:
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        with tempfile.TemporaryDirectory(prefix="ngshard-mutate-") as tmp:
            status, elapsed, summary = run_tests(copy_source(Path(tmp)), tests, args.timeout)
        print(f"{'baseline':22} {status:9} {elapsed:6.1f} s  {summary}", flush=True)
        if status != "passed":
            print("the tests fail without any mutation: verdicts would mean nothing")
            return 1
    verdicts = {}
    for m in chosen:
        with tempfile.TemporaryDirectory(prefix=f"ngshard-mutate-{m.name}-") as tmp:
            src = copy_source(Path(tmp))
            problem = apply(src, m)
            if problem is not None:
                verdict, elapsed, summary = "stale", 0.0, problem
            else:
                status, elapsed, summary = run_tests(src, m.tests, args.timeout)
                verdict = "survived" if status == "passed" else "killed"
        verdicts[m.name] = verdict
        failures += verdict != "killed"
        print(f"{m.name:22} {verdict:9} {elapsed:6.1f} s  {summary}", flush=True)
    killed = sum(v == "killed" for v in verdicts.values())
    survived = [n for n, v in verdicts.items() if v == "survived"]
    stale = [n for n, v in verdicts.items() if v == "stale"]
    print(f"\n{killed} of {len(verdicts)} mutations killed"
          + (f"; survived: {', '.join(survived)}" if survived else "")
          + (f"; edits that no longer apply: {', '.join(stale)}" if stale else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
