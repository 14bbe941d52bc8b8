"""Volumes stage their changes as seed 003 designs (issue 12): z-slices read each chunk once,
whole chunks are never read, changed chunks are encoded once at commit, shards written once;
plans print; abort and exceptions leave storage untouched; resizes; memory stays bounded."""

from __future__ import annotations

import collections
import os

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard
from ngshard.volume import create_volume, open_volume

IDENTITY = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 2,
            "minishard_bits": 2, "shard_bits": 3, "minishard_index_encoding": "gzip",
            "data_encoding": "raw"}


@pytest.fixture
def traffic(spy_chunk_stores):
    """Chunk positions fetched (get) and staged encoded (put), on both kinds of chunk store."""
    seen = {"get": collections.Counter(), "put": collections.Counter()}

    def count(op, store, positions):
        seen[op].update(map(tuple, np.asarray(positions).tolist()))

    spy_chunk_stores(count)
    return seen


def ts_read(path) -> np.ndarray:
    store = ts.open({"driver": "neuroglancer_precomputed",
                     "kvstore": {"driver": "file", "path": str(path)}}).result(timeout=PEER_TIMEOUT)
    return store[ts.d[:].translate_to[0]].read().result(timeout=PEER_TIMEOUT)


@pytest.mark.parametrize("encoding, dtype", [("raw", "uint8"),
                                             ("compressed_segmentation", "uint32")])
