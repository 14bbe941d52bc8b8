"""Hostile skeleton values: CorruptDataError naming the segment, nothing allocated beyond
the value's size."""

from __future__ import annotations

import numpy as np
import pytest

import ngshard
from ngshard.layers.skeleton_codec import VertexAttribute, decode_skeleton, encode_skeleton

RADIUS = [VertexAttribute("radius", "float32", 1)]


def good(n=4, m=3):
    v = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
    e = np.stack([np.arange(m), np.arange(1, m + 1)], axis=1) % max(n, 1)
    return encode_skeleton(v, e, {"radius": np.ones(n)}, RADIUS)


@pytest.mark.parametrize("value, says", [
    (b"", "shorter than its 8-byte header"),
    (b"\x01\x00\x00", "shorter than its 8-byte header"),
    (np.array([2**32 - 1, 2**32 - 1], "<u4").tobytes(), "claims 4294967295 vertices"),
    (np.array([3, 0], "<u4").tobytes() + b"\x00" * 12, "holds 20 bytes"),
    (good()[:-1], "holds"),
    (good() + b"\x00", "holds"),
])
def test_counts_that_do_not_fit_the_value(value, says):
    with pytest.raises(ngshard.CorruptDataError, match=says) as e:
        decode_skeleton(value, RADIUS, "segment 5")
    assert "segment 5" in str(e.value)


def test_edges_naming_missing_vertices():
    value = bytearray(good())
    value[8 + 12 * 4: 8 + 12 * 4 + 4] = np.array([4], "<u4").tobytes()  # first edge -> 4
    with pytest.raises(ngshard.CorruptDataError, match=r"edge 0 \[4, 1\] names a vertex"):
        decode_skeleton(bytes(value), RADIUS, "segment 5")


def test_a_value_without_its_attributes_reads_without_them():
    """cloud-volume writes skeletons without radii as vertices and edges only."""
    v = np.zeros((2, 3), np.float32)
    value = encode_skeleton(v, np.array([[0, 1]]))
    vertices, edges, attrs = decode_skeleton(value, RADIUS, "segment 5")
    assert len(vertices) == 2 and edges.tolist() == [[0, 1]] and attrs == {}


def test_a_corrupt_value_in_a_layer_names_segment_and_shard(tmp_path):
    layer = ngshard.write_skeletons(tmp_path / "sk", {77: (np.zeros((2, 3)), [[0, 1]])},
                                    sharding={"@type": "neuroglancer_uint64_sharded_v1",
                                              "hash": "identity", "preshift_bits": 0,
                                              "minishard_bits": 0, "shard_bits": 0,
                                              "minishard_index_encoding": "raw",
                                              "data_encoding": "raw"})
    shard = tmp_path / "sk" / "0.shard"
    blob = bytearray(shard.read_bytes())
    blob[16:20] = np.array([1 << 30], "<u4").tobytes()  # vertex count of the only value
    shard.write_bytes(bytes(blob))
    layer = ngshard.open(tmp_path / "sk")
    with pytest.raises(ngshard.CorruptDataError, match=r"0\.shard: segment 77: skeleton claims"):
        layer.get(77)
