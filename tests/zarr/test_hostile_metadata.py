"""Hostile zarr metadata: nesting deeper than Python's parser recurses (read as tensorstore
reads it, kept as it was when the metadata is written back), members of the wrong type or
range (SpecError naming the file and the member, never AttributeError or OverflowError),
fill values the oracles refuse, and a grid too large to address (read as both oracles read
it, without allocating by shape)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from peers import PEER_TIMEOUT

import ngshard
from ngshard.errors import SpecError
from ngshard.zarr import open_array

ts = pytest.importorskip("tensorstore")

DEEP = 100_000


def v3(**changes) -> dict:
    doc = {"zarr_format": 3, "node_type": "array", "shape": [6, 6], "data_type": "uint16",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
           "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}
    doc.update(changes)
    return doc


def v2(**changes) -> dict:
    doc = {"zarr_format": 2, "shape": [11, 4], "chunks": [4, 4], "dtype": "<i2",
           "compressor": None, "fill_value": 0, "order": "C", "filters": None}
    doc.update(changes)
    return doc


def ts_read(path, driver="zarr3"):
    spec = {"driver": driver, "kvstore": f"file://{path}/"}
    return ts.open(spec).result(timeout=PEER_TIMEOUT)[...].read().result(timeout=PEER_TIMEOUT)


def deep_attribute(tmp_path):
    a = ngshard.zarr.create_array(tmp_path / "a", shape=(6, 6), dtype="uint16",
                                  chunks=(4, 4))
    a[...] = np.arange(36).reshape(6, 6)
    doc = json.loads((tmp_path / "a" / "zarr.json").read_text())
    text = json.dumps({**doc, "attributes": {"deep": "HERE", "units": "nm"}})
    deep = "[" * DEEP + "]" * DEEP
    (tmp_path / "a" / "zarr.json").write_text(text.replace('"HERE"', deep))
    return tmp_path / "a", deep


def test_an_attribute_nested_100000_deep_reads_as_tensorstore_reads_it(tmp_path):
    path, deep = deep_attribute(tmp_path)
    a = open_array(path)
    np.testing.assert_array_equal(a[...], ts_read(path))
    assert a.attrs["units"] == "nm"
    a.resize((8, 8))  # the metadata written back keeps the deep attribute as it was
    assert deep in "".join((path / "zarr.json").read_text().split())
    assert open_array(path).shape == (8, 8) == ts.open(
        {"driver": "zarr3", "kvstore": f"file://{path}/"}).result(timeout=PEER_TIMEOUT).shape


def test_the_server_starts_beside_deep_metadata(tmp_path):
    path, _ = deep_attribute(tmp_path)
    info = {"@type": "neuroglancer_multiscale_volume", "deep": json.loads("[" * 50 + "]" * 50)}
    (tmp_path / "info").write_text(json.dumps(info)[:-1] + ', "x": ' + "[" * DEEP +
                                   "]" * DEEP + "}")
    with ngshard.serve(tmp_path) as srv:
        assert [layer.path for layer in srv.layers] == ["a"]


@pytest.mark.parametrize("changes, says", [
    (dict(codecs="[" * DEEP + "]" * DEEP), "codec must be a JSON object, got a list"),
    (dict(shape=json.loads("[" * 10 + "]" * 10)), "shape"),
    (dict(chunk_key_encoding={"name": "default", "configuration": []}),
     "chunk_key_encoding.configuration must be a JSON object, got a list"),
    (dict(chunk_key_encoding={"name": "default", "configuration": {"separator": 7}}),
     "separator must be one of"),
    (dict(chunk_grid={"name": "regular", "configuration": "x"}),
     "chunk_grid.configuration must be a JSON object"),
    (dict(chunk_grid={"name": "regular", "configuration": {"chunk_shape": [4, 2**70]}}),
     r"chunk_shape\[1\] must be an integer"),
    (dict(codecs=[{"name": "bytes", "configuration": [1]}]),
     "codec.configuration must be a JSON object"),
    (dict(codecs=[{"name": "transpose", "configuration": {"order": [0, "a"]}},
                  {"name": "bytes"}]), "not a permutation"),
    (dict(codecs=[{"name": "bytes", "configuration": {"endian": "little"}},
                  {"name": "gzip", "configuration": {"level": 2**80}}]),
     "level must be an integer"),
    (dict(codecs=[{"name": "sharding_indexed", "configuration": []}]),
     "must be a JSON object"),
    (dict(shape=[2**63, 6]), r"shape\[0\] must be an integer in"),
    (dict(fill_value=1e300), "fill value 1e\\+300 is not a uint16"),
    (dict(data_type="float32", fill_value=10**400), "is not a float32"),
    (dict(dimension_names=[1, 2]), "dimension_names"),
    (dict(attributes=[]), "attributes must be a JSON object"),
])
def test_members_of_the_wrong_type_or_range(tmp_path, changes, says):
    text = json.dumps(v3(**changes))
    if changes.get("codecs") == "[" * DEEP + "]" * DEEP:
        text = text.replace(json.dumps(changes["codecs"]), changes["codecs"])
    (tmp_path / "zarr.json").write_text(text)
    with pytest.raises(SpecError, match=says) as e:
        open_array(tmp_path)
    assert str(tmp_path / "zarr.json") in str(e.value)


@pytest.mark.parametrize("dtype", ["|i1", "|u1", "<i2", "<u2", "<i4"])
@pytest.mark.parametrize("fill", ["Infinity", "NaN", "AQAAAA==", 1e300, "1"])
def test_integer_fill_values_the_oracles_refuse(tmp_path, dtype, fill):
    """A string is no integer fill value (v2's base64 read "Infinity" as bytes: 30498 for
    int16), nor a number out of range: refused, as tensorstore and zarr-python refuse."""
    (tmp_path / ".zarray").write_text(json.dumps(v2(dtype=dtype, fill_value=fill)))
    with pytest.raises(SpecError, match="fill value"):
        open_array(tmp_path)
    with pytest.raises(Exception):  # noqa: B017 (any error of theirs)
        ts_read(tmp_path, "zarr")


def test_a_grid_too_large_to_address_reads_as_the_oracles_read_it(tmp_path):
    """Shape [11, 2**62] (chunks of 4 x 4: 3 * 2**60 chunks): reads of boxes anywhere in it
    agree with zarr-python (and with tensorstore, which cannot index the last few points);
    writes are refused with SpecError."""
    (tmp_path / ".zarray").write_text(json.dumps(v2(shape=[11, 2**62], fill_value=-3)))
    last = 2**60 - 1
    chunk = np.arange(16, dtype="<i2").reshape(4, 4)
    (tmp_path / f"2.{last}").write_bytes(np.pad(chunk[:3], ((0, 1), (0, 0))).tobytes())
    (tmp_path / "0.0").write_bytes((chunk + 100).tobytes())
    ours = open_array(tmp_path)
    theirs = ts.open({"driver": "zarr", "kvstore": f"file://{tmp_path}/"}).result(
        timeout=PEER_TIMEOUT)
    other = zarr.open_array(tmp_path, mode="r")
    assert ours.shape == theirs.shape == other.shape == (11, 2**62)
    end = 2**62
    for index in [(slice(0, 3), slice(0, 5)), (slice(7, 11), slice(end - 6, end)),
                  (10, slice(end - 3, end)), (slice(None, None, 3), slice(end - 9, end, 2)),
                  (slice(8, 11), [end - 1, 2, end - 4]), (slice(0, 0), slice(0, 2))]:
        want = np.stack([other[index[0], i] for i in index[1]], axis=-1) if \
            isinstance(index[1], list) else other[index]  # zarr's oindex sizes by the axis
        np.testing.assert_array_equal(ours[index], want)
        if index[1] == slice(0, 5):
            np.testing.assert_array_equal(want, theirs[index].read().result(
                timeout=PEER_TIMEOUT))
    with pytest.raises(SpecError, match="too many chunks"):
        ours[0, 0] = 1


@pytest.mark.parametrize("attrs", ["3", "[1]", '"x"'])
def test_a_v2_attributes_file_that_is_no_object_is_named(tmp_path, attrs):
    (tmp_path / ".zarray").write_text(json.dumps(v2()))
    (tmp_path / ".zattrs").write_text(attrs)
    with pytest.raises(SpecError, match=r"\.zattrs: must be a JSON object") as e:
        open_array(tmp_path)
    assert str(tmp_path / ".zattrs") in str(e.value)


def test_a_chunk_past_2_63_bytes_is_a_spec_error(tmp_path):
    """Once numpy's ValueError ("iterator is too large") at open."""
    (tmp_path / ".zarray").write_text(json.dumps(v2(shape=[11, 4], chunks=[2**40, 2**40])))
    with pytest.raises(SpecError, match=r"a chunk of \[1099511627776, 1099511627776\] int16 "
                                        r"passes 2\*\*63 bytes"):
        open_array(tmp_path)
