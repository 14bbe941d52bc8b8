"""A large read's result is memory that the threads decoding into it fault in as they write
it, in pages of the system's default size: not asked to be huge pages (as ``np.empty`` asks
for any array of 4 MiB and more), whose first writes cost 2-4x the system time on a virtual
machine that gives freed memory back to its host (``limits.HUGE_PAGES``)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ngshard


def vm_flags(address: int) -> list[str]:
    """The VmFlags of this process's mapping that holds ``address``."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's smaps")
@pytest.mark.parametrize("encoding", ["compressed_segmentation", "raw"])
def test_a_large_read_is_not_asked_to_be_huge_pages(tmp_path, encoding):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2**40, 50, dtype=np.uint64)[rng.integers(0, 50, (128, 128, 64, 1))]
    with ngshard.create_volume(tmp_path, dtype="uint64", shape=labels.shape[:3],
                               chunk_size=(32, 32, 32), encoding=encoding,
                               sharding="auto") as vol:
        vol[:] = labels
    for read in (lambda v: v[:], lambda v: v[:, :, 1:]):  # 8 MiB
        out = read(ngshard.open_volume(tmp_path))
        np.testing.assert_array_equal(out, read(labels))
        assert "hg" not in vm_flags(out.__array_interface__["data"][0])
        assert np.empty(out.shape, out.dtype).nbytes >= 4 << 20  # numpy would have asked


def huge_mappings() -> set[str]:
    """The address ranges of this process's mappings asked to be huge pages."""
    found, head = set(), ""
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                head = first
            elif first == "VmFlags:" and "hg" in line.split()[1:]:
                found.add(head)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's smaps")
def test_staged_slabs_are_asked_to_be_huge_pages(tmp_path):
    """Unlike read results: slabs take many small scattered writes (slices, boxes), where a
    fault per 2 MiB beats one per 4 KiB (``limits.SLAB_HUGE_PAGES``)."""
    before = huge_mappings()
    with ngshard.create_volume(tmp_path, dtype="uint8", shape=(512, 512, 64),
                               chunk_size=(64, 64, 64), sharding="auto") as vol:
        vol[:, :, 3] = 7  # one z-slice: a slab of 64 chunks (16 MiB) staged
        assert huge_mappings() - before
    assert (ngshard.open_volume(tmp_path)[:, :, 3] == 7).all()


def test_a_scratch_lends_one_block_per_thread_and_grows_it():
    """``recycle.Scratch``: arrays over one block for each thread, in either order; a larger
    request maps a larger block; another thread gets a block of its own."""
    import threading

    from ngshard.recycle import Scratch

    scratch = Scratch()
    a = scratch.array((64, 64, 8), np.uint64, "F")
    a[:] = 1
    b = scratch.array((32, 32, 8), np.uint16)
    assert np.shares_memory(a, b) and b.flags.c_contiguous and a.flags.f_contiguous
    bigger = scratch.array((64, 64, 16), np.uint64)
    assert bigger.nbytes > a.nbytes and not np.shares_memory(bigger, a)
    theirs = []
    worker = threading.Thread(target=lambda: theirs.append(scratch.array((8,), np.uint8)))
    worker.start()
    worker.join()
    assert not np.shares_memory(theirs[0], scratch.array((8,), np.uint8))
