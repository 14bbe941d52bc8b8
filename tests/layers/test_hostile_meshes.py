"""Hostile mesh data: manifests whose counts or sizes overrun, fragment ranges outside the
shard's data region or past a fragment file's end, Draco bytes that do not decode, legacy
fragments that overrun: CorruptDataError naming the segment, memory bounded by the value."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard
from ngshard.layers.draco_guard import heads, in_bounds
from ngshard.layers.mesh_codec import (
    Manifest,
    decode_fragment,
    decode_legacy,
    encode_fragment,
    encode_legacy,
)

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
    assert layer.get(4) is None and layer.get(4, lod=5) is None
    with pytest.raises(KeyError):
        layer[4]


@pytest.mark.parametrize("value, says", [
    (b"\x01", "has no vertex count"),
    (np.array([2**31], "<u4").tobytes(), "claims 2147483648 vertices"),
    (encode_legacy(np.zeros((2, 3)), [[0, 1, 2]]), "naming vertex 2 of 2"),
    (encode_legacy(np.zeros((3, 3)), [[0, 1, 2]]) + b"\x00" * 4, "whole triangles"),
])
def test_legacy_fragments_that_overrun(value, says):
    with pytest.raises(ngshard.CorruptDataError, match=says):
        decode_legacy(value, "segment 5")


# --- Draco bombs: counts no fragment of that size holds --------------------------------------

def varint(x: int) -> bytes:
    out = bytearray()
    while True:
        out.append((x & 0x7F) | (0x80 if x >> 7 else 0))
        x >>= 7
        if not x:
            return bytes(out)


def bomb(vertices: int, faces: int, size: int = 240, method: int = 1) -> bytes:
    """A Draco 2.2 mesh header declaring these counts (edgebreaker, or sequential with
    ``method=0``), zeros after it: what the decoder sizes its tables from."""
    head = b"DRACO" + bytes([2, 2, 1, method, 0, 0])
    if method:
        head += b"\x00" + varint(vertices) + varint(faces) + b"\x00" + varint(faces) + b"\x00"
    else:
        head += varint(faces) + varint(vertices) + b"\x00"
    return head + bytes(size - len(head))


def grid(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A flat regular grid: the valence edgebreaker codes it in almost no bytes."""
    x, y = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    v = np.stack([x.ravel(), y.ravel(), np.zeros(n * n)], 1).astype(np.float32)
    i = (np.arange(n - 1)[:, None] * n + np.arange(n - 1)).ravel()
    f = np.concatenate([np.stack([i, i + n, i + 1], 1), np.stack([i + 1, i + n, i + n + 1], 1)])
    return v, f.astype(np.uint32)


def test_the_counts_are_read_from_the_header():
    v, f = grid(20)
    honest = [encode_fragment(v, f, 10, level) for level in (0, 1, 7, 10)]  # sequential, EB
    bombs = [bomb(10**7, 2 * 10**7), bomb(5 * 10**8, 10, method=0),
             bomb(10, 10)[:9] + b"\x00\x80" + bomb(10, 10)[11:],  # the metadata flag
             bomb(10, 10)[:6] + b"\x01" + bomb(10, 10)[7:],  # bitstream 2.1
             bomb(10, 10)[:12] + b"\xff" * 30]  # a varint that never ends
    blobs = honest + bombs
    sizes = np.array([len(b) for b in blobs])
    at = np.cumsum(sizes)
    got = in_bounds(heads(b"".join(blobs), at - sizes, at), sizes)
    assert got.tolist() == [True] * len(honest) + [False] * len(bombs)


def test_an_honest_outlier_decodes_in_the_child():
    """A regular grid of 32,258 faces in a few hundred bytes is past the ratio: it decodes in
    the capped child, to what DracoPy gives in this process."""
    import DracoPy

    v, f = grid(128)
    blob = encode_fragment(v, f, 10)
    assert len(f) > 16 * len(blob) + 4096  # an outlier indeed
    points, faces = decode_fragment(blob, "segment 1 LOD 0 fragment 0")
    direct = DracoPy.decode(blob)
    np.testing.assert_array_equal(points, direct.points)
    np.testing.assert_array_equal(faces, direct.faces)


def test_the_bombs_are_real():
    """Decoded unchecked, a 240-byte fragment claiming 20 million faces makes DracoPy touch
    hundreds of MiB before it fails (in a child, so this test's process stays small)."""
    code = ("import resource, sys, DracoPy\n"
            "try:\n    DracoPy.decode(sys.stdin.buffer.read())\nexcept Exception:\n    pass\n"
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code], input=bomb(10**7, 2 * 10**7),
                         capture_output=True, check=True, timeout=PEER_TIMEOUT).stdout
    assert int(out) > 300 << 10  # KiB


