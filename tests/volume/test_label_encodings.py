"""compresso, crackle and jxl chunks: round trips through the chunk codec and through volumes,
the refusal at open of an encoding that cannot be decoded here, and damaged or hostile
streams (one CorruptDataError naming the chunk, memory bounded by the chunk)."""

from __future__ import annotations

import json
import struct
import sys

import compresso
import crackle
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import ngshard
from ngshard import CorruptDataError, MissingDependencyError, SpecError
from ngshard.volume.encodings import decode_chunk, encode_chunk

LABELS = ["compresso", "crackle"]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]


@st.composite
def label_chunks(draw):
    dtype = draw(st.sampled_from(UNSIGNED))
    shape = draw(st.tuples(*[st.integers(1, 12)] * 3))
    top = draw(st.sampled_from([1, 3, 2**8 - 1, 2**16 + 5, 2**63 + 9]))
    top = min(top, np.iinfo(dtype).max)
    values = draw(hnp.arrays(np.uint64, shape, elements=st.integers(0, top)))
    return values.astype(dtype)[..., None]


@pytest.mark.parametrize("encoding", LABELS)
@given(chunk=label_chunks())
def test_label_round_trip(encoding, chunk):
    data = encode_chunk(chunk, encoding)
    np.testing.assert_array_equal(decode_chunk(data, encoding, chunk.shape, chunk.dtype), chunk)


@pytest.mark.parametrize("encoding", LABELS)
def test_label_chunks_as_cloudvolume_writes_them(encoding):
    """The package's own stream of the (x, y, z) labels (cloud-volume's chunk) decodes."""
    labels = np.random.default_rng(1).integers(0, 5, (9, 7, 4), dtype=np.uint32)
    module = compresso if encoding == "compresso" else crackle
    data = bytes(module.compress(np.asfortranarray(labels)))
    np.testing.assert_array_equal(decode_chunk(data, encoding, (9, 7, 4, 1), "uint32")[..., 0],
                                  labels)


@given(chunk=hnp.arrays(np.uint8, st.tuples(st.integers(1, 20), st.integers(1, 9),
                                            st.integers(1, 5), st.sampled_from([1, 3]))))
def test_jxl_lossless_round_trip(chunk):
    data = encode_chunk(chunk, "jxl", quality=100)
    np.testing.assert_array_equal(decode_chunk(data, "jxl", chunk.shape, "uint8"), chunk)


def test_jxl_lossy_is_close():
    x, y, z = np.meshgrid(np.arange(32), np.arange(24), np.arange(4), indexing="ij")
    chunk = ((x * 4 + y * 3 + z * 20) % 256).astype(np.uint8)[..., None]
    got = decode_chunk(encode_chunk(chunk, "jxl", quality=90), "jxl", chunk.shape, "uint8")
    assert np.abs(got.astype(int) - chunk).mean() < 3


@pytest.mark.parametrize("encoding,dtype", [("compresso", "uint64"), ("crackle", "uint32"),
                                            ("jxl", "uint8")])
