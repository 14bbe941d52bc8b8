"""Racing creators, power loss, dead appends, reused inodes, a full disk: nothing lost, nothing
read at stale offsets, and what is left over counted honestly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard
import ngshard.storage.local
from ngshard.cli import main

SPEC = ngshard.ShardingSpec(minishard_bits=1, shard_bits=0)


def test_two_creators_of_one_shard_never_both_succeed(tmp_path, monkeypatch):
    """Both writers find the shard absent and reach the moment of publishing together (held
    there by a pause); one must get ConflictError, never both succeed with one key lost."""
    real_link, real_replace = os.link, os.replace
    gate = threading.Barrier(2)

    def paused(real):
        def call(src, dst, *args, **kwargs):
            if str(dst).endswith(".shard"):
                gate.wait(timeout=5)  # both writers past their checks, before either publishes
            return real(src, dst, *args, **kwargs)
        return call

    monkeypatch.setattr(ngshard.storage.local.os, "link", paused(real_link))
    monkeypatch.setattr(ngshard.storage.local.os, "replace", paused(real_replace))
    outcome: dict[int, str] = {}

    def writer(key: int) -> None:
        with ngshard.open_kv(tmp_path, SPEC, "a", info=False) as kv:
            kv[key] = b"value %d" % key
            try:
                kv.commit()
                outcome[key] = "committed"
            except ngshard.ConflictError:
                outcome[key] = "conflict"
                kv.abort()

    threads = [threading.Thread(target=writer, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.undo()
    assert sorted(outcome.values()) == ["committed", "conflict"]
    stored = dict(ngshard.open_kv(tmp_path, SPEC).items())
    winner = next(k for k, v in outcome.items() if v == "committed")
    assert stored == {winner: b"value %d" % winner}


def fsync_log(monkeypatch) -> list[tuple[str, str]]:
    """Record fsyncs (of which path) and renames/links as they happen; the calls still run."""
    log: list[tuple[str, str]] = []
    local = ngshard.storage.local.os

    def wrap(name, describe):
        real = getattr(os, name)

        def call(*args, **kwargs):
            log.append((name, describe(*args)))
            return real(*args, **kwargs)
        monkeypatch.setattr(local, name, call)

    wrap("fsync", lambda fd: os.readlink(f"/proc/self/fd/{fd}"))
    wrap("link", lambda src, dst: f"{src} -> {dst}")
    wrap("replace", lambda src, dst: f"{src} -> {dst}")
    wrap("pwritev", lambda fd, bufs, offset: f"{os.readlink(f'/proc/self/fd/{fd}')}@{offset}")
    return log


def test_writes_are_fsynced_before_they_are_published(tmp_path, monkeypatch):
    log = fsync_log(monkeypatch)
    ngshard.write_kv(tmp_path, SPEC, {1: b"one", 2: b"two"}, info=False)
    shard = str(tmp_path / "0.shard")
    events = [(kind, what) for kind, what in log if kind != "pwritev"]
    # the data of the new file, then its publication, then the directory
    assert [k for k, _ in events] == ["fsync", "replace", "fsync"]
    assert events[1][1].endswith(f"-> {shard}") and events[0][1] in events[1][1]
    assert events[2][1] == str(tmp_path)
    log.clear()
    with ngshard.open_kv(tmp_path, SPEC, mode="r+", strategy="append") as kv:
        kv[3] = b"three"
    writes = [i for i, (k, _) in enumerate(log) if k == "pwritev"]
    syncs = [i for i, (k, _) in enumerate(log) if k == "fsync"]
    patch = next(i for i in writes if log[i][1] == f"{shard}@0")
    # the appended tail is durable before the patch that points at it, the patch after
    assert any(w < s < patch for w in writes if w != patch for s in syncs)
    assert any(s > patch for s in syncs)


def test_durable_false_skips_every_fsync(tmp_path, monkeypatch):
    log = fsync_log(monkeypatch)
    ngshard.write_kv(tmp_path, SPEC, {1: b"one"}, durable=False)
    with ngshard.open_kv(tmp_path, mode="r+", durable=False) as kv:
        kv[3] = b"three"
    assert not [k for k, _ in log if k == "fsync"]
    assert dict(ngshard.open_kv(tmp_path).items()) == {1: b"one", 3: b"three"}


@pytest.mark.parametrize("committed_trailer", [True, False])
def test_a_dead_appends_tail_is_counted_and_cut_off(tmp_path, committed_trailer):
    """An append killed after writing its tail, before patching the index: the tail is
    garbage, reported as such, and the next commit cuts it off (or compacts)."""
    items = {k: bytes([k]) * 100 for k in range(40)}
    ngshard.write_kv(tmp_path, SPEC, items)
    if committed_trailer:  # an earlier append committed: its trailer marks the end
        with ngshard.open_kv(tmp_path, mode="r+", strategy="append") as kv:
            kv[0] = b"new zero"
        items[0] = b"new zero"
    shard = tmp_path / "0.shard"
    committed = shard.stat().st_size
    dead = b"\xee" * 3000 + b"ngsh-gc1" + (123).to_bytes(8, "little")  # even a whole trailer
    with open(shard, "ab") as f:
        f.write(dead)
    kv = ngshard.open_kv(tmp_path)
    assert dict(kv.items()) == items
    (stat,) = kv.stats()
    assert round(stat["garbage"] * stat["bytes"]) >= len(dead)
    plan = ngshard.open_kv(tmp_path, mode="r+", compact_ratio=None).plan  # nothing staged
    assert plan().shards == ()
    with ngshard.open_kv(tmp_path, mode="r+", strategy="append", compact_ratio=None) as kv:
        kv[1] = b"x"
    items[1] = b"x"
    size = shard.stat().st_size
    assert size < committed + 24 * 40 + 100  # the dead tail is gone: a new index and value
    assert dict(ngshard.open_kv(tmp_path).items()) == items
    (stat,) = ngshard.open_kv(tmp_path).stats()
    # what the trailer records agrees with the exact count
    reader = ngshard.open_kv(tmp_path).reader
    assert reader.shards(["0.shard"])["0.shard"].garbage == round(stat["garbage"] * size)


@pytest.mark.parametrize("strategy", ["append", "rewrite"])
def test_a_large_dead_tail_is_gone_after_the_next_commit(tmp_path, strategy):
    ngshard.write_kv(tmp_path, SPEC, {k: b"v" * 100 for k in range(20)})
    with open(tmp_path / "0.shard", "ab") as f:
        f.write(b"\0" * 50_000)
    assert ngshard.open_kv(tmp_path).stats()[0]["garbage"] > 0.9
    with ngshard.open_kv(tmp_path, mode="r+", strategy=strategy) as kv:
        kv[1] = b"x"
        (plan,) = kv.plan().shards
        assert plan.garbage_after < 0.5  # what is left after the commit, the tail not in it
    assert (tmp_path / "0.shard").stat().st_size < 3500
    assert ngshard.open_kv(tmp_path)[1] == b"x"


def test_a_shard_rewritten_in_place_with_its_old_times_is_not_read_stale(tmp_path):
    """Same inode, same size, same mtime (what a coarse clock gives): still a new shard."""
    ngshard.write_kv(tmp_path, SPEC, {1: b"a" * 10, 2: b"b" * 30}, info=False)
    shard = tmp_path / "0.shard"
    old = shard.stat()
    reader = ngshard.open_kv(tmp_path, SPEC)
    assert reader[1] == b"a" * 10
    ngshard.write_kv(tmp_path / "new", SPEC, {1: b"c" * 30, 2: b"d" * 10}, info=False)
    new = (tmp_path / "new" / "0.shard").read_bytes()
    assert len(new) == old.st_size
    with open(shard, "r+b") as f:  # in place: the inode stays
        f.write(new)
    os.utime(shard, ns=(old.st_atime_ns, old.st_mtime_ns))
    now = shard.stat()
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (old.st_ino, old.st_size,
                                                          old.st_mtime_ns)
    assert [reader[1] for _ in range(50)] == [b"c" * 30] * 50
    assert reader.get_many([1, 2]) == {1: b"c" * 30, 2: b"d" * 10}


def test_a_directory_named_as_a_shard_is_corrupt(tmp_path, capsys):
    ngshard.write_kv(tmp_path, SPEC, {})
    (tmp_path / "0.shard").mkdir()
    kv = ngshard.open_kv(tmp_path)
    for read in (lambda: kv[1], lambda: kv.get_many([1]), kv.keys_array, lambda: 1 in kv):
        with pytest.raises(ngshard.CorruptDataError, match="0.shard: a directory"):
            read()
    assert main(["verify", str(tmp_path), "-q"]) == 1
    assert "0.shard: a directory" in capsys.readouterr().out


def test_a_full_disk_names_the_shard_and_commits_nothing(tmp_path):
    """A file size limit (RLIMIT_FSIZE, as a full disk or quota would) in a child process."""
    code = textwrap.dedent(f"""
        import resource, signal, sys
        import ngshard
        from ngshard.cli import main
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        spec = ngshard.ShardingSpec(minishard_bits=1, shard_bits=0)
        try:
            ngshard.write_kv({str(tmp_path / "kv")!r}, spec, {{1: bytes(200_000)}})
        except ngshard.StorageWriteError as e:
            print("raised:", e)
        sys.exit(main(["put", {str(tmp_path / "kv2")!r}, "1", {str(tmp_path / "big")!r},
                       "--spec", {json.dumps(json.dumps(SPEC.to_json()))}]))
    """)
    (tmp_path / "big").write_bytes(bytes(99_990))  # fits the limit; its shard does not
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=PEER_TIMEOUT)
    assert result.stdout.startswith("raised: ") and "kv/0.shard" in result.stdout
    assert "File too large" in result.stdout and "nothing was committed" in result.stdout
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "0.shard: File too large; nothing was " \
        "committed" in result.stderr
    for store in ("kv", "kv2"):  # no shard, no temporary file left
        assert not [n for n in os.listdir(tmp_path / store) if "shard" in n] \
            if (tmp_path / store).exists() else True


def test_readers_beside_a_busy_writer_do_not_fail(tmp_path):
    ngshard.write_kv(tmp_path, SPEC, {k: b"v%d" % k for k in range(100)})
    deadline = time.monotonic() + 60
    commits = reads = 0

    def stop() -> bool:  # at least 2 s, then until both have done enough (a loaded machine)
        return time.monotonic() > deadline or (time.monotonic() > deadline - 58
                                                and commits > 20 and reads > 20)

    def writer() -> None:
        nonlocal commits
        with ngshard.open_kv(tmp_path, mode="r+", strategy="rewrite") as kv:
            while not stop():
                kv[5] = b"v5"
                kv.commit()
                commits += 1

    thread = threading.Thread(target=writer)
    thread.start()
    reader = ngshard.open_kv(tmp_path)
    while not stop():
        assert reader[7] == b"v7"
        assert reader.get_many(np.arange(0, 100, 7)) == {k: b"v%d" % k for k in
                                                         range(0, 100, 7)}
        reads += 1
    thread.join()
    assert commits > 20 and reads > 20