READ_BOMBS = r"""
import resource, sys, ngshard
layer = ngshard.open(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    layer.get_many(layer.keys_array(), lod="all")
except ngshard.CorruptDataError as e:
    print(e)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.parametrize("vertices, faces", [(10**7, 2 * 10**7), (2 * 10**8, 7 * 10**8)])
def test_draco_bombs_raise_in_bounded_memory(layers, vertices, faces):
    """A fragment replaced by a bomb of the same size: CorruptDataError naming the segment,
    LOD and fragment, and the reading process's peak memory does not grow by what the bomb
    claims (hundreds of MiB, or 16 GiB), only by the honest segments' meshes."""
    k = 2**63 + 9
    path = layers / "u" / str(k)
    layer = ngshard.open(layers / "u")
    m = layer.manifests([k])[k]
    size = int(m.fragment_sizes[0][0])
    data = path.read_bytes()
    path.write_bytes(bomb(vertices, faces, size) + data[size:])
    out = subprocess.run([sys.executable, "-c", READ_BOMBS, str(layers / "u")],
                         capture_output=True, text=True, check=True,
                         timeout=PEER_TIMEOUT).stdout.splitlines()
    assert re.search(rf"segment {k} LOD 0 fragment 0: Draco fragment does not decode", out[0])
    assert int(out[1]) < 64 << 10  # KiB of peak growth


READ_ONE = r"""
import resource, sys, ngshard
layer = ngshard.open(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    layer.get(int(sys.argv[2]))
except ngshard.CorruptDataError as e:
    print(e)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


def test_a_fragment_size_past_the_file_costs_what_the_file_holds(layers):
    """An unsharded manifest claiming a fragment of 2**32 - 1 bytes: the read of the
    fragment file is cut at its end, not sized by the claim (it once allocated 4 GiB)."""
    index = layers / "u" / "3.index"
    m = Manifest.from_bytes(index.read_bytes(), "x")
    m.fragment_sizes[0] = np.full_like(m.fragment_sizes[0], 2**32 - 1)
    index.write_bytes(m.to_bytes())
    out = subprocess.run([sys.executable, "-c", READ_ONE, str(layers / "u"), "3"],
                         capture_output=True, text=True, check=True,
                         timeout=PEER_TIMEOUT).stdout.splitlines()
    assert "fragment data of segment 3 ends before byte" in out[0]
    assert int(out[1]) < 64 << 10  # KiB of peak growth


def test_a_legacy_manifest_naming_a_fragment_twice(tmp_path):
    """100,000 names of one fragment in a 1.3 MB manifest once made a mesh 100,000 times the
    fragment (97 MiB of peak memory): a name given twice is damage."""
    layer = ngshard.write_legacy_meshes(tmp_path / "m", {5: (np.eye(3), [[0, 1, 2]])},
                                        durable=False)
    manifest = tmp_path / "m" / "5:0"
    doc = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({"fragments": doc["fragments"] * 3}))
    with pytest.raises(ngshard.CorruptDataError, match=r"5:0: names fragment .* twice"):
        layer.get(5)


def no_points(fragment: bytes) -> bytes:
    """``fragment`` with one byte of its header (the method, or a count of its connectivity)
    changed so that DracoPy decodes it, without error, to no points (``points`` None): a point
    count that disagrees with the connectivity."""
    import DracoPy

    for at in range(8, 40):
        for value in range(256):
            damaged = fragment[:at] + bytes([value]) + fragment[at + 1:]
            try:
                if DracoPy.decode(damaged).points is None:
                    return damaged
            except Exception:  # DracoPy refuses most counts: try the next
                continue
    raise AssertionError("no count of the header decodes to no points")


def test_a_draco_fragment_decoding_to_no_points(layers):
    """A Draco fragment that decodes to a bad point count (no points at all) once raised
    ValueError out of the reader; it is a CorruptDataError naming segment, LOD and
    fragment."""
    k = 2**63 + 9
    path = layers / "u" / str(k)
    layer = ngshard.open(layers / "u")
    size = int(layer.manifests([k])[k].fragment_sizes[0][0])
    data = path.read_bytes()
    path.write_bytes(no_points(data[:size]) + data[size:])
    with pytest.raises(ngshard.CorruptDataError,
                       match=rf"segment {k} LOD 0 fragment 0: Draco fragment does not decode"):
        ngshard.open(layers / "u").get(k)
