"""What only local files do: range coalescing arithmetic, large reads in pieces, atomic
replacement without temporary files left over, file slices taken over instead of copied, and
removal of what dead writers left."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from peers import PEER_TIMEOUT

from ngshard import storage
from ngshard.storage import FileSlice
from ngshard.storage.local import pread_spans


def test_coalesce_merges_near_ranges_only():
    ranges = np.array([[100, 200], [0, 10], [205, 300], [10_000, 10_010], [150, 160]])
    merged, where = storage.coalesce(ranges, max_gap=10)
    assert merged.tolist() == [[0, 10], [100, 300], [10_000, 10_010]]
    assert where.tolist() == [1, 0, 1, 2, 1]
    merged, where = storage.coalesce(ranges, max_gap=100)
    assert merged.tolist() == [[0, 300], [10_000, 10_010]]
    merged, where = storage.coalesce(np.zeros((0, 2)))
    assert merged.shape == (0, 2) and where.shape == (0,)


def test_large_local_reads_in_pieces_match_the_file(tmp_path):
    """Reads past 8 MiB go in pieces on threads into one buffer: every byte where it belongs,
    near ranges merged, a range past the end comes back short."""
    blob = np.random.default_rng(1).integers(0, 256, 21 << 20, np.uint8).tobytes()
    (tmp_path / "big").write_bytes(blob)
    store = storage.open_storage(tmp_path)
    ranges = np.array([[5, 9 << 20], [(9 << 20) + 100, 13 << 20], [(20 << 20) + 3, 22 << 20],
                       [17, 4 << 20]])
    gen, chunks = store.read_ranges([("big", ranges)])[0]
    assert gen == store.stat("big").generation
    assert [bytes(c) for c in chunks] == [blob[a:b] for a, b in ranges.tolist()]
    assert len(chunks[2]) == len(blob) - ((20 << 20) + 3)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 3000), spans=st.lists(st.tuples(st.integers(0, 3500),
                                                           st.integers(0, 600)), max_size=40))
def test_small_local_reads_match_the_file(tmp_path_factory, size, spans):
    """Many small ranges (overlapping, empty, past the end) read in one batch: each one's
    bytes as slicing the file gives them, short where the file ends."""
    path = tmp_path_factory.mktemp("reads") / "f"
    blob = np.random.default_rng(size).integers(0, 256, size, np.uint8).tobytes()
    path.write_bytes(blob)
    ranges = np.array([[a, a + n] for a, n in spans], np.int64).reshape(-1, 2)
    gen, chunks = storage.open_storage(path.parent).read_ranges([("f", ranges)])[0]
    assert [bytes(c) for c in chunks] == [blob[a:b] for a, b in ranges.tolist()]
    fd = os.open(path, os.O_RDONLY)
    try:
        assert pread_spans(fd, ranges) == [blob[a:b] for a, b in ranges.tolist()]
    finally:
        os.close(fd)


def test_pread_spans_refuses_bad_spans_and_reports_read_errors(tmp_path):
    (tmp_path / "f").write_bytes(b"0123456789")
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        for bad in (np.array([[5, 4]], np.int64), np.array([[-1, 4]], np.int64),
                    np.array([[0, 4]], np.int32), np.array([0, 4, 5], np.int64)):
            with pytest.raises(ValueError, match="span"):
                pread_spans(fd, bad)
        assert pread_spans(fd, np.zeros((0, 2), np.int64)) == []
    finally:
        os.close(fd)
    with pytest.raises(OSError):  # a closed descriptor: the error, no partial result
        pread_spans(fd, np.array([[0, 4]], np.int64))
    directory = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(IsADirectoryError):
            pread_spans(directory, np.array([[0, 4]], np.int64))
    finally:
        os.close(directory)


def test_writes_go_in_calls_of_bounded_size(tmp_path, monkeypatch):
    """Every buffer lands where it belongs, in write calls of at most 1024 buffers and
    WRITE_CALL_BYTES (a larger buffer in pieces), at the file position or at an offset."""
    from ngshard.limits import WRITE_CALL_BYTES
    from ngshard.storage.local import write_all

    rng = np.random.default_rng(2)
    parts = [rng.integers(0, 256, int(n), np.uint8).tobytes()
             for n in rng.integers(0, 3000, 2500)]
    parts[7:7] = [bytearray(b"a" * (5 * WRITE_CALL_BYTES + 3)), b"",
                  np.arange(WRITE_CALL_BYTES, dtype=np.uint8), memoryview(b"m" * 100)]
    parts.append(b"z" * (WRITE_CALL_BYTES - 1))
    want = b"".join(bytes(p) for p in parts)
    calls = []
    for name in ("writev", "pwritev"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, bufs, *a, real=real: calls.append(
            (len(bufs), sum(memoryview(b).nbytes for b in bufs))) or real(fd, bufs, *a))
    for offset in (None, 10):
        calls.clear()
        fd = os.open(tmp_path / f"f{offset}", os.O_WRONLY | os.O_CREAT)
        try:
            write_all(fd, parts, offset)
        finally:
            os.close(fd)
        got = (tmp_path / f"f{offset}").read_bytes()
        assert got == (b"\0" * (offset or 0)) + want
        assert max(n for n, _ in calls) <= 1024
        assert max(size for _, size in calls) <= WRITE_CALL_BYTES
        assert len(calls) < len(want) / WRITE_CALL_BYTES + len(parts) / 1024 + 10


def test_atomic_write_leaves_no_temp_files(tmp_path):
    store = storage.open_storage(tmp_path)
    store.write("a.shard", [b"x" * 10, b"y"])
    store.write("a.shard", [b"z"])
    assert os.listdir(tmp_path) == ["a.shard"]
    assert store.read("a.shard") == b"z"
    assert store.list() == ["a.shard"]
    assert store.read_ranges([("missing", np.array([[0, 1]]))]) == [(None, None)]


def test_a_reader_keeps_the_object_it_opened_while_a_writer_replaces_it(tmp_path):
    store = storage.open_storage(tmp_path)
    store.write("a", [b"old" * 1000])
    with open(tmp_path / "a", "rb") as f:
        store.write("a", [b"new" * 1000])
        assert f.read() == b"old" * 1000  # the old file, whole: never patched in place
    assert store.read("a") == b"new" * 1000


def test_owned_file_slice_is_renamed_into_place_not_copied(tmp_path):
    store = storage.open_storage(tmp_path / "store")
    spill = tmp_path / "spill"
    spill.write_bytes(b"\0" * 4 + b"body")
    inode = spill.stat().st_ino
    store.write("a", [b"head", FileSlice(str(spill), 4, 4, owned=True), b"tail"])
    assert not spill.exists()
    assert (tmp_path / "store" / "a").stat().st_ino == inode
    assert store.read("a") == b"headbodytail"


def test_file_slices_that_cannot_be_taken_over_are_copied(tmp_path):
    store = storage.open_storage(tmp_path / "store")
    source = tmp_path / "source"
    source.write_bytes(b"0123456789")
    # not owned; owned but not the file's end; owned but the head does not fit its start
    for parts in ([b"ab", FileSlice(str(source), 2, 8)],
                  [b"ab", FileSlice(str(source), 2, 5, owned=True)],
                  [b"abc", FileSlice(str(source), 2, 8, owned=True)]):
        store.write("a", parts)
        assert store.read("a") == parts[0] + b"0123456789"[2:2 + parts[1].size]
        assert source.read_bytes() == b"0123456789"
    assert FileSlice(str(source), 3, 4).read() == b"3456"


def test_temp_names_carry_their_owner(tmp_path):
    from ngshard.storage.tempnames import temp_name

    name = os.path.basename(temp_name(str(tmp_path / "0.shard")))
    assert name.startswith(".0.shard~" + storage.owner_tag()) and name.endswith(".tmp")


def test_remove_stale_removes_only_what_dead_writers_of_this_host_left(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=PEER_TIMEOUT)
    host = socket.gethostname()
    stale = [f".0.shard~{dead.pid}@{host}~{'a' * 32}.tmp",
             f"{storage.SPILL_PREFIX}{dead.pid}@{host}~x1y2"]
    kept = [f".0.shard~{os.getpid()}@{host}~{'b' * 32}.tmp",  # a live writer's
            f".0.shard~{dead.pid}@other-host~{'c' * 32}.tmp",  # perhaps live, elsewhere
            f"{storage.SPILL_PREFIX}{os.getpid()}@{host}~z9",
            "0.shard", f".0.shard~{dead.pid}@{host}~not-hex.tmp"]
    for name in stale + kept:
        if name.startswith(storage.SPILL_PREFIX):
            (tmp_path / name).mkdir()
            (tmp_path / name / "0.spill").write_bytes(b"x" * 100)
        else:
            (tmp_path / name).write_bytes(b"partial")
    assert storage.remove_stale(str(tmp_path)) == len(stale)
    assert sorted(os.listdir(tmp_path)) == sorted(kept)
    assert storage.remove_stale(str(tmp_path)) == 0
    assert storage.remove_stale(str(tmp_path / "nothing")) == 0
