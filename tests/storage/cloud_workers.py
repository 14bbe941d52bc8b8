"""What the processes of tests/storage/test_cloud_writers.py run (importable by name: they
start from multiprocessing's forkserver)."""

from __future__ import annotations

import time

import numpy as np

import ngshard

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
        "minishard_bits": 2, "shard_bits": 1}
WORKERS, ROUNDS, KEYS_PER_ROUND = 8, 2, 4


def kv_value(worker: int, key: int) -> bytes:
    return f"{worker}:{key}:".encode() * (1 + key % 5)


def kv_keys(worker: int, round_: int) -> list[int]:
    """Keys of both shards (identity hash, shard = bit 2 of the key), none shared."""
    base = (worker * ROUNDS + round_) * KEYS_PER_ROUND
    return [8 * (base + j) + (4 if j % 2 else 0) for j in range(KEYS_PER_ROUND)]


def commit_retrying(commit) -> int:
    """``commit()`` until it succeeds; the number of ConflictErrors it met."""
    conflicts = 0
    while True:
        try:
            commit()
            return conflicts
        except ngshard.ConflictError:
            conflicts += 1
            time.sleep(0.01 * conflicts)


def kv_writer(url: str, options: dict, worker: int, start: float) -> tuple[list[int], int]:
    """Update keys of the store's shards in rounds through ``open_kv(mode="r+")``; the keys
    acknowledged (committed) and the conflicts met."""
    time.sleep(max(0.0, start - time.time()))  # all start together
    kv = ngshard.open_kv(url, mode="r+", storage_options=options)
    done, conflicts = [], 0
    for r in range(ROUNDS):
        keys = kv_keys(worker, r)
        kv.update({k: kv_value(worker, k) for k in keys})
        conflicts += commit_retrying(kv.commit)
        done += keys
    return done, conflicts


VOLUME_SHAPE, CHUNK = (64, 32, 8), (8, 8, 8)


def volume_writer(url: str, options: dict, worker: int, start: float) -> tuple[int, int]:
    """Write the worker's own column of chunks (x in [8w, 8w + 8)) of a sharded volume, in
    rounds, through staged writes; returns (rounds committed, conflicts met)."""
    time.sleep(max(0.0, start - time.time()))
    vol = ngshard.open_volume(url, mode="r+", storage_options=options)
    x0, conflicts = CHUNK[0] * worker, 0
    for r in range(ROUNDS):
        y0 = CHUNK[1] * (r % (VOLUME_SHAPE[1] // CHUNK[1]))
        vol[x0:x0 + CHUNK[0], y0:y0 + CHUNK[1], :] = np.uint8(worker * 10 + r + 1)
        conflicts += commit_retrying(vol.commit)
    return ROUNDS, conflicts


def big_value(key: int, n: int) -> bytes:
    """Version ``n`` of a large value (MiBs: its PUT takes a while)."""
    return bytes([key, n % 256]) * (2 << 20)


def slow_writer(url: str, options: dict, ready_path: str) -> None:
    """Rewrite the store's shards with large values again and again (until killed), telling
    ``ready_path`` each version committed."""
    kv = ngshard.open_kv(url, mode="r+", storage_options=options)
    n = 0
    while True:
        n += 1
        kv.update({k: big_value(k, n) for k in range(4)})
        kv.commit()
        with open(ready_path, "a") as f:
            f.write(f"{n}\n")
