"""Crash safety of commits and consistency of reads during updates, with real processes.

1. A writer is SIGKILLed at random moments before, during and after a commit. The store left
   behind must read without error (ngshard and tensorstore alike) and hold, for every shard
   (rewrite) or every minishard (append), exactly its old or its new content.
2. A reader process reads continuously through one open store while a writer process appends,
   rewrites and compacts: every value read must be one the writer wrote for that key.
3. Without kills, what makes 1 hold at every instant, not only where the kills land: a commit
   never changes bytes of the old shard a crash could leave (a rewrite leaves the old file
   alone and renames a new one into place; an append writes past the old end and then the
   shard index only).

The killed writers are forked from a "zygote" process that imported ngshard once, so that each
starts in milliseconds instead of half a second.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard
from ngshard.sharded.format import decode_all

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=3,
                            minishard_index_encoding="gzip", data_encoding="raw")
KILLS = 40  # writers SIGKILLed per strategy, every one checked by ngshard and tensorstore
SAFETY_SECONDS = 150  # per strategy; about 10 s on 2 busy cores: only a hang comes near it
TMP = re.compile(r"\.[0-7]\.shard~\d+@[^~]+~[0-9a-f]{32}\.tmp")

# Forked per run: stage the change set, say so, commit. Answers "reap" with the exit status.
ZYGOTE = """
import os, pickle, sys, traceback
import ngshard
path, strategy, job = sys.argv[1:]
with open(job, "rb") as f:
    spec, sets, deletes = pickle.load(f)
spec = ngshard.ShardingSpec.from_json(spec)
while sys.stdin.readline():
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            kv = ngshard.open_kv(path, spec, "r+", strategy=strategy, compact_ratio=None)
            kv.update(sets)
            for key in deletes:
                del kv[key]
            print("staged", os.getpid(), flush=True)
            kv.commit()
            print("done", flush=True)
            code = 0
        except BaseException:
            traceback.print_exc()
            print("error", flush=True)
        os._exit(code)
    sys.stdin.readline()
    print("exit", os.waitpid(pid, 0)[1], flush=True)
