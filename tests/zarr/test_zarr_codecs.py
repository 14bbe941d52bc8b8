"""The pure layer: property tests of the shard index codec and the codec pipeline (round trips
of random chunks through random pipelines, checked against zarr-python's own codecs), and a
corrupt-input test for every decoder and for the metadata."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngshard.errors import CorruptDataError, MissingDependencyError, NotFoundError, SpecError
from ngshard.zarr import create_array, open_array
from ngshard.zarr.codec_json import parse_pipeline
from ngshard.zarr.dtypes import decode_fill, encode_fill
from ngshard.zarr.metadata import parse_v3
from ngshard.zarr.shard_index import EMPTY, decode_index, encode_index, index_range, lay_out

INDEX = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
DTYPES = ["bool", "int8", "uint16", "int32", "uint64", "float16", "float32", "float64",
          "complex64", "complex128"]


def index_codecs(cps, endian="little", crc=True):
    codecs = [{"name": "bytes", "configuration": {"endian": endian}}] + \
        ([{"name": "crc32c"}] if crc else [])
    return parse_pipeline(codecs, np.dtype(np.uint64), (*cps, 2), "test")


@given(cps=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data(),
       location=st.sampled_from(["start", "end"]), endian=st.sampled_from(["little", "big"]),
       crc=st.booleans())
def test_shard_index_round_trip(cps, data, location, endian, crc):
    cps = tuple(cps)
    n = int(np.prod(cps))
    sizes = np.array(data.draw(st.lists(st.integers(-1, 50), min_size=n, max_size=n)))
    codecs = index_codecs(cps, endian, crc)
    nbytes = 16 * n + 4 * crc
    index = lay_out(sizes, nbytes, location)
    total = nbytes + int(np.maximum(sizes, 0).sum())
    encoded = encode_index(index, codecs, cps)
    assert len(encoded) == nbytes
    start, end = index_range(total, nbytes, location)
    assert end - start == nbytes and (start, end)[location == "end"] == (0, total)[
        location == "end"]
    back = decode_index(encoded, codecs, cps, total, "test")
    np.testing.assert_array_equal(back.table, index.table)
    np.testing.assert_array_equal(back.empty, sizes < 0)
    present, ranges = back.ranges(np.arange(n))
    np.testing.assert_array_equal(ranges[:, 1] - ranges[:, 0], sizes[sizes >= 0])
    # chunks never overlap the index nor each other
    spans = np.sort(np.concatenate([ranges, [[start, end]]]), axis=0)
    assert (spans[1:, 0] >= spans[:-1, 1]).all() and spans[-1, 1] <= total


def pipelines():
    compressors = st.sampled_from([
        [], [{"name": "gzip", "configuration": {"level": 1}}],
        [{"name": "zstd", "configuration": {"level": 3, "checksum": True}}],
        [{"name": "crc32c"}],
        [{"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                                             "shuffle": "shuffle", "typesize": 2}}],
        [{"name": "gzip", "configuration": {"level": 5}}, {"name": "crc32c"}]])
    return st.tuples(st.sampled_from(["little", "big"]), st.booleans(), compressors)


@settings(max_examples=60)
@given(dtype=st.sampled_from(DTYPES), shape=st.lists(st.integers(1, 6), min_size=1,
                                                      max_size=3),
       pipeline=pipelines(), seed=st.integers(0, 2**16), sharded=st.booleans())
def test_pipeline_round_trip_and_zarr_python_agrees(dtype, shape, pipeline, seed, sharded):
    endian, transpose, compressors = pipeline
    dtype, shape = np.dtype(dtype), tuple(shape)
    codecs = ([{"name": "transpose", "configuration": {"order": list(range(len(shape)))[::-1]}}]
              if transpose else []) + [{"name": "bytes", "configuration": {"endian": endian}}]
    codecs += compressors
    if sharded:
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [1] * len(shape), "codecs": codecs, "index_codecs": INDEX}}]
    ours = parse_pipeline(codecs, dtype, shape, "test")
    rng = np.random.default_rng(seed)
    chunk = rng.integers(0, 3, shape).astype(dtype)
    encoded = bytes(ours.encode(chunk, dtype.type(0)))
    np.testing.assert_array_equal(ours.decode(encoded, shape, dtype, 0, "test"), chunk)
    # zarr-python decodes our bytes to the same chunk (the one chunk of an array)
    import tempfile
    from pathlib import Path

    import zarr

    with tempfile.TemporaryDirectory() as tmp:
        meta = {"zarr_format": 3, "node_type": "array", "shape": list(shape),
                "data_type": dtype.name if dtype.kind != "b" else "bool",
                "chunk_grid": {"name": "regular",
                               "configuration": {"chunk_shape": list(shape)}},
                "chunk_key_encoding": {"name": "default"},
                "fill_value": encode_fill(0, dtype),
                "codecs": codecs}
        Path(tmp, "zarr.json").write_text(json.dumps(meta))
        Path(tmp, "c", *["0"] * (len(shape) - 1)).mkdir(parents=True, exist_ok=True)
        Path(tmp, "c", *["0"] * len(shape)).write_bytes(encoded)
        np.testing.assert_array_equal(zarr.open_array(tmp, mode="r")[...], chunk)


@given(value=st.one_of(st.floats(width=32), st.sampled_from(["NaN", "Infinity", "-Infinity",
                                                               "0x7fc00000", "0x3f800000"])))
def test_fill_values_round_trip(value):
    dtype = np.dtype("float32")
    decoded = decode_fill(value, dtype, "test")
    again = decode_fill(encode_fill(decoded, dtype), dtype, "test")
    assert np.array_equal(decoded, again, equal_nan=True)
    if value == "0x3f800000":
        assert decoded == 1.0
    complex_fill = decode_fill([value, 1.0], np.dtype("complex64"), "test")
    assert complex_fill.imag == 1.0


# --- corrupt input --------------------------------------------------------------------------------

@pytest.fixture
def sharded(tmp_path):
    arr = create_array(tmp_path / "a", (8, 8), "uint16", (4, 4), shards=(8, 8), codecs=[
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "gzip", "configuration": {"level": 1}}])
    arr[...] = np.arange(64, dtype=np.uint16).reshape(8, 8)
    return tmp_path / "a"


def damage(path, at: int, new: bytes) -> None:
    data = bytearray(path.read_bytes())
    data[at:at + len(new)] = new
    path.write_bytes(bytes(data))


def test_bad_index_checksum(sharded):
    shard = sharded / "c/0/0"
    damage(shard, len(shard.read_bytes()) - 20, b"\x01")
    with pytest.raises(CorruptDataError, match="c/0/0.*crc32c checksum mismatch"):
        open_array(sharded)[...]


def test_index_pointing_outside_the_shard(sharded):
    shard = sharded / "c/0/0"
    data = shard.read_bytes()
    codecs = index_codecs((2, 2))
    index = decode_index(data[-68:], codecs, (2, 2), len(data), "x")
    table = index.table.copy()
    table[3] = (len(data) - 10, 100)
    shard.write_bytes(data[:-68] + encode_index(type(index)(table), codecs, (2, 2)))
    with pytest.raises(CorruptDataError, match="c/0/0.*entry 3 points outside the shard"):
        open_array(sharded)[...]
    table[3] = (EMPTY, 5)
    shard.write_bytes(data[:-68] + encode_index(type(index)(table), codecs, (2, 2)))
    with pytest.raises(CorruptDataError, match="half empty"):
        open_array(sharded)[...]


def test_shard_shorter_than_its_index(sharded):
    (sharded / "c/0/0").write_bytes(b"tiny")
    with pytest.raises(CorruptDataError, match="c/0/0: 4 bytes, shorter than its shard index"):
        open_array(sharded)[...]


def test_bad_inner_chunk(sharded):
    damage(sharded / "c/0/0", 12, b"\xff\xff\xff\xff")  # inside the first gzip stream
    with pytest.raises(CorruptDataError, match="c/0/0 inner chunk at \\(0, 0\\)"):
        open_array(sharded)[:4, :4]


def test_chunk_of_the_wrong_decoded_size(tmp_path):
    arr = create_array(tmp_path / "a", (4, 4), "uint16", (4, 4), codecs=[
        {"name": "bytes", "configuration": {"endian": "little"}}])
    arr[...] = 1
    (tmp_path / "a/c/0/0").write_bytes(b"\0" * 30)
    with pytest.raises(CorruptDataError, match="c/0/0: 30 bytes, not the 32 of a 4x4 uint16"):
        open_array(tmp_path / "a")[...]


@pytest.mark.parametrize("codec", ["zstd", "blosc", "crc32c", "gzip"])
def test_every_compressor_rejects_damage(tmp_path, codec):
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": codec}]
    arr = create_array(tmp_path / "a", (16, 16), "uint32", (16, 16), codecs=codecs)
    arr[...] = np.arange(256, dtype=np.uint32).reshape(16, 16)
    chunk = tmp_path / "a/c/0/0"
    good = chunk.read_bytes()
    for bad in (good[: len(good) // 2], good[:10] + bytes(x ^ 0x55 for x in good[10:40]) +
                good[40:], b""):
        chunk.write_bytes(bad)
        with pytest.raises(CorruptDataError, match="c/0/0"):
            open_array(tmp_path / "a")[...]


def test_bomb_is_refused(tmp_path):
    arr = create_array(tmp_path / "a", (4, 4), "uint8", (4, 4), codecs=[
        {"name": "bytes"}, {"name": "zstd"}])
    arr[...] = 1
    import zstandard

    (tmp_path / "a/c/0/0").write_bytes(zstandard.ZstdCompressor().compress(b"\0" * (1 << 20)))
    with pytest.raises(CorruptDataError, match="past the 16"):
        open_array(tmp_path / "a")[...]


def doc(**changes):
    base = {"zarr_format": 3, "node_type": "array", "shape": [4, 4], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
            "codecs": [{"name": "bytes"}]}
    base.update(changes)
    return base


@pytest.mark.parametrize("changes, message", [
    (dict(codecs=[{"name": "bytes"}, {"name": "lz4"}]), "unsupported codec 'lz4'"),
    (dict(data_type="r16"), "raw bits"),
    (dict(data_type="string"), "unsupported data type"),
    (dict(fill_value="lots"), "fill value 'lots'"),
    (dict(chunk_grid={"name": "rectilinear"}), "chunk_grid"),
    (dict(codecs=[{"name": "gzip"}]), "before the array -> bytes"),
    (dict(codecs=[{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [3, 2], "codecs": [{"name": "bytes"}],
        "index_codecs": INDEX}}]), "must divide"),
    (dict(codecs=[{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [1, 1], "codecs": [{"name": "bytes"}],
        "index_codecs": INDEX + [{"name": "gzip"}]}}]), "fixed size"),
    (dict(node_type="group"), "not an array"),
    (dict(future={"must_understand": True}), "unknown field 'future'"),
    (dict(shape=[4]), "chunk_shape"),
])
def test_bad_metadata(tmp_path, changes, message):
    (tmp_path / "zarr.json").write_text(json.dumps(doc(**changes)))
    with pytest.raises(SpecError, match=message) as e:
        open_array(tmp_path)
    assert str(tmp_path / "zarr.json") in str(e.value)


def test_missing_and_malformed_metadata(tmp_path):
    with pytest.raises(NotFoundError, match="no zarr.json or .zarray"):
        open_array(tmp_path)
    (tmp_path / "zarr.json").write_text("{not json")
    with pytest.raises(SpecError, match="zarr.json: not valid JSON"):
        open_array(tmp_path)
    parse_v3(doc(future={"must_understand": False}), "ok")  # may be ignored


def test_v2_filters_and_compressors_refused(tmp_path):
    zarray = {"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<u2",
              "compressor": None, "fill_value": 0, "order": "C",
              "filters": [{"id": "delta", "dtype": "<u2"}]}
    (tmp_path / ".zarray").write_text(json.dumps(zarray))
    with pytest.raises(SpecError, match=r"\.zarray: filters are not supported: \['delta'\]"):
        open_array(tmp_path)
    zarray.update(filters=None, compressor={"id": "lzma"})
    (tmp_path / ".zarray").write_text(json.dumps(zarray))
    with pytest.raises(SpecError, match="unsupported compressor"):
        open_array(tmp_path)


def test_blosc_without_numcodecs(tmp_path, monkeypatch):
    import sys

    create_array(tmp_path / "a", (4,), "uint8", (2,), codecs=[
        {"name": "bytes"}, {"name": "blosc", "configuration": {"cname": "lz4"}}])
    monkeypatch.setitem(sys.modules, "numcodecs", None)
    with pytest.raises(MissingDependencyError, match="a/zarr.json: codec blosc.*numcodecs"):
        open_array(tmp_path / "a")


def test_v2_zlib_rejects_damage_and_bombs():
    import zlib

    from ngshard.zarr.codecs import Zlib

    codec = Zlib()
    good = codec.encode(bytes(range(256)) * 4)
    assert codec.decode(good, "c.0", 1024) == bytes(range(256)) * 4
    for bad, message in ((good[: len(good) // 2], "c.0: truncated zlib data"),
                         (b"\x78\x9c" + bytes(x ^ 0x55 for x in good[2:]), "c.0: bad zlib"),
                         (b"", "c.0: truncated zlib data"),
                         (zlib.compress(b"\0" * (1 << 20)), "c.0: zlib data inflates past "
                                                            "the 1024")):
        with pytest.raises(CorruptDataError, match=message):
            codec.decode(bad, "c.0", 1024)
