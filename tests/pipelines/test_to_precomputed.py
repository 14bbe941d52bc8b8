"""zarr -> precomputed: arrays written by zarr-python and tensorstore (v2 and v3, sharded or
not, OME 0.4 and 0.5 groups of several levels, multichannel, uint8 images and uint64
labels) converted by ngshard read back through tensorstore's neuroglancer_precomputed
driver equal to the source, axes mapped."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from convert_helpers import (
    as_xyzc,
    ome_group,
    read_precomputed,
    tensorstore_array,
    volume_data,
    zarr_python_array,
)

import ngshard
import ngshard.zarr


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(2) as ex:
        yield ex


def info(path) -> dict:
    return json.loads((path / "info").read_text())


@pytest.mark.parametrize("chunk_size", [None, (32, 16, 8)], ids=["inner", "other"])
@pytest.mark.parametrize("kind", ["v2", "v3", "v3-sharded", "v3-sharded-gzip"])
def test_zarr_python_arrays(tmp_path, pool, kind, chunk_size):
    """Chunks of the zarr inner chunk's size are carried (fast path) where they can be;
    others are decoded and cut."""
    data = volume_data((40, 50, 70), "uint8")  # z, y, x
    src = tmp_path / "src.zarr"
    zarr_python_array(src, data, chunks=(16, 16, 16) if "sharded" in kind else (20, 25, 35),
                      shards=(32, 32, 32) if "sharded" in kind else None,
                      zarr_format=2 if kind == "v2" else 3,
                      compressor="gzip" if "gzip" in kind else "zstd")
    stats = ngshard.convert(src, tmp_path / "out", executor=pool, progress=False,
                            chunk_size=chunk_size)
    assert stats["skipped"] == 0 and stats["run"] == stats["tasks"] >= 1
    got, domain = read_precomputed(tmp_path / "out")
    np.testing.assert_array_equal(got, as_xyzc(data, "zyx"))
    doc = info(tmp_path / "out")
    assert doc["type"] == "image" and doc["scales"][0]["encoding"] == "raw"
    assert "sharding" in doc["scales"][0]
    assert not (tmp_path / "out" / ".ngshard-convert").exists()


def test_tensorstore_sharded_labels_unsharded_output(tmp_path, pool):
    data = volume_data((24, 40, 36), "uint64", seed=1)
    src = tmp_path / "ts.zarr"
    tensorstore_array(src, data, chunks=(8, 8, 8), shards=(16, 16, 16), index_location="start")
    ngshard.convert(src, tmp_path / "out", executor=pool, progress=False, sharding="none",
                    chunk_size=(16, 16, 8))
    got, _ = read_precomputed(tmp_path / "out")
    np.testing.assert_array_equal(got, as_xyzc(data, "zyx"))
    doc = info(tmp_path / "out")
    assert doc["type"] == "segmentation"
    assert doc["scales"][0]["encoding"] == "compressed_segmentation"
    assert "sharding" not in doc["scales"][0]


@pytest.mark.parametrize("version", ["0.4", "0.5"])
def test_ome_multiscale_multichannel(tmp_path, pool, version):
    fine = volume_data((3, 20, 48, 40), "uint8", seed=2)  # c, z, y, x
    coarse = np.ascontiguousarray(fine[:, ::2, ::2, ::2])
    src = tmp_path / "ome.zarr"
    ome_group(src, [fine, coarse], version=version, chunks=(3, 8, 16, 16),
              shards=(3, 16, 32, 32),
              scales=[[1, 0.04, 0.008, 0.008], [1, 0.08, 0.016, 0.016]])
    ngshard.convert(src, tmp_path / "out", executor=pool, progress=False)
    doc = info(tmp_path / "out")
    assert doc["num_channels"] == 3 and len(doc["scales"]) == 2
    assert doc["scales"][0]["resolution"] == pytest.approx([8, 8, 40])
    assert doc["scales"][1]["resolution"] == pytest.approx([16, 16, 80])
    for i, level in enumerate([fine, coarse]):
        got, _ = read_precomputed(tmp_path / "out", i)
        np.testing.assert_array_equal(got, as_xyzc(level, "czyx"))


def test_axes_override_and_dimension_names(tmp_path, pool):
    data = volume_data((30, 20, 10), "uint16", seed=3)  # x, y, z
    named = tmp_path / "named.zarr"
    zarr_python_array(named, data, chunks=(16, 16, 16), dimension_names=["x", "y", "z"])
    ngshard.convert(named, tmp_path / "a", executor=pool, progress=False)
    np.testing.assert_array_equal(read_precomputed(tmp_path / "a")[0], as_xyzc(data, "xyz"))
    bare = tmp_path / "bare.zarr"
    zarr_python_array(bare, data, chunks=(16, 16, 16))
    ngshard.convert(bare, tmp_path / "b", executor=pool, progress=False, axes="xyz")
    np.testing.assert_array_equal(read_precomputed(tmp_path / "b")[0], as_xyzc(data, "xyz"))


def test_downsample_adds_scales(tmp_path, pool):
    data = volume_data((32, 64, 64), "uint64", seed=4)
    src = tmp_path / "labels.zarr"
    zarr_python_array(src, data, chunks=(16, 32, 32), shards=(32, 64, 64))
    ngshard.convert(src, tmp_path / "out", executor=pool, progress=False, downsample=True)
    doc = info(tmp_path / "out")
    sizes = [s["size"] for s in doc["scales"]]
    assert sizes[:2] == [[64, 64, 32], [32, 32, 16]] and sizes[-1] == [32, 32, 16]
    got, _ = read_precomputed(tmp_path / "out", 1)
    # the most frequent label of each 2x2x2 block (the smallest on ties)
    blocks = as_xyzc(data, "zyx").reshape(32, 2, 32, 2, 16, 2, 1).transpose(
        0, 2, 4, 6, 1, 3, 5).reshape(32, 32, 16, 1, 8)
    counts = (blocks[..., :, None] == blocks[..., None, :]).sum(-1)
    best = np.where(counts == counts.max(-1, keepdims=True), blocks, np.uint64(2**64 - 1))
    np.testing.assert_array_equal(got, best.min(-1))


def test_fast_path_carries_gzip_streams(tmp_path, pool):
    data = volume_data((48, 40, 72), "uint8", seed=5)  # edges in every axis
    src = tmp_path / "gz.zarr"
    zarr_python_array(src, data, chunks=(16, 16, 16), shards=(32, 32, 32), compressor="gzip")
    ngshard.convert(src, tmp_path / "out", executor=pool, progress=False)
    got, _ = read_precomputed(tmp_path / "out")
    np.testing.assert_array_equal(got, as_xyzc(data, "zyx"))
    assert info(tmp_path / "out")["scales"][0]["sharding"]["data_encoding"] == "gzip"
    # an interior chunk's gzip stream is in the precomputed shard as zarr stored it
    stream = bytes(ngshard.zarr.open_array(src).encoded().get(np.array([[1, 1, 1]]))[0])
    shards = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*.shard"))
    assert stream[:2] == b"\x1f\x8b" and stream in shards


def test_chunks_of_zeros_are_not_stored(tmp_path, pool):
    """Zero is precomputed's fill value: all-zero chunks are left out (they read as 0)."""
    data = volume_data((16, 16, 64), "uint8", seed=6)
    data[:, :, :32] = 0  # the first two of four 16^3 chunks along x
    src = tmp_path / "src.zarr"
    zarr_python_array(src, data, chunks=(16, 16, 16))
    stats = ngshard.convert(src, tmp_path / "out", executor=pool, progress=False,
                            sharding="none")
    key = info(tmp_path / "out")["scales"][0]["key"]
    assert sorted(p.name for p in (tmp_path / "out" / key).iterdir()) == [
        "32-48_0-16_0-16", "48-64_0-16_0-16"]
    assert stats["chunks"] == 2
    np.testing.assert_array_equal(read_precomputed(tmp_path / "out")[0], as_xyzc(data, "zyx"))


