"""How the local pool starts: its workers are forked from this process (they start at once)
when the only other threads are OpenBLAS's idle ones (numpy starts them at its import, so
nearly every process has them), also right after an earlier pool was shut down; with a
thread that might hold a lock (a Python thread, tensorstore's pools), they come from a
forkserver instead. Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from peers import PEER_TIMEOUT

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


def test_forked_after_a_matrix_product():
    # OpenBLAS starts its threads again when a product needs them: they are stopped again
    result = _pools("a = numpy.ones((300, 300)); a @ a")
    assert [r["forked"] for r in result["runs"]] == [True, True, True]


@pytest.mark.parametrize("setup", [
    "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
    "import tensorstore as ts; ts.open({'driver': 'zarr3', 'kvstore': 'memory://', "
    "'schema': {'dtype': 'uint8', 'domain': {'shape': [4]}}}, create=True).result()",
], ids=["python-thread", "tensorstore"])
def test_forkserver_beside_other_threads(setup):
    result = _pools(setup)
    assert [r["forked"] for r in result["runs"]] == [False, False, False]
