"""Raw chunks are encoded straight into staging blocks in commit order, and chunks whose
sizes are known only once encoded (compressed_segmentation) are encoded a batch at a time in
commit order and copied into staging blocks: the bytes written are those of the chunks
encoded one by one, whatever the views, memory order, batches, block sizes or spilling, and
tensorstore reads them back."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard.sharded.spill
import ngshard.staged.source
import ngshard.staged.stored
import ngshard.volume.handle
from ngshard import create_volume
from ngshard.storage import open_storage
from ngshard.volume.encodings import encode_chunk

SHAPE, CHUNK = (45, 38, 21), (8, 8, 4)  # clipped edge chunks on every axis
CS, BLOCK = "compressed_segmentation", (4, 4, 2)
SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
        "preshift_bits": 0, "minishard_bits": 2, "shard_bits": 2,
        "minishard_index_encoding": "gzip", "data_encoding": "raw"}


def random_view(rng: np.random.Generator, dtype: str) -> np.ndarray:
    """A 4-D view with transposed axes, offsets, steps and reversed axes."""
    shape = tuple(int(n) for n in rng.integers(3, 40, 4))
    base = rng.integers(0, 2**15, shape).astype(dtype)
    view = base.transpose(rng.permutation(4))
    index = tuple(slice(int(rng.integers(0, 3)), None, int(rng.choice([1, 1, 2, -1])))
                  for _ in range(4))
    return view[index]


@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint32", "float32", "uint64"])
def test_raw_encoding_into_a_buffer_is_the_fortran_bytes_of_any_view(dtype):
    rng = np.random.default_rng(3)
    for _ in range(60):
        view = random_view(rng, dtype)
        want = view.astype(view.dtype.newbyteorder("<")).tobytes(order="F")
        assert bytes(encode_chunk(view, "raw")) == want
        out = bytearray(len(want))
        assert encode_chunk(view, "raw", out=memoryview(out)) is not None
        assert bytes(out) == want


def test_encoding_into_a_buffer_refuses_a_wrong_size_or_encoding():
    chunk = np.zeros((4, 4, 4, 1), np.uint32)
    with pytest.raises(ValueError, match="size"):
        encode_chunk(chunk, "raw", out=memoryview(bytearray(10)))
    with pytest.raises(ValueError, match="compressed_segmentation"):
        encode_chunk(chunk, "compressed_segmentation", block_size=(2, 2, 2),
                     out=memoryview(bytearray(256)))


def write_both(tmp_path, data: np.ndarray, staged_bytes: int, encoding: str = "raw") -> tuple:
    """The volume written by assignment (blocks), and chunk by chunk through the store."""
    kwargs = dict(dtype=data.dtype, shape=SHAPE, chunk_size=CHUNK, num_channels=data.shape[3],
                  sharding=SPEC, staged_bytes=staged_bytes, encoding=encoding,
                  compressed_segmentation_block_size=BLOCK)
    with create_volume(tmp_path / "blocks", **kwargs) as vol:
        vol[:] = data
    with create_volume(tmp_path / "chunks", **kwargs) as vol:
        store = vol.encoded()
        grid = np.array(store.grid_shape)
        positions = np.stack(np.unravel_index(np.arange(grid.prod()), grid), 1)
        starts, stops = store.chunk_box(positions)
        store.put(positions, [encode_chunk(np.asfortranarray(data[a[0]:b[0], a[1]:b[1],
                                                                  a[2]:b[2]]),
                                           encoding, block_size=BLOCK)
                              for a, b in zip(starts.tolist(), stops.tolist())])
        store.commit()
    return tmp_path / "blocks", tmp_path / "chunks"


def same_shards_read_by_tensorstore(blocks, chunks, data: np.ndarray) -> None:
    """Both volumes hold the same shards, byte for byte, and tensorstore reads ``data``."""
    shards = sorted(p.name for p in (blocks / "1_1_1").iterdir())
    assert shards == sorted(p.name for p in (chunks / "1_1_1").iterdir())
    assert len(shards) > 1
    for name in shards:
        assert (blocks / "1_1_1" / name).read_bytes() == (chunks / "1_1_1" / name).read_bytes()
    store = ts.open({"driver": "neuroglancer_precomputed",
                     "kvstore": {"driver": "file", "path": str(blocks)}}).result(
        timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(store.read().result(timeout=PEER_TIMEOUT), data)


@pytest.mark.parametrize("block_bytes, staged_bytes", [
    (256 << 20, 1 << 30),  # one block
    (3000, 1 << 30),  # a block every few batches: shards cut across blocks
    (3000, 20000),  # and spilled as they come
])
def test_a_raw_volume_is_written_as_its_chunks_encoded_one_by_one(
        tmp_path, monkeypatch, block_bytes, staged_bytes):
    monkeypatch.setattr(ngshard.staged.stored, "STAGE_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(5)
    data = rng.integers(0, 2**16, (*SHAPE, 2), dtype=np.uint16)
    same_shards_read_by_tensorstore(*write_both(tmp_path, data, staged_bytes), data)


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
    blocks, chunks = write_both(tmp_path, data, staged_bytes, CS)
    same_shards_read_by_tensorstore(blocks, chunks, labels)
    np.testing.assert_array_equal(ngshard.open_volume(blocks)[:], labels)


def test_a_large_compressed_segmentation_write_goes_to_its_shard_files_as_it_is_encoded(
        tmp_path, monkeypatch):
    """Past WRITE_BEHIND_BYTES (here: any write), the batches encoded so far are in the
    files that become the shards while later batches are encoded (with a staging budget
    that would hold them all); the commit makes those files the shards, byte for byte as
    written chunk by chunk."""
    monkeypatch.setattr(ngshard.staged.stored, "WRITE_BEHIND_BYTES", 0, raising=False)
    monkeypatch.setattr(ngshard.staged.source, "CHUNK_BATCH", 7)  # many batches
    folder = tmp_path / "behind"
    on_disk = []  # bytes in spill files as each chunk is encoded

    def encode(*args, **kwargs):
        on_disk.append(sum(p.stat().st_size for p in folder.rglob("*.spill")))
        return encode_chunk(*args, **kwargs)

    monkeypatch.setattr(ngshard.volume.handle, "encode_chunk", encode)
    rng = np.random.default_rng(6)
    labels = rng.integers(0, 2**40, 30, dtype=np.uint64)[rng.integers(0, 30, (*SHAPE, 1))]
    kwargs = dict(dtype="uint64", shape=SHAPE, chunk_size=CHUNK, sharding=SPEC, encoding=CS,
                  compressed_segmentation_block_size=BLOCK)
    with create_volume(folder, **kwargs) as vol:
        vol[:] = labels
    assert max(on_disk) > labels.nbytes // 10  # the last batches: most data written already
    assert not list(folder.rglob("*.spill"))  # taken over as the shards, or removed
    monkeypatch.undo()
    _, chunks = write_both(tmp_path, labels, 1 << 30, CS)
    same_shards_read_by_tensorstore(folder, chunks, labels)


def test_a_durable_write_behind_flushes_its_batches_to_disk_as_it_goes(tmp_path, monkeypatch):
    """Durable storage: each batch written behind is flushed to the disk (fdatasync, on a job
    thread) while later ones are encoded, not all of it by the fsync at the commit."""
    monkeypatch.setattr(ngshard.staged.stored, "WRITE_BEHIND_BYTES", 0, raising=False)
    monkeypatch.setattr(ngshard.staged.source, "CHUNK_BATCH", 40)  # 5 batches, 4 shards
    monkeypatch.setattr(ngshard.sharded.spill, "FLUSH_RUN_BYTES", 0, raising=False)
    flushed, seen = [], []  # spill files flushed; how many when each chunk is encoded
    sync = getattr(os, "fdatasync", os.fsync)

    def recording(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".spill"):
            flushed.append(fd)
        return sync(fd)

    def encode(*args, **kwargs):
        seen.append(len(flushed))
        return encode_chunk(*args, **kwargs)

    monkeypatch.setattr(os, "fdatasync" if hasattr(os, "fdatasync") else "fsync", recording)
    monkeypatch.setattr(ngshard.volume.handle, "encode_chunk", encode)
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2**40, 30, dtype=np.uint64)[rng.integers(0, 30, (*SHAPE, 1))]
    with create_volume(open_storage(tmp_path, durable=True), dtype="uint64", shape=SHAPE,
                       chunk_size=CHUNK, sharding=SPEC, encoding=CS,
                       compressed_segmentation_block_size=BLOCK) as vol:
        vol[:] = labels
    monkeypatch.undo()
    assert max(seen) > 1  # batches on the disk before the last was encoded
    np.testing.assert_array_equal(ngshard.open_volume(tmp_path)[:], labels)


def test_a_partial_raw_write_keeps_the_rest(tmp_path):
    data = np.arange(np.prod(SHAPE), dtype=np.uint32).reshape(*SHAPE, 1)
    with create_volume(tmp_path, dtype="uint32", shape=SHAPE, chunk_size=CHUNK,
                       sharding=SPEC) as vol:
        vol[:] = data
    with ngshard.open_volume(tmp_path, mode="r+") as vol:
        vol[3:30, 5:17, 2:19] = 7  # partial chunks read, merged, written back in blocks
    data[3:30, 5:17, 2:19] = 7
    np.testing.assert_array_equal(ngshard.open_volume(tmp_path)[:], data)