def test_volumes_in_the_new_encodings(tmp_path, encoding, dtype):
    """Written and read through a volume, unsharded and sharded; a label encoding makes a
    segmentation by default."""
    data = (np.arange(30 * 20 * 10) // 7 % 200).astype(dtype).reshape(30, 20, 10, 1)
    for sharding in (None, "auto"):
        path = tmp_path / f"{encoding}-{sharding}"
        with ngshard.create_volume(path, dtype=dtype, shape=(30, 20, 10), chunk_size=(16, 8, 8),
                                   encoding=encoding, sharding=sharding) as vol:
            vol[...] = data
        got = np.asarray(ngshard.open_volume(path))
        if encoding == "jxl":
            assert np.abs(got.astype(int) - data).mean() < 4
        else:
            np.testing.assert_array_equal(got, data)
            assert json.loads((path / "info").read_text())["type"] == "segmentation"


def test_dtypes_and_channels_are_checked():
    for encoding, dtype, channels in [("compresso", "int32", 1), ("crackle", "float32", 1),
                                      ("compresso", "uint32", 2), ("jxl", "uint16", 1),
                                      ("jxl", "uint8", 2)]:
        with pytest.raises(SpecError, match=encoding):
            encode_chunk(np.zeros((4, 4, 4, channels), dtype), encoding)


# --- refused at open -------------------------------------------------------------------------

def _layer(path, encoding, dtype="uint32"):
    path.mkdir(parents=True)
    info = {"@type": "neuroglancer_multiscale_volume", "type": "segmentation",
            "data_type": dtype, "num_channels": 1,
            "scales": [{"key": "s0", "size": [8, 8, 8], "voxel_offset": [0, 0, 0],
                        "resolution": [1, 1, 1], "chunk_sizes": [[8, 8, 8]],
                        "encoding": encoding}]}
    (path / "info").write_text(json.dumps(info))
    return path


@pytest.mark.parametrize("encoding,module,dtype", [
    ("compresso", "compresso", "uint32"), ("compresso", "cc3d", "uint32"),
    ("crackle", "crackle", "uint32"), ("jxl", "pillow_jxl", "uint8")])
def test_a_missing_package_is_refused_at_open(tmp_path, monkeypatch, encoding, module, dtype):
    """Before any read, naming the extra to install (before: compresso read as corrupt data,
    crackle failed to open as an unknown encoding, jxl read as corrupt)."""
    path = _layer(tmp_path / "layer", encoding, dtype)
    monkeypatch.setitem(sys.modules, module, None)  # import fails, as if not installed
    extra = "images" if encoding == "jxl" else "segmentation"
    with pytest.raises(MissingDependencyError, match=rf"{encoding}.*ngshard\[{extra}\]"):
        ngshard.open_volume(path)
    with pytest.raises(MissingDependencyError, match=encoding):
        ngshard.open(path)


@pytest.mark.parametrize("encoding", ["fpzip", "zfpc", "kempressed", "npz"])
def test_an_unknown_encoding_is_refused_at_open(tmp_path, encoding):
    path = _layer(tmp_path / "layer", encoding, "float32")
    with pytest.raises(SpecError, match=encoding):
        ngshard.open_volume(path)


# --- damaged and hostile streams ------------------------------------------------------------

def _volume_with(tmp_path, encoding, chunk: bytes, dtype="uint32"):
    """An unsharded layer of one 8^3 chunk holding ``chunk``."""
    path = _layer(tmp_path / "layer", encoding, dtype)
    (path / "s0").mkdir()
    (path / "s0" / "0-8_0-8_0-8").write_bytes(chunk)
    return ngshard.open_volume(path)


GOOD = np.random.default_rng(7).integers(0, 4, (8, 8, 8, 1)).astype(np.uint32)


@pytest.mark.parametrize("encoding", LABELS)
def test_a_stream_declaring_another_shape_is_refused(tmp_path, encoding):
    """A header claiming 2**40 voxels (or any shape but the chunk's, or other labels) is
    refused before the package allocates anything."""
    if encoding == "crackle":
        header = crackle.header(crackle.compress(np.zeros((8, 8, 8), np.uint32)))
        header.sx = header.sy = header.sz = 2**14  # 2**42 voxels
        liar = header.tobytes() + bytes(64)
    else:
        liar = bytearray(compresso.compress(np.zeros((8, 8, 8), np.uint32)))
        struct.pack_into("<HHH", liar, 6, 65535, 65535, 65535)  # 2**48 voxels
    for data in (bytes(liar), encode_chunk(GOOD[:4], encoding),
                 encode_chunk(GOOD.astype(np.uint64), encoding)):
        vol = _volume_with(tmp_path / str(len(data)), encoding, data)
        with pytest.raises(CorruptDataError, match="0-8_0-8_0-8.*expected"):
            np.asarray(vol)


@pytest.mark.parametrize("encoding", LABELS + ["jxl"])
def test_truncated_and_garbage_streams(tmp_path, encoding):
    chunk = GOOD.astype(np.uint8) if encoding == "jxl" else GOOD
    good = encode_chunk(chunk, encoding, quality=100)
    for i, data in enumerate([good[:len(good) // 2], good[:10], b"", bytes(200),
                              b"garbage" * 30, good[:-5]]):
        vol = _volume_with(tmp_path / str(i), encoding, data, chunk.dtype.name)
        with pytest.raises(CorruptDataError, match="0-8_0-8_0-8"):
            np.asarray(vol)


def test_jxl_declaring_a_larger_image_is_not_decoded(tmp_path):
    """The size in the codestream's header is checked before libjxl decodes anything: a
    stream claiming 2**31 x 2**30 pixels is refused at once, as is a real image of another
    size (bare codestream or in a container)."""
    bits = 0 | 3 << 1 | (2**30 - 1) << 3 | 7 << 33  # U32 selector 3: height 2**30; ratio 2:1
    liar = b"\xff\x0a" + bits.to_bytes(5, "little") + bytes(100)
    other = encode_chunk(GOOD[:, :, :4].astype(np.uint8), "jxl", quality=100)
    boxed = b"\x00\x00\x00\x0cJXL \r\n\x87\n" + (8 + len(other)).to_bytes(4, "big") + \
        b"jxlc" + other
    for data, size in ((liar, "2147483648x1073741824"), (other, "8x32"), (boxed, "8x32")):
        vol = _volume_with(tmp_path / str(len(data)), "jxl", data, "uint8")
        with pytest.raises(CorruptDataError, match=f"jxl image is {size}, expected 8x64"):
            np.asarray(vol)


@pytest.mark.parametrize("encoding", LABELS)
def test_damaged_streams_never_crash(encoding):
    """Bytes flipped, cut, inserted or replaced anywhere: the stream decodes (damage the
    format cannot see) or raises CorruptDataError, never crashes or reads out of bounds
    (compresso's decoder would, unchecked)."""
    rng = np.random.default_rng(11)
    for trial in range(150):
        shape = tuple(int(n) for n in rng.integers(1, 14, 3))
        labels = rng.integers(0, int(rng.integers(1, 9)), shape).astype(
            UNSIGNED[trial % 4])[..., None]
        data = bytearray(encode_chunk(labels, encoding))
        kind = trial % 4
        at = int(rng.integers(0, len(data)))
        if kind == 0:
            data = data[:at]
        elif kind == 1:
            for _ in range(int(rng.integers(1, 5))):
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        elif kind == 2:
            data[at:] = rng.bytes(len(data) - at)
        else:
            data[at:at] = rng.bytes(int(rng.integers(1, 30)))
        try:
            out = decode_chunk(bytes(data), encoding, labels.shape, labels.dtype)
        except CorruptDataError:
            continue
        assert out.shape == labels.shape
