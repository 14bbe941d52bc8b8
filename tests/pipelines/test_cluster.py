"""A conversion on a Dask cluster started from the ``dask scheduler`` and ``dask worker``
commands, the workers in another working directory than the client: relative paths, a worker
killed mid-run, the client killed and resumed (``DST/`` first, ``DST`` then: one job), the
output byte for byte the local pool's; and workers that cannot see the source stop the job
before anything is written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from convert_helpers import files, volume_data, zarr_python_array
from peers import PEER_TIMEOUT

import ngshard

distributed = pytest.importorskip("distributed")

BIN = os.path.dirname(sys.executable)
# 2x2x2 chunks a shard: 32 shards over a grid of 8 x 8 x 4 chunks of 16^3
SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, "hash": "identity",
        "minishard_bits": 3, "shard_bits": 5, "minishard_index_encoding": "raw",
        "data_encoding": "gzip"}
# each task sleeps first on these workers, so that the client and a worker can be killed
# while the job runs (loaded by `dask worker --preload`)
SLOW = """
import os, time
import ngshard.pipelines.fastpath as fastpath
import ngshard.pipelines.to_precomputed as to_precomputed

def slowed(fill):
    def run(task):
        time.sleep(float(os.environ.get("TASK_SECONDS", "0")))
        return fill(task)
    return run

to_precomputed.fill = slowed(to_precomputed.fill)
fastpath.fill_fast = slowed(fastpath.fill_fast)
"""


def until(condition, what: str, timeout: float = PEER_TIMEOUT):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = condition()
        if found:
            return found
        time.sleep(0.05)
    raise TimeoutError(what)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A scheduler and two single-threaded workers on 127.0.0.1 (random ports), the workers
    in a folder of their own; yields (address, a client of the test)."""
    root = tmp_path_factory.mktemp("cluster")
    (root / "workers").mkdir()
    (root / "slow.py").write_text(SLOW)
    file = root / "scheduler.json"
    env = {**os.environ, "TASK_SECONDS": "0.25"}
    common = ["--no-dashboard", "--host", "127.0.0.1"]
    procs = [subprocess.Popen([f"{BIN}/dask", "scheduler", "--port", "0", "--scheduler-file",
                               str(file), *common], cwd=root, stderr=subprocess.DEVNULL)]
    try:
        until(file.exists, "the scheduler's file")
        procs.append(subprocess.Popen(
            [f"{BIN}/dask", "worker", "--scheduler-file", str(file), "--nworkers", "2",
             "--nthreads", "1", "--preload", str(root / "slow.py"), "--local-directory",
             str(root / "workers"), *common], cwd=root / "workers", env=env,
            stderr=subprocess.DEVNULL))
        address = json.loads(file.read_text())["address"]
        with distributed.Client(address, timeout=PEER_TIMEOUT) as client:
            client.wait_for_workers(2, timeout=PEER_TIMEOUT)
            yield address, client
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=PEER_TIMEOUT)



def stamps(root) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in root.rglob("*.shard")}


def test_relative_paths_killed_worker_killed_client_resumed(tmp_path, cluster):
    address, client = cluster
    here = tmp_path / "client"
    (here / "data").mkdir(parents=True)
    data = volume_data((64, 128, 128), "uint8")
    data[data == 0] = 1  # every task writes a shard
    zarr_python_array(here / "data" / "src.zarr", data, chunks=(16, 16, 16),
                      shards=(32, 32, 32))
    ngshard.convert(here / "data" / "src.zarr", tmp_path / "local", workers=2,
                    progress=False, chunk_size=(16, 16, 16), sharding=SPEC)
    command = [f"{BIN}/ngshard", "convert", "data/src.zarr", "data/out/", "--dask", address,
               "--chunk-size", "16,16,16", "--sharding", json.dumps(SPEC)]
    out, records = here / "data" / "out", here / "data" / "out" / ".ngshard-convert"
    first = subprocess.Popen(command, cwd=here, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        until(lambda: list(out.rglob("*.shard")) or first.poll() is not None, "a shard")
        worker = next(iter(client.run(os.getpid).values()))
        os.kill(worker, signal.SIGKILL)  # its task goes to the other worker; it restarts
        until(lambda: any(p.name.startswith("done-") for p in records.iterdir())
              or first.poll() is not None, "a record of finished tasks")
        assert first.poll() is None, first.communicate(timeout=PEER_TIMEOUT)
        first.kill()
    finally:
        first.kill()
        first.communicate(timeout=PEER_TIMEOUT)
    before = stamps(out)
    done = subprocess.run([*command[:3], "data/out", *command[4:]], cwd=here,
                          capture_output=True, text=True, timeout=PEER_TIMEOUT)
    assert done.returncode == 0, done.stderr
    skipped = int(done.stdout.split(" done before")[0].rsplit(" ", 1)[1])
    assert 0 < skipped < 32
    after = stamps(out)
    assert sum(after[n] == s for n, s in before.items()) >= skipped  # not rewritten
    assert files(out) == files(tmp_path / "local")


def test_workers_that_cannot_see_the_source_stop_the_job_first(tmp_path, cluster):
    address, client = cluster
    src = "memory://cluster-test/src.zarr"  # in this process only
    ngshard.zarr.create_array(src, (16, 16, 16), "uint8", (16, 16, 16))[...] = 1
    with pytest.raises(ngshard.StorageAccessError, match="does not see memory://"):
        ngshard.convert(src, tmp_path / "out", executor=client.get_executor(),
                        progress=False)
    assert not (tmp_path / "out").exists()
