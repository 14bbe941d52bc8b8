"""Chunks whose sizes are known only once encoded (compressed_segmentation here) are encoded
a batch at a time in commit order and copied into staging blocks: the shards written are
those of the chunks encoded one by one, whatever the source's memory order, the batches,
block sizes or spilling, and tensorstore reads them back."""

from __future__ import annotations

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard.staged.source
import ngshard.staged.stored
from ngshard import create_volume
from ngshard.volume.encodings import encode_chunk

CS = "compressed_segmentation"
SHAPE, CHUNK, BLOCK = (45, 38, 21), (8, 8, 4), (4, 4, 2)  # clipped edge chunks on every axis
SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
        "preshift_bits": 0, "minishard_bits": 2, "shard_bits": 2,
        "minishard_index_encoding": "gzip", "data_encoding": "raw"}


def write_both(tmp_path, data: np.ndarray, staged_bytes: int) -> tuple:
    """The volume written by assignment, and chunk by chunk through the store."""
    kwargs = dict(dtype=data.dtype, shape=SHAPE, chunk_size=CHUNK, num_channels=data.shape[3],
                  sharding=SPEC, staged_bytes=staged_bytes, encoding=CS,
                  compressed_segmentation_block_size=BLOCK)
    with create_volume(tmp_path / "blocks", **kwargs) as vol:
        vol[:] = data
    with create_volume(tmp_path / "chunks", **kwargs) as vol:
        store = vol.encoded()
        grid = np.array(store.grid_shape)
        positions = np.stack(np.unravel_index(np.arange(grid.prod()), grid), 1)
        starts, stops = store.chunk_box(positions)
        store.put(positions, [
            encode_chunk(np.asfortranarray(data[a[0]:b[0], a[1]:b[1], a[2]:b[2]]), CS,
                         block_size=BLOCK) for a, b in zip(starts.tolist(), stops.tolist())])
        store.commit()
    return tmp_path / "blocks", tmp_path / "chunks"


@pytest.mark.parametrize("block_bytes, staged_bytes", [
    (1 << 30, 1 << 30),  # one block
    (3000, 1 << 30),  # a block every batch or so: shards cut across blocks
    (3000, 20000),  # and spilled as they come
])
@pytest.mark.parametrize("order", ["C", "F", "transposed"])
def test_a_compressed_segmentation_volume_is_written_as_its_chunks_encoded_one_by_one(
        tmp_path, monkeypatch, block_bytes, staged_bytes, order):
    monkeypatch.setattr(ngshard.staged.stored, "ENCODED_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(ngshard.staged.source, "CHUNK_BATCH", 7)  # many batches
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 2**40, 30, dtype=np.uint64)[rng.integers(0, 30, (*SHAPE, 2))]
    data = {"C": np.ascontiguousarray(labels), "F": np.asfortranarray(labels),
            "transposed": np.ascontiguousarray(labels.transpose(2, 0, 1, 3)).transpose(
                1, 2, 0, 3)}[order]
    blocks, chunks = write_both(tmp_path, data, staged_bytes)
    shards = sorted(p.name for p in (blocks / "1_1_1").iterdir())
    assert shards == sorted(p.name for p in (chunks / "1_1_1").iterdir())
    assert len(shards) > 1
    for name in shards:
        assert (blocks / "1_1_1" / name).read_bytes() == (chunks / "1_1_1" / name).read_bytes()
    store = ts.open({"driver": "neuroglancer_precomputed",
                     "kvstore": {"driver": "file", "path": str(blocks)}}).result(
        timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(store.read().result(timeout=PEER_TIMEOUT), labels)
    np.testing.assert_array_equal(ngshard.open_volume(blocks)[:], labels)
