"""The one retry policy: a read that meets an object replaced under it runs again, backing off,
and one that keeps meeting replacements gives up with ChangedError naming the object and the
tries, from the precomputed and the zarr reader alike."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time

import pytest

import ngshard
from ngshard.errors import ChangedError, ConflictError, NgShardError
from ngshard.storage.retry import RetryPolicy, Stale
from ngshard.zarr import create_array, open_array

SPEC = ngshard.ShardingSpec(minishard_bits=2, minishard_index_encoding="gzip")


@contextlib.contextmanager
def rewritten(path, versions):
    """A thread replacing the file ``path`` (temporary file and rename, as writers do) by
    each of ``versions`` in turn, without pause, until the block ends."""
    stop = threading.Event()

    def rewrite():
        i = 0
        while not stop.is_set():
            i += 1
            with open(f"{path}.tmp", "wb") as f:
                f.write(versions[i % len(versions)])
            os.replace(f"{path}.tmp", path)

    thread = threading.Thread(target=rewrite)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def precomputed_case(tmp_path):
    """(file rewritten, its versions, a read, the reader's stats) of a store of one shard
    whose versions lay their values out at other offsets."""
    versions = []
    for v in range(2):
        ngshard.write_kv(tmp_path / f"v{v}", SPEC,
                         {k: bytes([v]) * (10 + 37 * v + k % 7) for k in range(200)})
        versions.append((tmp_path / f"v{v}" / "0.shard").read_bytes())
    shutil.copytree(tmp_path / "v0", tmp_path / "kv")
    kv = ngshard.open_kv(tmp_path / "kv", storage_options={"retries": 1})
    return tmp_path / "kv" / "0.shard", versions, lambda: kv.get_many(range(200)), \
        lambda: kv.stats().reads


def zarr_case(tmp_path):
    """The same for a zarr array of one shard."""
    versions = []
    for v in range(2):
        arr = create_array(tmp_path / f"z{v}", (8, 8), "uint8", (2, 2), shards=(8, 8))
        arr[:, :4 + 4 * v] = v + 1
        versions.append((tmp_path / f"z{v}" / "c" / "0" / "0").read_bytes())
    shutil.copytree(tmp_path / "z0", tmp_path / "z")
    arr = open_array(tmp_path / "z", storage_options={"retries": 1})
    reader = arr.encoded().reader
    return tmp_path / "z" / "c" / "0" / "0", versions, lambda: arr[...], reader.stats


@pytest.mark.parametrize("case", [precomputed_case, zarr_case])
def test_a_shard_that_keeps_changing_is_one_changed_error_from_every_reader(tmp_path, case):
    path, versions, read, stats = case(tmp_path)
    error = None
    with rewritten(path, versions):
        deadline = time.monotonic() + 30
        while error is None and time.monotonic() < deadline:
            try:
                read()
            except ChangedError as e:
                error = e
    assert type(error) is ChangedError, "the shard never changed under two tries in 30 s"
    assert isinstance(error, ConflictError) and isinstance(error, NgShardError)
    assert str(error).startswith(f"{path}: changed under each of 2 tries of one read")
    figures = stats()
    assert figures["retries_gave_up"] == 1 and figures["retries"] >= 1
    read()  # the writer has stopped: the read goes through


def test_a_read_runs_again_after_each_change_within_the_tries_of_each_object():
    policy = RetryPolicy(2, first=1e-4)
    changes = ["a", "b", "a", "b"]  # each object changes twice: within 2 retries apiece

    def read():
        if changes:
            name = changes.pop(0)
            raise Stale(name, f"store/{name}")
        return "value"

    assert policy.run(read) == "value"
    assert policy.stats() == {"retries": 4, "retries_requests": 0, "retries_gave_up": 0}
    changes[:] = ["a"] * 3
    with pytest.raises(ChangedError, match=r"^store/a: changed under each of 3 tries"):
        policy.run(read)
    assert policy.stats() == {"retries": 6, "retries_requests": 0, "retries_gave_up": 1}


def test_retries_stop_at_the_time_budget():
    policy = RetryPolicy(1000, first=0.01, longest=0.01, budget=0.05)

    def read():
        raise Stale("s", "store/s")

    started = time.monotonic()
    with pytest.raises(ChangedError, match=r"store/s: changed under each of \d+ tries of one "
                                           r"read in the 0.05 s retry budget"):
        policy.run(read)
    assert time.monotonic() - started < 1
