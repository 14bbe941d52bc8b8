"""Interoperability with the peers: arrays written by zarr-python 3 and tensorstore's zarr3
and zarr drivers (sharded with the index at the start and the end, crc32c, gzip, zstd, blosc,
transpose, big-endian, nested sharding, partial and empty shards, fill values, v2 arrays) read
by ngshard value for value; arrays written by ngshard read by both peers."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import tensorstore as ts
import zarr
from peers import PEER_TIMEOUT
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ShardingCodec, TransposeCodec, ZstdCodec

import ngshard
from ngshard.zarr import create_array, open_array

RNG = np.random.default_rng(7)


def sample(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return RNG.integers(0, 2, shape).astype(bool)
    if dtype.kind == "c":
        return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)
    if dtype.kind == "f":
        return RNG.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def region(shape):
    """A box leaving parts of the array (whole shards, parts of others) unwritten."""
    return tuple(slice(n // 4, max(n // 4 + 1, n - n // 3)) for n in shape)


def ts_read(path, driver="zarr3") -> np.ndarray:
    store = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(path)}},
                    open=True).result(timeout=PEER_TIMEOUT)
    return store.read().result(timeout=PEER_TIMEOUT)


def equal(a, b) -> None:
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --- zarr-python writes, ngshard reads ----------------------------------------------------------

PY_CASES = {
    "sharded zstd uint16": dict(dtype="uint16", chunks=(3, 4), shards=(6, 8),
                                compressors=[ZstdCodec(level=3)]),
    "sharded gzip int16 fill": dict(dtype="int16", chunks=(3, 4), shards=(6, 8),
                                    compressors=[GzipCodec(level=5)], fill_value=-3),
    "sharded blosc float32 NaN": dict(dtype="float32", chunks=(2, 5), shards=(4, 10),
                                      compressors=[BloscCodec(cname="lz4")],
                                      fill_value=float("nan")),
    "sharded raw bool": dict(dtype="bool", chunks=(4, 4), shards=(8, 8), compressors=None),
    "sharded complex64 big-endian": dict(dtype="complex64", chunks=(3, 3), shards=(6, 6),
                                         serializer=BytesCodec(endian="big"), compressors=None),
    "sharded float16 -inf": dict(dtype="float16", chunks=(5, 2), shards=(5, 4),
                                 fill_value=float("-inf")),
    "unsharded uint64 default": dict(dtype="uint64", chunks=(4, 3)),
    "unsharded int8 v2 keys /": dict(dtype="int8", chunks=(4, 3),
                                     chunk_key_encoding={"name": "v2", "separator": "/"}),
    "unsharded float64 v2 keys .": dict(dtype="float64", chunks=(4, 3), fill_value=1.5,
                                        chunk_key_encoding={"name": "v2", "separator": "."}),
    "unsharded uint32 default .": dict(dtype="uint32", chunks=(5, 5),
                                       chunk_key_encoding={"name": "default",
                                                           "separator": "."}),
    "unsharded transpose": dict(dtype="int32", chunks=(4, 5), filters=[TransposeCodec(
        order=(1, 0))]),
}


@pytest.mark.parametrize("case", PY_CASES)
def test_zarr_python_writes_ngshard_reads(tmp_path, case):
    options = dict(PY_CASES[case])
    shape = (13, 19)
    z = zarr.create_array(tmp_path / "a.zarr", shape=shape, **options)
    box = region(shape)
    z[box] = sample(z[box].shape, options["dtype"])
    arr = open_array(tmp_path / "a.zarr")
    assert arr.shape == shape and arr.dtype == np.dtype(options["dtype"])
    assert arr.chunks == options["chunks"] and arr.shards == options.get("shards")
    expected = z[...]
    equal(arr[...], expected)
    equal(arr[2:11:3, ::-2], expected[2:11:3, ::-2])
    fill = options.get("fill_value", 0)
    assert np.array_equal(arr.fill_value, fill, equal_nan=True)


def test_zarr_python_index_at_start_and_nested_sharding(tmp_path):
    inner = ShardingCodec(chunk_shape=(2, 2), codecs=[BytesCodec(), GzipCodec()])
    for name, serializer in [
            ("start", ShardingCodec(chunk_shape=(4, 4), codecs=[BytesCodec(), ZstdCodec()],
                                    index_location="start")),
            ("nested", ShardingCodec(chunk_shape=(4, 4), codecs=[inner]))]:
        z = zarr.create_array(tmp_path / name, shape=(10, 13), chunks=(8, 8), dtype="uint16",
                              serializer=serializer, compressors=None)
        z[1:9, 3:] = sample((8, 10), "uint16")
        arr = open_array(tmp_path / name)
        assert arr.chunks == (4, 4) and arr.shards == (8, 8)
        equal(arr[...], z[...])


V2_CASES = {
    "gzip C": dict(dtype="<u2", compressors=[{"id": "gzip", "level": 1}]),
    "zlib F": dict(dtype="<i4", order="F", compressors=[{"id": "zlib", "level": 1}]),
    "zstd big-endian": dict(dtype=">f8", compressors=[{"id": "zstd", "level": 1}],
                            fill_value=float("nan")),
    "blosc /": dict(dtype="<u1", compressors=[{"id": "blosc", "cname": "zstd", "clevel": 3,
                                               "shuffle": 2}],
                    chunk_key_encoding={"name": "v2", "separator": "/"}),
    "raw F bool": dict(dtype="|b1", order="F", compressors=None),
    "fill null": dict(dtype="<f4", compressors=None, fill_value=None),
}


@pytest.mark.parametrize("case", V2_CASES)
def test_zarr_python_v2_arrays(tmp_path, case):
    import numcodecs

    options = dict(V2_CASES[case])
    options["compressors"] = [numcodecs.get_codec(c) for c in options["compressors"] or []]
    options["compressors"] = options["compressors"] or None
    z = zarr.create_array(tmp_path / "v2", shape=(11, 9), chunks=(4, 3), zarr_format=2,
                          **options)
    box = region(z.shape)
    z[box] = sample(z[box].shape, options["dtype"])
    arr = open_array(tmp_path / "v2")
    assert arr.zarr_format == 2 and arr.shards is None
    equal(arr[...], z[...])
    equal(arr[...], ts_read(tmp_path / "v2", "zarr"))


TS_CODECS = {
    "index start, big-endian gzip": [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 3, 2], "index_location": "start",
        "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "gzip"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                         {"name": "crc32c"}]}}],
    "transpose inside shards": [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 3, 2],
        "codecs": [{"name": "transpose", "configuration": {"order": [2, 0, 1]}},
                   {"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "zstd", "configuration": {"level": 1}}]}}],
    "index without crc32c, blosc": [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 3, 2], "index_codecs": [{"name": "bytes",
                                                     "configuration": {"endian": "big"}}],
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3,
                                                       "shuffle": "bitshuffle",
                                                       "typesize": 4}}]}}],
    "nested sharding": [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 6, 4],
        "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [1, 3, 2]}}]
        }}],
    "unsharded transpose F crc32c": [
        {"name": "transpose", "configuration": {"order": [2, 1, 0]}},
        {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
    "sharding after transpose": [
        {"name": "transpose", "configuration": {"order": [1, 0, 2]}},
        {"name": "sharding_indexed", "configuration": {"chunk_shape": [3, 2, 2]}}],
}


@pytest.mark.parametrize("case", TS_CODECS)
def test_tensorstore_writes_ngshard_reads(tmp_path, case):
    shape, grid = (7, 11, 9), [4, 6, 4]
    if case == "sharding after transpose":
        grid = [4, 6, 4]
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path)},
                     "metadata": {"shape": list(shape), "data_type": "float32",
                                  "chunk_grid": {"name": "regular",
                                                 "configuration": {"chunk_shape": grid}},
                                  "codecs": TS_CODECS[case], "fill_value": 2.5}},
                    create=True).result(timeout=PEER_TIMEOUT)
    box = region(shape)
    data = sample(store[box].shape, "float32")
    store[box].write(data).result(timeout=PEER_TIMEOUT)
    expected = np.full(shape, 2.5, np.float32)
    expected[box] = data
    arr = open_array(tmp_path)
    equal(arr[...], expected)
    equal(arr[1:6, ::3, 4], expected[1:6, ::3, 4])


# --- ngshard writes, the peers read -------------------------------------------------------------

NG_CASES = {
    "sharded zstd uint8": dict(dtype="uint8", chunks=(4, 4, 2), shards=(8, 8, 4)),
    "sharded gzip index start": dict(dtype="uint16", chunks=(4, 2, 3), shards=(4, 4, 6),
                                     index_location="start", codecs=[
                                         {"name": "bytes", "configuration": {"endian": "little"}},
                                         {"name": "gzip", "configuration": {"level": 1}}]),
    "sharded big-endian float64 NaN": dict(dtype="float64", chunks=(3, 3, 3),
                                           shards=(6, 6, 3), fill_value=float("nan"), codecs=[
                                               {"name": "bytes",
                                                "configuration": {"endian": "big"}}]),
    "sharded blosc int32": dict(dtype="int32", chunks=(4, 4, 4), shards=(8, 8, 4), codecs=[
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                            "shuffle": "shuffle", "typesize": 4,
                                            "blocksize": 0}}]),
    "sharded transpose complex128": dict(dtype="complex128", chunks=(2, 4, 3),
                                         shards=(4, 8, 3), codecs=[
                                             {"name": "transpose",
                                              "configuration": {"order": [2, 1, 0]}},
                                             {"name": "bytes",
                                              "configuration": {"endian": "little"}}]),
    "unsharded gzip bool": dict(dtype="bool", chunks=(4, 5, 3), codecs=[
        {"name": "bytes"}, {"name": "gzip", "configuration": {"level": 1}}]),
    "unsharded crc32c int64": dict(dtype="int64", chunks=(5, 5, 5), fill_value=-1, codecs=[
        {"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]),
}


@pytest.mark.parametrize("case", NG_CASES)
def test_ngshard_writes_peers_read(tmp_path, case):
    options = dict(NG_CASES[case])
    shape = (9, 13, 7)
    arr = create_array(tmp_path / "a", shape, dimension_names=["z", "y", "x"],
                       attributes={"note": case}, **options)
    fill = options.get("fill_value", 0)
    model = np.full(shape, fill, options["dtype"])
    box = region(shape)
    model[box] = sample(model[box].shape, options["dtype"])
    arr[box] = model[box]
    model[0, 0, 0] = arr[0, 0, 0] = model[1, 1, 1]  # a partial write into a stored shard
    model[3:5, :, 2] = arr[3:5, :, 2] = model[3:5, :, 3]
    for read in (lambda: zarr.open_array(tmp_path / "a")[...], lambda: ts_read(tmp_path / "a"),
                 lambda: open_array(tmp_path / "a")[...]):
        equal(read(), model)
    z = zarr.open_array(tmp_path / "a")
    assert z.attrs["note"] == case and tuple(z.metadata.dimension_names) == ("z", "y", "x")
    stored = open_array(tmp_path / "a")
    assert stored.dimension_names == ("z", "y", "x")
    assert np.array_equal(stored.fill_value, fill, equal_nan=True)


def test_empty_chunks_are_left_out_and_empty_shards_deleted(tmp_path):
    arr = create_array(tmp_path / "a", (16, 16), "uint8", chunks=(4, 4), shards=(8, 8))
    arr[...] = 1
    arr[0:4, 0:4] = 0  # one inner chunk back to the fill value
    index = arr.encoded().reader.indices(["c/0/0"])[0][1]
    assert index.empty.sum() == 1 and index.empty[0]
    assert sorted(p.name for p in (tmp_path / "a" / "c").iterdir()) == ["0", "1"]
    arr[8:, 8:] = 0  # a whole shard back to the fill value: deleted
    assert not (tmp_path / "a" / "c" / "1" / "1").exists()
    assert (tmp_path / "a" / "c" / "1" / "0").exists()
    z = zarr.open_array(tmp_path / "a")[...]
    expected = np.ones((16, 16), np.uint8)
    expected[:4, :4] = expected[8:, 8:] = 0
    equal(z, expected)


def test_inner_chunks_in_zarr_order_and_index_layout(tmp_path):
    """A whole shard written by ngshard is byte for byte what tensorstore writes for it:
    inner chunks in C order of their grid positions (array axis 0 slowest), then the index
    (zarr-python lays chunks out in Morton order instead: its bytes differ, its index too)."""
    data = sample((8, 8), "uint16")
    ours = create_array(tmp_path / "ours", (8, 8), "uint16", (4, 2), shards=(8, 8), codecs=[
        {"name": "bytes", "configuration": {"endian": "little"}}])
    ours[...] = data
    theirs = ts.open({"driver": "zarr3", "kvstore": {"driver": "file",
                                                     "path": str(tmp_path / "theirs")},
                      "metadata": {"shape": [8, 8], "data_type": "uint16",
                                   "chunk_grid": {"name": "regular",
                                                  "configuration": {"chunk_shape": [8, 8]}},
                                   "codecs": [{"name": "sharding_indexed", "configuration": {
                                       "chunk_shape": [4, 2]}}]}}, create=True
                     ).result(timeout=PEER_TIMEOUT)
    theirs.write(data).result(timeout=PEER_TIMEOUT)
    assert (tmp_path / "ours/c/0/0").read_bytes() == (tmp_path / "theirs/c/0/0").read_bytes()


def test_resize_is_what_the_peers_read(tmp_path):
    arr = create_array(tmp_path / "a", (10, 10), "int16", (4, 4), shards=(8, 8),
                       fill_value=7)
    arr[...] = np.arange(100, dtype=np.int16).reshape(10, 10)
    arr.resize((6, 5))  # inside edge chunks: the stale part stays stored, past the edge
    arr.resize((12, 9))  # and must not come back
    expected = np.full((12, 9), 7, np.int16)
    expected[:6, :5] = np.arange(100).reshape(10, 10)[:6, :5]
    equal(arr[...], expected)
    equal(zarr.open_array(tmp_path / "a")[...], expected)
    equal(ts_read(tmp_path / "a"), expected)
    assert json.loads((tmp_path / "a/zarr.json").read_text())["shape"] == [12, 9]


def test_encoded_chunks(tmp_path):
    src = create_array(tmp_path / "src", (10, 12), "uint16", (4, 4), shards=(8, 8), codecs=[
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "gzip", "configuration": {"level": 1}}])
    data = sample((10, 12), "uint16")
    src[...] = data
    src[:4, :4] = 0
    enc = src.encoded()
    assert enc.encoding == "gzip C <u2" and enc.chunks == (4, 4) and enc.grid_shape == (3, 3)
    assert not enc.clipped_edges
    assert enc.where((2, 1)).endswith("src/c/1/0 inner chunk at (2, 1)")  # shard (1, 0)
    positions = enc.list_positions()
    assert len(positions) == 8 and (0, 0) not in set(map(tuple, positions.tolist()))
    dst = create_array(tmp_path / "dst", (10, 12), "uint16", (4, 4), shards=(4, 12),
                       codecs=src.inner_codecs)
    out = dst.encoded()
    blobs = enc.get(positions)
    out.put(positions, blobs)
    assert out.get(positions[:1]) == blobs[:1]  # staged puts read back
    out.commit()
    equal(zarr.open_array(tmp_path / "dst")[...], src[...])
    equal(open_array(tmp_path / "dst").encoded().list_positions(), positions)
    assert enc.get(np.array([[0, 0]])) == [None]
    raw = create_array(tmp_path / "raw", (4, 4), ">u4", (4, 4), codecs=[
        {"name": "bytes", "configuration": {"endian": "big"}}])
    assert raw.encoded().encoding == "raw C >u4"
    blosc = create_array(tmp_path / "b", (4, 4), "u1", (4, 4), codecs=NG_CASES[
        "sharded blosc int32"]["codecs"])
    assert blosc.encoded().encoding == ""
    assert math.prod(enc.chunk_box(np.array([[2, 2]]))[1][0]) == 10 * 12


def test_lazy_import():
    import subprocess
    import sys

    code = ("import ngshard, sys; ngshard.zarr.open_array; "
            "assert 'zarr' not in sys.modules and 'numcodecs' not in sys.modules, "
            "sorted(m for m in sys.modules if 'zarr' in m or 'numcodecs' in m)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=PEER_TIMEOUT)
    assert ngshard.zarr.create_array is create_array