def test_z_slices_read_each_chunk_once_and_encode_it_once(tmp_path, traffic, encoding, dtype):
    data = np.random.default_rng(0).integers(0, 200, (40, 24, 20, 1)).astype(dtype)
    vol = create_volume(tmp_path, dtype=dtype, shape=data.shape, chunk_size=(16, 16, 8),
                        encoding=encoding, sharding=IDENTITY)
    for z in range(20):
        vol[:, :, z] = data[:, :, z, 0]  # (x, y) for the single channel
    grid = [(x, y, z) for x in range(3) for y in range(2) for z in range(3)]
    assert not traffic["get"]  # a new volume: nothing stored, nothing read
    assert not traffic["put"]  # nothing encoded before the commit
    np.testing.assert_array_equal(vol[...], data)
    plan = str(vol.plan())
    assert "encode 18 chunks" in plan and "create" in plan
    vol.commit()
    assert traffic["put"] == dict.fromkeys(grid, 1)
    assert [name for name in os.listdir(tmp_path / "1_1_1") if name.endswith(".shard")]
    np.testing.assert_array_equal(ts_read(tmp_path), data)
    # over stored chunks: each read once, at its first slice, and encoded once
    traffic["put"].clear()
    vol = open_volume(tmp_path, mode="r+")
    for z in range(20):
        vol[:, :, z] = data[:, :, z, 0] // 2
    assert traffic["get"] == dict.fromkeys(grid, 1) and not traffic["put"]
    vol.commit()
    assert traffic["put"] == dict.fromkeys(grid, 1)
    np.testing.assert_array_equal(ts_read(tmp_path), data // 2)


@pytest.mark.parametrize("sharding", [None, IDENTITY])
def test_whole_chunks_are_never_read(tmp_path, traffic, sharding):
    vol = create_volume(tmp_path, dtype="uint16", shape=(32, 32, 16), chunk_size=(16, 16, 8),
                        sharding=sharding)
    vol[...] = 5
    vol[16:, :, 8:] = np.arange(16 * 32 * 8, dtype=np.uint16).reshape(16, 32, 8)
    vol[0:1, 0:1, 0:1] = 9  # a partial write into a chunk already staged
    assert not traffic["get"]
    vol.commit()
    vol = open_volume(tmp_path, mode="r+")
    vol[:16] = 1  # whole chunks over stored ones: not read either
    assert not traffic["get"]
    vol[20, 3, 3] = 2  # a partial one: read once
    vol[21, 3, 3] = 2
    assert traffic["get"] == {(1, 0, 0): 1}
    vol.commit()
    expect = np.full((32, 32, 16, 1), 5, np.uint16)
    expect[16:, :, 8:, 0] = np.arange(16 * 32 * 8).reshape(16, 32, 8)
    expect[:16], expect[20:22, 3, 3] = 1, 2
    np.testing.assert_array_equal(ts_read(tmp_path), expect)


def test_orthogonal_indices_and_steps_read_and_write(tmp_path):
    data = np.random.default_rng(2).integers(0, 9, (13, 11, 7, 2)).astype(np.uint16)
    with create_volume(tmp_path, dtype="uint16", shape=data.shape, chunk_size=(4, 4, 4),
                       sharding="auto") as vol:
        vol[...] = data
        rows, mask = [12, 0, 5, 5], np.arange(11) % 3 == 0
        np.testing.assert_array_equal(vol[rows, mask, ::-2], data[rows][:, mask][:, :, ::-2])
        vol[rows, mask, 6:1:-2, 1] = 77
        data[np.ix_(rows, np.flatnonzero(mask), np.arange(6, 1, -2), [1])] = 77
        vol[::3, 2, [1, 3]] = np.arange(5 * 2 * 2).reshape(5, 2, 2)
        data[::3, 2, [1, 3]] = np.arange(5 * 2 * 2).reshape(5, 2, 2)
        np.testing.assert_array_equal(vol[...], data)
    np.testing.assert_array_equal(ts_read(tmp_path), data)


@pytest.mark.parametrize("sharding", [None, IDENTITY])
def test_abort_and_exceptions_leave_storage_untouched(tmp_path, sharding):
    with create_volume(tmp_path, dtype="uint8", shape=(20, 20, 20), chunk_size=(8, 8, 8),
                       sharding=sharding) as vol:
        vol[...] = 1
    before = sorted(os.listdir(tmp_path / "1_1_1"))
    vol = open_volume(tmp_path, mode="r+")
    vol[3:9] = 2
    vol.resize((30, 20, 20))
    vol.abort()
    assert vol.shape == (20, 20, 20, 1) and (vol[...] == 1).all()
    with pytest.raises(RuntimeError), open_volume(tmp_path, mode="r+") as vol:
        vol[...] = 3
        raise RuntimeError("stop")
    assert sorted(os.listdir(tmp_path / "1_1_1")) == before
    assert (ts_read(tmp_path) == 1).all()


def test_unsharded_resize_rewrites_edge_chunks_under_their_new_names(tmp_path):
    data = np.random.default_rng(3).integers(0, 9, (21, 10, 6, 1)).astype(np.uint8)
    with create_volume(tmp_path, dtype="uint8", shape=data.shape, chunk_size=(8, 8, 4),
                       voxel_offset=(2, 0, -1)) as vol:
        vol[...] = data
    vol = open_volume(tmp_path, mode="r+")
    vol.resize((13, 18, 6))  # shrink x into a chunk, grow y past one
    plan = str(vol.array.resize_plan((13, 18, 6, 1)))
    assert "delete 0 stored chunks" in plan  # nothing more to change
    vol.commit()
    expect = np.zeros((13, 18, 6, 1), np.uint8)
    expect[:, :10] = data[:13]
    np.testing.assert_array_equal(ts_read(tmp_path), expect)
    names = set(os.listdir(tmp_path / "1_1_1"))
    assert "10-15_0-8_-1-3" in names and "10-18_0-8_-1-3" not in names  # clipped x edge
    assert "2-10_8-16_-1-3" in names and "2-10_8-10_-1-3" not in names  # y edge grew
    assert "18-23_0-8_-1-3" not in names  # past the new edge: deleted
    assert open_volume(tmp_path).shape == (13, 18, 6, 1)


def test_sharded_resize_keeps_or_refuses_the_morton_bits(tmp_path):
    with create_volume(tmp_path, dtype="uint16", shape=(24, 16, 8), chunk_size=(8, 8, 8),
                       sharding=IDENTITY) as vol:
        vol[...] = 4
    vol = open_volume(tmp_path, mode="r+")
    with pytest.raises(ngshard.SpecError, match=r"Morton bits per axis from \(2, 1, 0\) to "
                                                r"\(3, 1, 0\)"):
        vol.resize((40, 16, 8))  # 3 -> 5 chunks along x: every chunk ID would change
    assert vol.shape == (24, 16, 8, 1)
    vol.resize((30, 12, 8))  # 3 -> 4 chunks along x, 2 along y: same bits
    vol[28:, 10:] = 9
    vol.commit()
    expect = np.zeros((30, 12, 8, 1), np.uint16)
    expect[:24] = 4
    expect[28:, 10:] = 9
    np.testing.assert_array_equal(ts_read(tmp_path), expect)
    with pytest.raises(ngshard.SpecError, match="channels"):
        vol.resize((30, 12, 8, 2))


def test_staged_chunks_stay_within_the_budget_and_spill(tmp_path, traffic, monkeypatch):
    chunk = 16**3  # bytes of one uint8 chunk
    data = np.random.default_rng(4).integers(0, 255, (64, 64, 64, 1), dtype=np.uint8)
    vol = create_volume(tmp_path, dtype="uint8", shape=data.shape, chunk_size=(16, 16, 16),
                        sharding=IDENTITY, staged_bytes=8 * chunk)
    peak = []
    original = vol.encoded().spill

    def spill():
        peak.append(vol.array.nbytes_staged)
        spills.append(sorted(n for n in os.listdir(tmp_path / "1_1_1")
                             if n.startswith(".ngshard-staged-")))
        original()

    spills: list = []
    monkeypatch.setattr(vol.encoded(), "spill", spill)
    for z in range(64):  # 16 chunks per slice layer, twice the budget
        vol[:, :, z] = data[:, :, z]
        assert vol.array.nbytes_staged <= 8 * chunk
    vol[...] = data  # a single write of 64 chunks runs in pieces
    assert vol.array.nbytes_staged <= 8 * chunk
    assert peak and max(peak) <= 8 * chunk * 1.5
    assert any(spills)  # encoded chunks went to the store's spill files
    assert not [n for n in os.listdir(tmp_path / "1_1_1") if n.endswith(".shard")]
    vol.commit()
    np.testing.assert_array_equal(ts_read(tmp_path), data)


def test_reads_and_scales_see_staged_chunks(tmp_path):
    vol = create_volume(tmp_path, dtype="uint8", shape=(32, 32, 8), chunk_size=(8, 8, 8),
                        sharding="auto")
    vol[8:16, 0:8] = 200
    got = vol.read_chunks([[1, 0, 0], [0, 0, 0]])
    assert (got[0] == 200).all() and not got[1].any()
    vol.commit()
    vol[0:8, 0:8] = 100  # staged, not committed: add_scale still sees it
    coarse = vol.add_scale((2, 2, 1))[...]
    expect = np.zeros((16, 16, 8, 1), np.uint8)
    expect[0:4, 0:4], expect[4:8, 0:4] = 100, 200
    np.testing.assert_array_equal(coarse, expect)


def test_bulk_writes_go_through_without_staging_a_copy(tmp_path, traffic):
    data = np.random.default_rng(5).integers(0, 255, (64, 48, 32, 1), dtype=np.uint8)
    vol = create_volume(tmp_path, dtype="uint8", shape=data.shape, chunk_size=(16, 16, 16),
                        sharding=IDENTITY, staged_bytes=8 * 24 * 16**3)  # through from 24
    vol[...] = data  # all 24 chunks, whole: encoded from the value, staged in the store
    assert vol.array.nbytes_staged == 0 and len(traffic["put"]) == 24
    assert not [n for n in os.listdir(tmp_path / "1_1_1") if n.endswith(".shard")]
    vol[:, :, 0:16] = 3  # 12 whole chunks: below the bulk size, staged
    assert vol.array.nbytes_staged == 12 * 16**3
    data[:, :, 0:16] = 3
    vol.commit()
    np.testing.assert_array_equal(ts_read(tmp_path), data)