def test_time_axis(tmp_path, pool):
    """One time point converts (the axis dropped); several are refused, naming the axis."""
    data = volume_data((1, 2, 8, 16, 24), "uint8", seed=8)  # t, c, z, y, x
    src = tmp_path / "t1.zarr"
    zarr_python_array(src, data, chunks=(1, 2, 8, 8, 8))
    ngshard.convert(src, tmp_path / "out", executor=pool, progress=False, axes="tczyx")
    np.testing.assert_array_equal(read_precomputed(tmp_path / "out")[0],
                                  as_xyzc(data[0], "czyx"))
    src = tmp_path / "t2.zarr"
    zarr_python_array(src, np.concatenate([data, data]), chunks=(1, 2, 8, 8, 8))
    with pytest.raises(ngshard.SpecError, match="time axis of 2"):
        ngshard.convert(src, tmp_path / "out2", executor=pool, progress=False, axes="tczyx")


def test_chosen_levels(tmp_path, pool):
    fine = volume_data((16, 32, 32), "uint8", seed=9)
    coarse = np.ascontiguousarray(fine[::2, ::2, ::2])
    ome_group(tmp_path / "g.zarr", [fine, coarse], axes="zyx", chunks=(8, 16, 16))
    ngshard.convert(tmp_path / "g.zarr", tmp_path / "out", executor=pool, progress=False,
                    scales=[1])
    doc = info(tmp_path / "out")
    assert [s["size"] for s in doc["scales"]] == [[16, 16, 8]]
    np.testing.assert_array_equal(read_precomputed(tmp_path / "out")[0], as_xyzc(coarse, "zyx"))
    with pytest.raises(ngshard.SpecError, match="scales"):
        ngshard.convert(tmp_path / "g.zarr", tmp_path / "o2", executor=pool, progress=False,
                        scales=[2])