"""


class Zygote:
    def __init__(self, path, strategy: str, job, err) -> None:
        self.err = err
        with open(err, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE, str(path), strategy, str(job)], text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)

    def _send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _line(self) -> list[str]:
        words = self.proc.stdout.readline().split()
        assert words and words[0] != "error", f"writer failed:\n{self.err.read_text()}"
        return words

    def run(self, delay: float | None) -> tuple[bool, float]:
        """One writer, SIGKILLed ``delay`` s after staging (None: not). Returns whether it
        finished its commit and the seconds from staged to done (or to the kill)."""
        self._send("go")
        word, pid = self._line()
        assert word == "staged"
        t0 = time.perf_counter()
        if delay is None:
            assert self._line() == ["done"]
        else:
            time.sleep(delay)
            os.kill(int(pid), signal.SIGKILL)  # a zombie at worst: reaped only after "reap"
        elapsed = time.perf_counter() - t0
        self._send("reap")
        while (words := self._line())[0] != "exit":
            pass
        status = int(words[1])
        assert os.WIFEXITED(status) or os.WTERMSIG(status) == signal.SIGKILL, status
        return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, elapsed

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def version_value(version: int, key: int) -> bytes:
    return (b"v%d:%d:" % (version, key)).ljust(100 + (key + 577 * version) % 1900, b".")


def change_set() -> tuple[dict, dict, dict, list]:
    """Old items, new items, and the sets and deletions that turn one into the other."""
    rng = np.random.default_rng(1)
    keys = np.unique(rng.integers(0, 2**64 - 1, 4600, np.uint64, endpoint=True)).tolist()
    old_keys, added = keys[:4000], keys[4000:]
    old = {k: version_value(0, k) for k in old_keys}
    sets = {k: version_value(1, k) for k in old_keys[::3] + added}
    deletes = [k for k in old_keys[1::7] if k not in sets]
    new = {**{k: v for k, v in old.items() if k not in deletes}, **sets}
    return old, new, sets, deletes


def units(items: dict[int, bytes], per_minishard: bool) -> dict[tuple, dict[int, bytes]]:
    """Items grouped by (shard, minishard), or by (shard,)."""
    shards, minishards = SPEC.locate(np.array(list(items), np.uint64))
    out: dict[tuple, dict[int, bytes]] = {}
    for (k, v), s, m in zip(items.items(), shards.tolist(), minishards.tolist()):
        out.setdefault((s, m) if per_minishard else (s,), {})[k] = v
    return out


def on_disk(path) -> tuple[dict[int, bytes], int]:
    """Every item decoded straight from the shard files, and the number of temp files."""
    items, tmps = {}, 0
    for name in sorted(os.listdir(path)):
        if name == "info":
            continue
        if SPEC.parse_shard_filename(name) is None:
            assert TMP.fullmatch(name), f"unexpected file {name}"
            tmps += 1
            continue
        data = (path / name).read_bytes()
        for index in decode_all(SPEC, data, name).values():
            items.update((k, data[s:s + n]) for k, s, n in
                         zip(index.keys.tolist(), index.starts.tolist(), index.sizes.tolist()))
    return items, tmps


def ts_read(path, keys: list[int]) -> dict[int, bytes]:
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{path}/",
                          "metadata": SPEC.to_json()}).result(timeout=PEER_TIMEOUT)
    futures = [(k, kv.read(k.to_bytes(8, "big"))) for k in keys]
    return {k: bytes(r.value) for k, f in futures
            if (r := f.result(timeout=PEER_TIMEOUT)).state == "value"}


def check_store(path, old: dict, new: dict, all_keys: list[int], per_minishard: bool
                ) -> tuple[str, int, int]:
    """Assert the store reads cleanly, to ngshard and tensorstore alike, and each unit is old
    or new. Returns the phase ('old', 'new', 'mixed'), the number of shards mixed within
    (append) and of temp files."""
    items, tmps = on_disk(path)
    got, old_u, new_u = (units(d, per_minishard) for d in (items, old, new))
    phases, shard_phases = set(), {}
    for unit in old_u.keys() | new_u.keys() | got.keys():
        a, o, n = (d.get(unit, {}) for d in (got, old_u, new_u))
        assert a in (o, n), f"{unit}: neither old nor new ({len(a)} keys, " \
            f"{len(a.items() - o.items())} not old, {len(a.items() - n.items())} not new)"
        if o != n:
            phases.add("old" if a == o else "new")
            shard_phases.setdefault(unit[0], set()).add("old" if a == o else "new")
    kv = ngshard.open_kv(path, SPEC)
    assert kv.shard_names() == sorted(n for n in os.listdir(path)
                                      if not TMP.fullmatch(n) and n != "info")
    assert kv.get_many(all_keys) == items
    assert len(kv) == len(items) and sorted(kv.keys_array().tolist()) == sorted(items)
    for k in all_keys[::97]:
        assert kv.get(k) == items.get(k)
    assert sum(s["keys"] for s in kv.stats()) == len(items)
    assert ts_read(path, all_keys) == items
    ngshard.open_kv(path, SPEC, "a")  # the next writer removes what the killed one left
    assert on_disk(path) == (items, 0)
    phase = phases.pop() if len(phases) == 1 else "mixed"
    return phase, sum(len(p) > 1 for p in shard_phases.values()), tmps


@pytest.mark.parametrize("strategy", ["rewrite", "append"])
def test_sigkill_during_commit_leaves_old_or_new(tmp_path, strategy):
    old, new, sets, deletes = change_set()
    all_keys = sorted(old.keys() | new.keys())
    pristine, store, job = tmp_path / "pristine", tmp_path / "store", tmp_path / "job.pickle"
    ngshard.write_kv(pristine, SPEC, old)
    assert len(os.listdir(pristine)) == SPEC.num_shards + 1  # and the info
    job.write_bytes(pickle.dumps((SPEC.to_json(), sets, deletes)))
    per_minishard = strategy == "append"

    def restore() -> None:
        shutil.rmtree(store, ignore_errors=True)
        shutil.copytree(pristine, store)

    zygote = Zygote(store, strategy, job, tmp_path / "writer.err")
    try:
        durations = []
        for _ in range(3):  # uninterrupted commits: their duration, and a check of the oracle
            restore()
            durations.append(zygote.run(None)[1])
            assert check_store(store, old, new, all_keys, per_minishard)[0] == "new"
        span = 2 * max(durations)  # commits vary under load: leave room past their end
        rng = np.random.default_rng(2)
        delays = (rng.permutation(KILLS) + rng.random(KILLS)) / KILLS * span  # stratified
        phases, finished, mixed_within, tmps = Counter(), 0, 0, 0
        started = time.monotonic()
        for delay in delays.tolist():
            if time.monotonic() - started > SAFETY_SECONDS:  # a hang, not a slow machine
                break
            restore()
            done = zygote.run(delay)[0]
            phase, within, left = check_store(store, old, new, all_keys, per_minishard)
            assert phase == "new" or not done, "a commit that finished left the old state"
            phases[phase] += 1
            finished += done
            mixed_within += within
            tmps += left
    finally:
        zygote.close()
    kills = sum(phases.values())
    print(f"\n{strategy}: commits of {[round(1000 * d) for d in durations]} ms, "
          f"{kills} of {KILLS} kills in {time.monotonic() - started:.0f} s: {dict(phases)}, "
          f"{finished} finished before the kill, {mixed_within} shards mixed within, "
          f"{tmps} temp files left")
    assert kills == KILLS, f"only {kills} of {KILLS} kills ran in {SAFETY_SECONDS} s"
    # the stratified delays fall before, during and after the commit
    assert phases["old"] >= 1 and phases["new"] >= 1 and finished >= 1, (phases, finished)
    if strategy == "append":  # appends write in place: never a temp file
        assert tmps == 0
    # mixed_within is only reported: an append may leave a shard part old, part new (each
    # minishard old or new, as check_store asserts); a rewrite never can.


@pytest.mark.parametrize("strategy", ["rewrite", "append"])
def test_commits_never_write_over_bytes_a_crash_could_leave(tmp_path, strategy):
    old, new, sets, deletes = change_set()
    ngshard.write_kv(tmp_path, SPEC, old)
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".shard"))
    before = {n: (tmp_path / n).read_bytes() for n in names}
    with contextlib.ExitStack() as stack:  # open as readers hold them
        held = {n: stack.enter_context(open(tmp_path / n, "rb")) for n in names}
        kv = ngshard.open_kv(tmp_path, SPEC, "r+", strategy=strategy, compact_ratio=None)
        kv.update(sets)
        for key in deletes:
            del kv[key]
        assert {p.action for p in kv.commit().shards} == {strategy}
        for n in names:
            after = (tmp_path / n).read_bytes()
            assert after != before[n]
            if strategy == "rewrite":  # a new file; the old one's bytes as they were
                assert os.fstat(held[n].fileno()).st_ino != os.stat(tmp_path / n).st_ino
                assert held[n].read() == before[n], n
            else:  # the same file, changed only in its shard index and past its old end
                index = SPEC.shard_index_size
                assert after[index:len(before[n])] == before[n][index:], n
    assert ngshard.open_kv(tmp_path, SPEC).get_many(list(old.keys() | new.keys())) == new


# --- concurrent reader and writer ---------------------------------------------------------

COMMON = """
import json, os, sys, time, traceback
import numpy as np
import ngshard
path, spec = sys.argv[1], ngshard.ShardingSpec.from_json(sys.argv[2])
stop = os.path.join(os.path.dirname(path), "stop")
started = os.path.join(os.path.dirname(path), "round")  # the writer's round in progress
keys = np.unique(np.random.default_rng(7).integers(
    0, 2**64 - 1, 3000, np.uint64, endpoint=True)).tolist()

