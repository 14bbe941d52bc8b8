"""The one task runner: results as they complete with a bounded number in flight, tasks
taken lazily, finished tasks recorded in batches; lazily made plans that hold no tasks."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from ngshard import ShardingSpec
from ngshard.limits import RECORD_TASKS
from ngshard.pipelines import resume
from ngshard.pipelines.plan import ScatteredShards, precomputed_tasks
from ngshard.pipelines.runner import completed
from ngshard.volume.grid import ChunkGrid


def test_results_as_they_complete_with_a_bounded_window():
    running, most, lock = [0], [0], threading.Lock()
    taken = []

    def work(seconds: float) -> float:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(seconds)
        with lock:
            running[0] -= 1
        return seconds

    def tasks():
        for s in [1.0] + [0.01] * 30:  # a slow first task holds up nothing behind it
            taken.append(s)
            yield s

    recorded = []
    with ThreadPoolExecutor(8) as pool:
        out = []
        for r in completed(pool, tasks(), work, record=recorded.append, window=4):
            out.append(r)
            assert len(taken) - len(out) <= 4  # taken lazily: at most the window ahead
    assert out[-1] == 1.0 and sorted(out) == sorted(recorded) and len(out) == 31
    assert most[0] <= 4


def test_a_failure_waits_for_running_tasks_records_them_and_is_raised():
    def work(x):
        if x == 3:
            raise ValueError("bad task")
        time.sleep(0.2 if x < 3 else 0)
        return x

    recorded = []
    with ThreadPoolExecutor(4) as pool, pytest.raises(ValueError, match="bad task"):
        list(completed(pool, range(100), work, record=recorded.append, window=4))
    assert sorted(recorded) == [0, 1, 2]  # running when it failed: finished and recorded


def test_records_are_written_a_batch_at_a_time(tmp_path):
    job = {"from": "a", "to": "b"}
    assert resume.start(tmp_path, job, True) == set()
    names = [f"1_1_1/{i}.shard" for i in range(2 * RECORD_TASKS + 5)]
    with resume.Recorder(tmp_path) as recorder:
        for n in names:
            recorder.add(n)
    records = list((tmp_path / ".ngshard-convert").iterdir())
    assert len(records) == 3 + 1  # two full batches, the rest, the job
    assert resume.start(tmp_path, job, True) == set(names)
    resume.clear(tmp_path)
    assert not (tmp_path / ".ngshard-convert").exists()


MURMUR = ShardingSpec.from_json({
    "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0,
    "hash": "murmurhash3_x86_128", "minishard_bits": 2, "shard_bits": 4,
    "minishard_index_encoding": "raw", "data_encoding": "raw"})


def test_scattered_shards_hold_every_chunk_once():
    grid = ChunkGrid((200, 120, 90), (16, 16, 16))  # 13 x 8 x 6 chunks
    # many blocks and ranges, as at scale
    shards = ScatteredShards(grid, MURMUR, block=100, range_chunks=200)
    seen = []
    for shard, positions in shards:
        assert (grid.shard_of(positions, MURMUR)[0] == shard).all()
        seen.append(positions)
    every = np.concatenate(seen)
    assert len(every) == grid.num_chunks == len(np.unique(grid.morton(every)))
    assert shards.count == len(seen) == 16
    tasks = precomputed_tasks("/x", "s", grid, MURMUR, None, 4096, 1 << 20)
    assert len(tasks) == 16 and [t.shard for t in tasks] == sorted(t.shard for t in tasks)
