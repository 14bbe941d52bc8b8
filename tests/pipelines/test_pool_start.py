"""How the local pool starts: its workers are forked from this process (they start at once)
when the only other threads are idle ones it can stop (OpenBLAS's, which numpy starts at
its import, so nearly every process has them; ngshard's own thread pools'), also right
after an earlier pool was shut down or stopped, and after an object store was opened (no
request made); with a thread that might hold a lock (a Python thread of someone else's,
tensorstore's pools), they come from a forkserver instead. Each case runs in a fresh
interpreter. A job of one task runs on a thread of this process instead, with the bytes a
worker would write."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from convert_helpers import volume_data, zarr_python_array
from peers import PEER_TIMEOUT

import ngshard

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, fork")

POOLS = """
import json, os, sys, threading, time
import numpy
from ngshard.pipelines.executors import local_pool, stop_pool

def threads():
    return len(os.listdir("/proc/self/task"))

def start():
    t = time.perf_counter()
    pool = local_pool(2)
    seconds = time.perf_counter() - t
    parents = {{f.result() for f in [pool.submit(os.getppid) for _ in range(8)]}}
    return pool, seconds, parents

if __name__ == "__main__":
    before = threads()
    {setup}
    runs = []
    for stop in (False, True, False):  # shut down, stopped, shut down: each then a new one
        pool, seconds, parents = start()
        runs.append({{"seconds": seconds, "forked": parents == {{os.getpid()}}}})
        stop_pool(pool) if stop else pool.shutdown()
    from ngshard.threads import pmap  # ngshard's thread pools work on
    assert pmap(abs, range(-200, 0)) == list(range(200, 0, -1))
    print(json.dumps({{"threads": before, "runs": runs}}))
"""


def _pools(setup: str = "pass") -> dict:
    out = subprocess.run([sys.executable, "-c", POOLS.format(setup=setup)],
                         capture_output=True, text=True, timeout=PEER_TIMEOUT,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "2"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_forked_beside_openblas_threads():
    result = _pools()
    assert result["threads"] > 1  # numpy's OpenBLAS runs threads from its import on
    assert [r["forked"] for r in result["runs"]] == [True, True, True]
    # a forked worker is up in milliseconds; a forkserver imports ngshard (0.5 s quiet)
    assert min(r["seconds"] for r in result["runs"]) < 0.25


@pytest.mark.parametrize("setup", [
    # OpenBLAS starts its threads again when a product needs them: they are stopped again
    "a = numpy.ones((300, 300)); a @ a",
    # ngshard's thread pools ran (a conversion's planning reads with them)
    "from ngshard.threads import pmap; pmap(abs, range(1000))",
    # a conversion to s3:// opens its destination before the pool starts
    "from ngshard.storage import open_storage; open_storage('s3://bucket/layer', "
    "storage_options={'endpoint_url': 'http://127.0.0.1:9', 'key': 'k', 'secret': 's', "
    "'region': 'us-east-1'})",
], ids=["matrix-product", "ngshard-threads", "s3-opened"])
def test_forked_after(setup):
    result = _pools(setup)
    assert [r["forked"] for r in result["runs"]] == [True, True, True]


@pytest.mark.parametrize("setup", [
    "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
    "import tensorstore as ts; ts.open({'driver': 'zarr3', 'kvstore': 'memory://', "
    "'schema': {'dtype': 'uint8', 'domain': {'shape': [4]}}}, create=True).result()",
], ids=["python-thread", "tensorstore"])
def test_forkserver_beside_other_threads(setup):
    result = _pools(setup)
    assert [r["forked"] for r in result["runs"]] == [False, False, False]


ONE_TASK = """
import sys, time
import ngshard
if __name__ == "__main__":
    stats = ngshard.convert(sys.argv[1], sys.argv[2], progress=False, workers=2,
                            chunk_size=(16, 16, 16), task_bytes=int(sys.argv[3]))
    print(stats["tasks"], flush=True)
    time.sleep(0.5)  # a pool's processes (resource tracker, forkserver) would live on
"""


def _children(pid: int) -> set[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(p) for p in f.read().split()}
    except OSError:
        return set()


def _convert(src, dst, task_bytes: int) -> tuple[int, set[int]]:
    """Tasks of a conversion in a child interpreter, and the processes it started."""
    proc = subprocess.Popen([sys.executable, "-c", ONE_TASK, str(src), str(dst),
                             str(task_bytes)], stdout=subprocess.PIPE, text=True)
    seen: set[int] = set()
    while proc.poll() is None:
        seen |= _children(proc.pid)
        time.sleep(0.01)
    assert proc.returncode == 0
    return int(proc.stdout.read().split()[0]), seen


def test_a_one_task_job_runs_in_this_process(tmp_path):
    data = volume_data((32, 32, 64), "uint8")
    zarr_python_array(tmp_path / "src.zarr", data, chunks=(16, 16, 16))
    tasks, started = _convert(tmp_path / "src.zarr", tmp_path / "one", 1 << 27)
    assert tasks == 1 and started == set()
    tasks, started = _convert(tmp_path / "src.zarr", tmp_path / "pool", 32**3)
    assert tasks == 2 and started  # a pool's
    # the same bytes as a job of one task run by a pool's worker
    ngshard.convert(tmp_path / "src.zarr", tmp_path / "workers", progress=False,
                    chunk_size=(16, 16, 16), executor=ProcessPoolExecutor(2))
    one, workers = (sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file())
                    for d in (tmp_path / "one", tmp_path / "workers"))
    assert one == workers and one
    for name in one:
        assert (tmp_path / "one" / name).read_bytes() == \
            (tmp_path / "workers" / name).read_bytes()
    np.testing.assert_array_equal(ngshard.open_volume(tmp_path / "one")[..., 0], data.T)


PRELOAD = """
import json, sys, threading, time
from ngshard.pipelines.executors import local_pool

if __name__ == "__main__":
    {setup}
    pool = local_pool(2, preload=("colorsys", "no_such_module_of_ngshard"))
    here = "colorsys" in sys.modules
    # (a function of this script would not reach a forkserver's workers)
    asked = [pool.submit(eval, "'colorsys' in __import__('sys').modules") for _ in range(4)]
    print(json.dumps({{"here": here, "workers": [f.result() for f in asked]}}))
    pool.shutdown()
"""


@pytest.mark.parametrize("setup, forked", [
    ("pass", True),
    ("threading.Thread(target=time.sleep, args=(60,), daemon=True).start()", False),
], ids=["forked", "forkserver"])
def test_modules_preloaded_before_the_workers_start(setup, forked):
    """What the tasks import (kimimaro, zmesh: about a CPU second) is imported once, before
    the workers are forked (in this process, or in the forkserver), not by each worker; a
    module that is not installed is left to the task that needs it."""
    out = subprocess.run([sys.executable, "-c", PRELOAD.format(setup=setup)],
                         capture_output=True, text=True, timeout=PEER_TIMEOUT)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"here": forked, "workers": [True] * 4}
