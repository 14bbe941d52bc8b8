"""Large read results lie in memory of results dropped lately (``ngshard.recycle``): the next
read writes into pages already faulted in. Memory a view still holds is never lent again, a
lent block never shows what it held before, and what waits is bounded in bytes and time."""

from __future__ import annotations

import multiprocessing
import resource
import threading
import time

import numpy as np
import pytest

import ngshard
import ngshard.zarr
from ngshard.recycle import RESULTS, Recycler, available_memory, recycle_bytes

SHAPE = (256, 256, 64)  # 4 MiB of uint8: 1,024 pages


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def volume(path, value: int | None, encoding: str = "raw", dtype: str = "uint8"):
    """A volume of SHAPE, every voxel ``value`` (None: nothing stored)."""
    with ngshard.create_volume(path, dtype=dtype, shape=SHAPE, chunk_size=(64, 64, 64),
                               encoding=encoding, sharding="auto") as vol:
        if value is not None:
            vol[:] = value
    return ngshard.open_volume(path)


def test_a_dropped_result_is_lent_again_without_faults(tmp_path):
    # compressible values: the shard read is a few pages, the result 1,024
    data = (np.arange(np.prod(SHAPE)) // 512 % 251).astype(np.uint8).reshape(SHAPE)
    arr = ngshard.zarr.create_array(tmp_path / "a.zarr", SHAPE, "uint8", chunks=(64, 64, 64),
                                    shards=(256, 256, 64))
    arr[...] = data
    first = arr[...]
    where = address(first)
    del first
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    second = arr[...]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    np.testing.assert_array_equal(second, data)
    assert address(second) == where
    assert faults < 256  # a fresh result faults in all 1,024 pages


def test_memory_a_view_holds_is_not_lent_again(tmp_path):
    sevens, fives = volume(tmp_path / "a", 7), volume(tmp_path / "b", 5)
    first = sevens[:]
    kept = first[3:9, :, 1]
    del first
    second = fives[:]
    assert not np.shares_memory(kept, second)
    assert (kept == 7).all() and (second == 5).all()
    del kept  # now the block may go again
    third = sevens[:]
    assert (third == 7).all() and (second == 5).all()


@pytest.mark.parametrize("encoding", ["raw", "compressed_segmentation"])
def test_a_lent_block_shows_no_earlier_values(tmp_path, encoding):
    """Every read path writes every element: the fill value where nothing is stored."""
    full = volume(tmp_path / "full", 9, encoding, "uint32")
    empty = volume(tmp_path / "empty", None, encoding, "uint32")
    part = volume(tmp_path / "part", None, encoding, "uint32")
    with ngshard.open_volume(tmp_path / "part", mode="r+") as vol:
        vol[64:128, :, :] = 4
    want = np.zeros(SHAPE, np.uint32)
    want[64:128] = 4
    for read, expect in ((lambda: empty[:], 0), (lambda: part[:], want[..., None]),
                         (lambda: part[:, :, 1:], want[:, :, 1:, None])):
        held = full[:]
        where = address(held)
        del held
        got = read()
        np.testing.assert_array_equal(got, np.broadcast_to(expect, got.shape))
        if got.nbytes == np.prod(SHAPE) * 4:
            assert address(got) == where  # the same block: its nines were all overwritten
        del got


def test_a_zarr_read_writes_its_fill_value_into_a_lent_block(tmp_path):
    arr = ngshard.zarr.create_array(tmp_path / "a.zarr", SHAPE, "uint8", chunks=(64, 64, 64),
                                    shards=(128, 128, 64), fill_value=3)
    arr[:64] = 8
    other = ngshard.zarr.create_array(tmp_path / "b.zarr", SHAPE, "uint8", chunks=(64, 64, 64))
    other[...] = 200
    want = np.full(SHAPE, 3, np.uint8)
    want[:64] = 8
    for _ in range(2):
        held = other[...]
        del held
        np.testing.assert_array_equal(arr[...], want)
        boxes = [(slice(0, 256), slice(0, 256), slice(0, 64)), (slice(60, 70), 5, slice(None))]
        for got, box in zip(arr.read_many(boxes), boxes):
            np.testing.assert_array_equal(got, want[box])


def test_reads_on_many_threads_get_their_own_values(tmp_path):
    vols = [volume(tmp_path / str(v), v) for v in (1, 2, 3)]
    bad = []

    def work(k: int) -> None:
        for i in range(12):
            v = (k + i) % 3
            out = vols[v][:]
            if not (out == v + 1).all():
                bad.append((k, i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_a_recycler_keeps_at_most_its_bytes_and_seconds():
    mib = 1 << 20
    recycler = Recycler(max_bytes=10 * mib, max_seconds=0.3)
    blocks = [recycler.array((4 * mib,), np.uint8) for _ in range(3)]
    for b in blocks:
        b[:] = 1
    del b, blocks
    assert recycler.free_bytes == 8 * mib  # 12 MiB would pass 10: the oldest is unmapped
    lent = recycler.array((3 * mib,), np.uint16, "F")  # 6 MiB: no 4 MiB block holds it
    assert recycler.free_bytes == 8 * mib and lent.nbytes == 6 * mib
    small = recycler.array((3 * mib,), np.uint8)  # 3 MiB: a 4 MiB block, at most twice it
    assert recycler.free_bytes == 4 * mib and small.base.nbytes == 4 * mib
    assert recycler.array((1024,), np.uint8).base is None  # small arrays: numpy's own
    time.sleep(0.4)
    last = recycler.array((2 * mib,), np.uint8)  # a large request first unmaps old ones
    assert recycler.free_bytes == 0 and last.nbytes == 2 * mib


def test_a_small_container_keeps_a_sixteenth_of_its_memory(tmp_path):
    machine = available_memory(str(tmp_path))  # no cgroup files here: the machine's
    assert machine is None or machine > 0
    (tmp_path / "memory.max").write_text("max\n")  # cgroup v2, no limit
    assert available_memory(str(tmp_path)) == machine
    (tmp_path / "memory.max").write_text(f"{2 << 30}\n")  # a 2 GiB container
    assert available_memory(str(tmp_path)) == min(machine or 2 << 30, 2 << 30)
    assert recycle_bytes(str(tmp_path)) == (2 << 30) // 16
    v1 = tmp_path / "v1"
    (v1 / "memory").mkdir(parents=True)
    (v1 / "memory" / "memory.limit_in_bytes").write_text(f"{64 << 30}\n")
    assert recycle_bytes(str(v1)) == min(1 << 30, min(machine or 64 << 30, 64 << 30) // 16)
    assert RESULTS.max_bytes == recycle_bytes()


def _in_child(queue) -> None:
    queue.put((RESULTS.free_bytes, int(RESULTS.array((4 << 20,), np.uint8).sum() >= 0)))


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                    reason="needs fork")
def test_a_forked_child_starts_with_nothing_waiting(tmp_path):
    held = volume(tmp_path, 1)[:]
    del held
    assert RESULTS.free_bytes >= 4 << 20
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(queue,))
    child.start()
    got = queue.get(timeout=60)
    child.join(60)
    assert got == (0, 1) and child.exitcode == 0
