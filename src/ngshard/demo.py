"""Built-in sample data: a sharded Neuroglancer skeleton layer of random-walk neurons."""

from __future__ import annotations

import json
import os

import numpy as np

from .kv import write_kv
from .spec import ShardingSpec
from .storage import open_storage

DEMO_SPEC = ShardingSpec(hash="murmurhash3_x86_128", preshift_bits=0, minishard_bits=4,
                         shard_bits=3, minishard_index_encoding="gzip", data_encoding="gzip")


def encode_skeleton(vertices: np.ndarray, edges: np.ndarray) -> bytes:
    """Neuroglancer's precomputed skeleton encoding (no extra vertex attributes)."""
    head = np.array([len(vertices), len(edges)], "<u4").tobytes()
    return head + vertices.astype("<f4").tobytes() + edges.astype("<u4").tobytes()


def random_skeleton(rng: np.random.Generator, length: int) -> bytes:
    """A chain of ``length`` vertices wandering from a random start (nanometres)."""
    start = rng.uniform(0, 100_000, 3)
    steps = rng.normal(0, 250, (length, 3)).cumsum(axis=0)
    edges = np.stack([np.arange(length - 1), np.arange(1, length)], axis=1)
    return encode_skeleton(start + steps, edges)


def make_demo_store(path: str | os.PathLike, segments: int = 5000, seed: int = 0) -> ShardingSpec:
    """Write a skeleton layer of ``segments`` random segment IDs at ``path``; returns its spec."""
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(1, 2**40, segments, dtype=np.uint64))
    lengths = rng.integers(2, 200, len(ids))
    items = {k: random_skeleton(rng, n) for k, n in zip(ids.tolist(), lengths.tolist())}
    info = {"@type": "neuroglancer_skeletons", "transform": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
            "vertex_attributes": [], "sharding": DEMO_SPEC.to_json()}
    storage = open_storage(path)
    storage.write("info", [json.dumps(info, indent=1).encode()])
    write_kv(path, DEMO_SPEC, items)
    return DEMO_SPEC