def test_source_over_http(http_server, tmp_path, pool):
    """An OME-Zarr group served over HTTP (a public bucket's case), read with byte ranges."""
    data = volume_data((3, 16, 32, 48), "uint8", seed=10)
    ome_group(http_server.root / "em.zarr", [data], chunks=(3, 8, 16, 16), shards=(3, 16, 32, 32))
    ngshard.convert(f"{http_server.base}/em.zarr", tmp_path / "out", executor=pool,
                    progress=False)
    np.testing.assert_array_equal(read_precomputed(tmp_path / "out")[0], as_xyzc(data, "czyx"))
    assert any(rng for _, _, rng in http_server.requests)  # inner chunks read by range


@pytest.mark.parametrize("chunk", [16, 8], ids=["fast-path", "decoding"])
def test_scattered_murmurhash_shards(tmp_path, pool, chunk):
    """A spec whose shards are no boxes: tasks carry their chunks (grouped while planning),
    each shard holds its own chunks only; tensorstore reads the result."""
    data = volume_data((40, 50, 70), "uint8")
    zarr_python_array(tmp_path / "src.zarr", data, chunks=(16, 16, 16))
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0,
            "hash": "murmurhash3_x86_128", "minishard_bits": 1, "shard_bits": 3,
            "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    stats = ngshard.convert(tmp_path / "src.zarr", tmp_path / "out", executor=pool,
                            progress=False, chunk_size=(chunk,) * 3, sharding=spec)
    grid = [-(-n // chunk) for n in data.shape]
    nonzero = sum(data[z * chunk:(z + 1) * chunk, y * chunk:(y + 1) * chunk,
                       x * chunk:(x + 1) * chunk].any()
                  for z in range(grid[0]) for y in range(grid[1]) for x in range(grid[2]))
    assert stats["tasks"] == 8 and stats["chunks"] == nonzero
    np.testing.assert_array_equal(read_precomputed(tmp_path / "out")[0], as_xyzc(data, "zyx"))
