"""Hostile annotation values: counts that overrun the value raise CorruptDataError naming the
annotation or chunk, before anything the size of the claim is allocated."""

from __future__ import annotations

import numpy as np
import pytest

import ngshard
from ngshard.layers.annotation_codec import (
    PropertySpec,
    Schema,
    decode_multiple,
    decode_single,
)

POINTS = Schema("point", 3, (PropertySpec("size", "float32"),), ("syn",))
LINES = Schema("polyline", 2, (PropertySpec("k", "uint8"),))


def u64(*x):
    return np.array(x, "<u8").tobytes()


def u32(*x):
    return np.array(x, "<u4").tobytes()


@pytest.mark.parametrize("schema, value, says", [
    (POINTS, b"\x01", "shorter than the 8-byte count"),
    (POINTS, u64(2**60) + b"\x00" * 40, "claims 1152921504606846976 annotations"),
    (POINTS, u64(2) + b"\x00" * 16 + u64(1, 2), "should take 56 bytes"),
    (POINTS, u64(1) + b"\x00" * 16 + u64(1) + b"x", "should take 32 bytes"),
    (LINES, u64(1) + u32(2**31) + b"\x00" * 12, "claims 2147483648 points"),
    (LINES, u64(2) + u32(0, 0, 100) + b"\x00" * 12, "polyline 1 claims 100 points"),
])
def test_multiple_encoding_overruns(schema, value, says):
    with pytest.raises(ngshard.CorruptDataError, match=says) as e:
        decode_multiple(schema, value, "spatial0/0.shard: chunk 5")
    assert "chunk 5" in str(e.value)


@pytest.mark.parametrize("value, says", [
    (b"\x00" * 15, "do not fit"),
    (b"\x00" * 16 + u32(2**30), "relationship 'syn' claims 1073741824 ids"),
    (b"\x00" * 16 + u32(1) + u64(9) + b"!", "1 bytes left over"),
    (b"\x00" * 16, "relationship 'syn' starts past the end"),
])
def test_single_encoding_overruns(value, says):
    with pytest.raises(ngshard.CorruptDataError, match=says):
        decode_single(POINTS, value, "by_id/0.shard: annotation 7")


def test_a_corrupt_chunk_in_a_collection_is_named(tmp_path):
    rng = np.random.default_rng(0)
    layer = ngshard.write_annotations(tmp_path / "a", "point", rng.uniform(0, 9, (20, 3)),
                                      sharding=None, durable=False)
    (tmp_path / "a" / "spatial0" / "0_0_0").write_bytes(u64(10**9))
    with pytest.raises(ngshard.CorruptDataError, match=r"spatial0/0_0_0: chunk 0_0_0"):
        layer.query()
    (tmp_path / "a" / "by_id" / "3").write_bytes(b"\x00" * 5)
    with pytest.raises(ngshard.CorruptDataError, match=r"by_id/3: annotation 3"):
        layer.get(3)


def test_bad_info_is_a_spec_error(tmp_path):
    layer = ngshard.write_annotations(tmp_path / "a", "point", np.zeros((2, 3)),
                                      durable=False)
    info = dict(layer.info, annotation_type="circle")
    with pytest.raises(ngshard.SpecError, match="annotation_type must be one of"):
        ngshard.Annotations(layer.storage, info)
    info = dict(layer.info, properties=[{"id": "Bad", "type": "uint8"}])
    with pytest.raises(ngshard.SpecError, match="must match"):
        ngshard.Annotations(layer.storage, info)
    info = dict(layer.info, spatial=[{"key": "s", "grid_shape": [0, 1, 1],
                                      "chunk_size": [1, 1, 1]}])
    with pytest.raises(ngshard.SpecError, match="must be positive"):
        ngshard.Annotations(layer.storage, info)


@pytest.mark.parametrize("change, says", [
    (dict(spatial=[{"key": "s", "grid_shape": [2**32, 2**32, 2], "chunk_size": [1, 1, 1]}]),
     "too many cells"),
    (dict(spatial=[{"key": "s", "grid_shape": [2**63, 1, 1], "chunk_size": [1, 1, 1]}]),
     r"spatial\[0\].grid_shape\[0\] must be an integer"),
    (dict(relationships=[{"id": ["a"], "key": "r"}]), r"relationships\[0\].id must be"),
    (dict(lower_bound=[0, 0, "x"]), r"lower_bound\[2\] must be a finite number"),
    (dict(upper_bound=[0, 0, 1e999]), r"upper_bound\[2\] must be a finite number"),
    (dict(dimensions=[]), "dimensions must be a JSON object"),
    (dict(by_id=[]), "by_id must be a JSON object"),
    (dict(spatial=[{"key": "s", "grid_shape": [1, 1, 1], "chunk_size": [1, 1, 1],
                    "limit": "many"}]), r"spatial\[0\].limit must be an integer"),
])
def test_info_members_of_the_wrong_type_or_range(tmp_path, change, says):
    """Each once a foreign exception (OverflowError for a grid of 2**64 cells, TypeError for
    a relationship id that is a list) or accepted as nonsense."""
    layer = ngshard.write_annotations(tmp_path / "a", "point", np.zeros((2, 3)),
                                      durable=False)
    with pytest.raises(ngshard.SpecError, match=says) as e:
        ngshard.Annotations(layer.storage, dict(layer.info, **change))
    assert "info" in str(e.value)
