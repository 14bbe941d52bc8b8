"""Hostile mesh data: manifests whose counts or sizes overrun, fragment ranges outside the
shard's data region or past a fragment file's end, Draco bytes that do not decode, legacy
fragments that overrun: CorruptDataError naming the segment, memory bounded by the value."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import ngshard
from ngshard.layers.mesh_codec import Manifest, decode_legacy, encode_legacy

pytest.importorskip("DracoPy")
from meshdata import lods  # noqa: E402

ITEMS = {3: lods(1), 2**63 + 9: lods(2)}


def manifest_bytes(lod_count=1, fragments=(1,), sizes=None) -> bytes:
    head = np.array([1, 1, 1, 0, 0, 0], "<f4").tobytes() + np.array([lod_count], "<u4").tobytes()
    body = np.ones(lod_count, "<f4").tobytes() + np.zeros(3 * lod_count, "<f4").tobytes()
    body += np.array(fragments, "<u4").tobytes()
    for n in fragments:
        body += np.zeros(3 * n, "<u4").tobytes() + np.array(sizes or [10] * n, "<u4").tobytes()
    return head + body


@pytest.mark.parametrize("value, says", [
    (b"\x00" * 27, "shorter than its 28-byte header"),
    (manifest_bytes(1, (1,))[:24] + np.array([2**31], "<u4").tobytes() + b"\x00" * 40,
     "claims 2147483648 levels of detail"),
    (manifest_bytes(1, (1,))[:44] + np.array([2**30], "<u4").tobytes() + b"\x00" * 16,
     "claims 1073741824 fragments"),
    (manifest_bytes(1, (1,)) + b"\x00", "holds 65 bytes"),
])
def test_manifests_that_overrun(value, says):
    with pytest.raises(ngshard.CorruptDataError, match=says):
        Manifest.from_bytes(value, "segment 5")


@pytest.fixture
def layers(tmp_path):
    ngshard.write_meshes(tmp_path / "s", ITEMS, durable=False)
    ngshard.write_meshes(tmp_path / "u", ITEMS, sharding=None, durable=False)
    return tmp_path


def test_fragment_sizes_past_the_data(layers):
    # sharded: a manifest claiming more fragment bytes than lie before it in the shard
    store = ngshard.open(layers / "s").kv
    k = 3
    m = Manifest.from_bytes(store[k], "x")
    m.fragment_sizes[0] = m.fragment_sizes[0] + np.uint32(10**6)
    path = layers / "s2"
    shutil.copytree(layers / "s", path)
    shard = next(path.glob("*.shard"))
    blob = shard.read_bytes()
    old = store[k]
    assert blob.count(old) == 1
    shard.write_bytes(blob.replace(old, m.to_bytes()))
    with pytest.raises(ngshard.CorruptDataError, match="key 3: bytes .* not in the data region"):
        ngshard.open(path).get(3)
    # unsharded: the fragment file ends before the sizes say
    (layers / "u" / "3").write_bytes((layers / "u" / "3").read_bytes()[:-5])
    with pytest.raises(ngshard.CorruptDataError, match="fragment data of segment 3 ends"):
        ngshard.open(layers / "u").get(3, lod=-1)  # the last LOD: the bytes cut off


def test_draco_bytes_that_do_not_decode(layers):
    path = layers / "u" / str(2**63 + 9)
    data = bytearray(path.read_bytes())
    data[:5] = b"XXXXX"  # the first fragment's Draco magic
    path.write_bytes(bytes(data))
    with pytest.raises(ngshard.CorruptDataError,
                       match=rf"segment {2**63 + 9} LOD 0 fragment 0: Draco fragment does not"):
        ngshard.open(layers / "u").get(2**63 + 9)


def test_lod_out_of_range_and_missing(layers):
    layer = ngshard.open(layers / "s")
    with pytest.raises(ValueError, match="has 3 levels of detail, not 5"):
        layer.get(3, lod=5)
    with pytest.raises(KeyError):
        layer.get(4)


@pytest.mark.parametrize("value, says", [
    (b"\x01", "has no vertex count"),
    (np.array([2**31], "<u4").tobytes(), "claims 2147483648 vertices"),
    (encode_legacy(np.zeros((2, 3)), [[0, 1, 2]]), "naming vertex 2 of 2"),
    (encode_legacy(np.zeros((3, 3)), [[0, 1, 2]]) + b"\x00" * 4, "whole triangles"),
])
def test_legacy_fragments_that_overrun(value, says):
    with pytest.raises(ngshard.CorruptDataError, match=says):
        decode_legacy(value, "segment 5")
