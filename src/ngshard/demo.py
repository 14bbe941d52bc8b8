"""Built-in sample data: a Neuroglancer segmentation layer, as a connectomics pipeline leaves
it: a sharded compressed_segmentation volume of Voronoi "cells" at two scales, whose segment
IDs key a sharded skeleton layer of random-walk neurons in its ``skeletons`` directory."""

from __future__ import annotations

import json
import os

import numpy as np

from .sharded import ShardingSpec, write_kv
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


def make_demo_store(path: str | os.PathLike, segments: int = 5000, seed: int = 0
                    ) -> np.ndarray:
    """Write a skeleton layer of ``segments`` random segment IDs at ``path``; returns the
    IDs."""
    rng = np.random.default_rng(seed)
    ids = np.unique(rng.integers(1, 2**40, segments, dtype=np.uint64))
    lengths = rng.integers(2, 200, len(ids))
    items = {k: random_skeleton(rng, n) for k, n in zip(ids.tolist(), lengths.tolist())}
    info = {"@type": "neuroglancer_skeletons", "transform": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
            "vertex_attributes": [], "sharding": DEMO_SPEC.to_json()}
    storage = open_storage(path)
    storage.write("info", [json.dumps(info, indent=1).encode()])
    write_kv(path, DEMO_SPEC, items)
    return ids


def voronoi_labels(rng: np.random.Generator, shape: tuple[int, int, int], ids: np.ndarray,
                   step: int = 4) -> np.ndarray:
    """(x, y, z) labels: each voxel takes the ID of the nearest of ``len(ids)`` random seeds,
    computed on a grid ``step`` times coarser and scaled up."""
    coarse = [n // step for n in shape]
    seeds = rng.uniform(0, 1, (len(ids), 3)) * coarse
    x, y, z = (np.arange(n, dtype=np.float32) + 0.5 for n in coarse)
    nearest = np.zeros(coarse, np.intp)
    best = np.full(coarse, np.inf, np.float32)
    for i, (sx, sy, sz) in enumerate(seeds):
        d = ((x - sx) ** 2)[:, None, None] + ((y - sy) ** 2)[None, :, None] + \
            ((z - sz) ** 2)[None, None, :]
        closer = d < best
        best[closer], nearest[closer] = d[closer], i
    labels = ids[nearest]
    for axis in range(3):
        labels = np.repeat(labels, step, axis=axis)
    return labels


def make_demo(path: str | os.PathLike, shape: tuple[int, int, int] = (256, 256, 128),
              cells: int = 300, seed: int = 0) -> None:
    """Write the sample segmentation layer at ``path`` (see the module docstring)."""
    from .volume import create_volume

    ids = make_demo_store(os.path.join(path, "skeletons"), seed=seed)
    rng = np.random.default_rng(seed)
    labels = voronoi_labels(rng, shape, rng.choice(ids, cells, replace=False))
    with create_volume(path, dtype="uint64", shape=shape, chunk_size=(64, 64, 64),
                       encoding="compressed_segmentation", resolution=(8, 8, 40),
                       sharding="auto") as vol:
        vol[:] = labels
    vol.add_scale((2, 2, 1))
    storage = open_storage(path)
    info = json.loads(storage.read("info"))
    info["skeletons"] = "skeletons"  # where Neuroglancer looks for the segments' skeletons
    storage.write("info", [json.dumps(info, indent=1).encode()])
