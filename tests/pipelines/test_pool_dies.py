"""``kill -9`` of a local ``ngshard convert`` takes its pool's workers with it (on Linux:
each worker asks the kernel for a signal when its parent dies)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from convert_helpers import volume_data, zarr_python_array
from peers import PEER_TIMEOUT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's prctl")


def children(pid: int) -> set[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_kill_9_of_convert_kills_its_workers(tmp_path):
    src = tmp_path / "src.zarr"
    zarr_python_array(src, volume_data((64, 64, 256), "uint8"), chunks=(16, 16, 16))
    ngshard = os.path.join(os.path.dirname(sys.executable), "ngshard")
    parent = subprocess.Popen([ngshard, "convert", str(src), str(tmp_path / "out"),
                               "--workers", "2", "--chunk-size", "16,16,16", "--sharding",
                               "none", "--task-bytes", str(16 * 64 * 64), "-q"],
                              stdout=subprocess.DEVNULL)  # tasks for a pool: not one
    try:
        end = time.monotonic() + PEER_TIMEOUT
        while len(workers := children(parent.pid)) < 2 and time.monotonic() < end:
            assert parent.poll() is None, "finished before its workers were seen"
            time.sleep(0.02)
        assert len(workers) >= 2
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=PEER_TIMEOUT)
        end = time.monotonic() + 5
        while any(map(alive, workers)) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(map(alive, workers)), "workers outlived their parent"
    finally:
        parent.kill()
        parent.wait(timeout=PEER_TIMEOUT)