def value(key, version):
    return (b"%d:%d:" % (key, version)).ljust(20 + (key + 7 * version) % 300, b"#")

def volatile(key):  # deleted in rounds 1, 5, 9, ..., set again in rounds 3, 7, 11, ...
    return key % 10 == 0

def written(key, version):  # whether round `version` sets a key that is not volatile
    return ((key * 2654435761 + version * 40503) >> 4) % 3 == 0

def valid(key, v, newest):
    try:
        k, version = map(int, v.split(b":", 2)[:2])
    except ValueError:
        return False
    return k == key and v == value(key, version) and version <= newest and (
        version == 0 or (version % 4 == 3 if volatile(key) else written(key, version)))
"""

WRITER = """
ngshard.write_kv(path, spec, {k: value(k, 0) for k in keys})
with open(started, "w") as f:
    f.write("0")
print("ready", flush=True)
sys.stdin.readline()
rounds = {"append": 0, "rewrite": 0, "compact": 0}
r = 0
while not os.path.exists(stop):
    r += 1
    with open(started + ".tmp", "w") as f:
        f.write(str(r))
    os.replace(started + ".tmp", started)
    strategy = "rewrite" if r % 3 == 0 else "append"
    kv = ngshard.open_kv(path, spec, "r+", strategy=strategy, compact_ratio=None)
    kv.update({k: value(k, r) for k in keys if not volatile(k) and written(k, r)})
    for k in filter(volatile, keys):
        if r % 4 == 1:
            del kv[k]
        elif r % 4 == 3:
            kv[k] = value(k, r)
    kv.commit()
    rounds[strategy] += 1
    if r % 5 == 0:
        kv.compact()
        rounds["compact"] += 1
