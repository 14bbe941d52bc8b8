"""A segmentation layer with one fine scale, the coarse scale's shards as ``convert
--downsample`` made them, and what the add_scale tests read it with."""

from __future__ import annotations

import json

import numpy as np
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard

#: The coarse scale's shards as convert --downsample made them: not what add_scale picks.
OTHER = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 3, "hash": "identity",
         "minishard_bits": 0, "shard_bits": 3, "minishard_index_encoding": "gzip",
         "data_encoding": "raw"}


def tree(root) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def ts_read(path, scale: int) -> np.ndarray:
    return ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                    "scale_index": scale}).result(timeout=PEER_TIMEOUT
                                                   ).read().result(timeout=PEER_TIMEOUT)[..., 0]


def labels(shape=(64, 64, 64), seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    blocks = rng.integers(1, 6, tuple(n // 4 for n in shape)).astype(np.uint64) * (2**33 + 7)
    return blocks.repeat(4, 0).repeat(4, 1).repeat(4, 2)


def fine_layer(path, data) -> None:
    with ngshard.create_volume(path, dtype="uint64", shape=data.shape, chunk_size=(8, 8, 8),
                               encoding="compressed_segmentation", sharding="auto") as vol:
        vol[...] = data


def add_other_scale(path, coarse: np.ndarray) -> None:
    """A 2_2_2 scale holding ``coarse`` in the OTHER shards, as a second scale of ``path``."""
    info = json.loads((path / "info").read_text())
    info["scales"].append({**info["scales"][0], "key": "2_2_2", "size": list(coarse.shape),
                           "resolution": [2, 2, 2], "sharding": OTHER})
    (path / "info").write_text(json.dumps(info))
    with ngshard.open_volume(path, 1, mode="r+") as vol:
        vol[...] = coarse