print(json.dumps(rounds))
"""

READER = """
kv = ngshard.open_kv(path, spec)
stable = [k for k in keys if not volatile(k)]
rng = np.random.default_rng(os.getpid())
counts = {"get_many": 0, "single": 0, "wrong": 0, "missing": 0, "regressions": 0}
errors, last = [], {}

def check(key, v, newest):
    if v is None:
        counts["missing"] += not volatile(key)
        return
    if not valid(key, v, newest):
        counts["wrong"] += 1
        errors.append(f"key {key}: {v[:40]!r} (round {newest})")
        return
    version = int(v.split(b":")[1])
    counts["regressions"] += version < last.get(key, 0)
    last[key] = version

kv.get_many(keys)
print("ready", flush=True)
while not os.path.exists(stop) and len(errors) < 20:
    try:
        got = kv.get_many(keys)
        newest = int(open(started).read())
        counts["get_many"] += 1
        for k in keys:
            check(k, got.get(k), newest)
        singles = {}
        for k in rng.choice(np.array(keys, np.uint64), 100).tolist():
            singles[k] = kv.get(k)
            counts["single"] += 1
        newest = int(open(started).read())
        for k, v in singles.items():
            check(k, v, newest)
        with open(stop + ".reads.tmp", "w") as f:  # progress, for the test to wait on
            f.write(str(counts["get_many"]))
        os.replace(stop + ".reads.tmp", stop + ".reads")
    except Exception:
        errors.append(traceback.format_exc())
print(json.dumps({**counts, "errors": errors[:10]}))
"""


def test_reader_sees_only_written_values_during_updates(tmp_path):
    args = [str(tmp_path / "store"), json.dumps(SPEC.to_json())]
    procs = []
    try:
        writer = subprocess.Popen([sys.executable, "-c", COMMON + WRITER, *args], text=True,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        procs.append(writer)
        assert writer.stdout.readline() == "ready\n"
        reader = subprocess.Popen([sys.executable, "-c", COMMON + READER, *args], text=True,
                                  stdout=subprocess.PIPE)
        procs.append(reader)
        assert reader.stdout.readline() == "ready\n"
        writer.stdin.write("go\n")
        writer.stdin.flush()
        # at least 6 s, then until both have done enough to judge (slower on a loaded machine)
        deadline, progress = time.monotonic() + 120, tmp_path / "stop.reads"
        time.sleep(6)
        while time.monotonic() < deadline and not (
                progress.exists() and int(progress.read_text()) >= 20
                and int((tmp_path / "round").read_text()) > 5):
            time.sleep(0.2)
        (tmp_path / "stop").touch()
        rounds = json.loads(writer.communicate(timeout=60)[0])
        reads = json.loads(reader.communicate(timeout=60)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=PEER_TIMEOUT)
    print(f"\nwriter rounds {rounds}; reader {reads}")
    assert writer.returncode == 0 and reader.returncode == 0
    assert not reads["errors"] and reads["wrong"] == 0 and reads["missing"] == 0, reads
    assert reads["regressions"] == 0, reads  # no value older than one read before it
    assert rounds["append"] >= 3 and rounds["rewrite"] >= 1 and rounds["compact"] >= 1, rounds
    assert reads["get_many"] >= 20 and reads["get_many"] + reads["single"] >= 500, reads


def test_batch_read_survives_one_commit_per_shard(tmp_path):
    items = {k: b"%d:0" % k for k in range(2000)}
    ngshard.write_kv(tmp_path, SPEC, items)
    reader = ngshard.open_kv(tmp_path, SPEC)
    assert reader.get_many(list(items)) == items  # caches warm: a read is one batched read
    key_of = dict(zip(SPEC.locate(np.array(list(items), np.uint64))[0].tolist(), items))
    read_ranges, changed = reader.storage.read_ranges, []

    def read_after_a_commit(requests):
        if len(requests) > 1 and len(changed) < 3:  # each batched chunk read: a new shard
            key = key_of[len(changed)]
            with ngshard.open_kv(tmp_path, SPEC, "r+", strategy="append") as writer:
                writer[key] = items[key] = b"%d:1" % key
            changed.append(key)
        return read_ranges(requests)

    reader.storage.read_ranges = read_after_a_commit
    assert reader.get_many(list(items)) == items
