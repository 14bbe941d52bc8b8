"""The fast path of convert carries a zarr chunk's gzip stream into the precomputed shard
only once it has checked it as a reader will (it ends, its CRC, its length): a damaged chunk
stops the conversion naming the chunk (it once came out as "converted", unreadable), and a
stream of several gzip members is re-encoded, not carried."""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from convert_helpers import as_xyzc, read_precomputed, volume_data, zarr_python_array

import ngshard
from ngshard.cli import main

SHAPE, CHUNK = (48, 40, 72), 16  # z, y, x: chunk 1.1.1 is interior
EXPECTED = CHUNK ** 3


def damaged_middle(blob: bytes) -> bytes:
    """Header and trailer intact (magic, the length the trailer claims), the deflate data
    between them changed."""
    body = bytearray(blob[10:-8])
    body[len(body) // 2:len(body) // 2 + 8] = bytes(8)
    return blob[:10] + bytes(body) + blob[-8:]


def short_with_trailer(blob: bytes) -> bytes:
    """A stream of fewer bytes whose trailer claims the chunk's length."""
    raw = gzip.decompress(blob)[:-100]
    return gzip.compress(raw)[:-4] + EXPECTED.to_bytes(4, "little")


def unended(blob: bytes) -> bytes:
    """A stream cut before its last block, the claimed length appended."""
    return blob[:len(blob) // 2] + blob[-8:]


@pytest.fixture
def source(tmp_path):
    data = volume_data(SHAPE, "uint8", seed=11)
    zarr_python_array(tmp_path / "src.zarr", data, chunks=(CHUNK,) * 3, zarr_format=2,
                      compressor="gzip")
    return tmp_path / "src.zarr", data


@pytest.mark.parametrize("damage", [damaged_middle, short_with_trailer, unended])
def test_a_damaged_gzip_chunk_stops_the_fast_path(tmp_path, source, damage, capsys):
    src, _ = source
    chunk = src / "1.1.1"
    chunk.write_bytes(damage(chunk.read_bytes()))
    with pytest.raises(ngshard.CorruptDataError, match=r"1\.1\.1"):
        ngshard.convert(src, tmp_path / "out", progress=False)
    assert main(["convert", str(src), str(tmp_path / "out2")]) == 1
    err = capsys.readouterr().err
    assert "1.1.1" in err and "Traceback" not in err


def test_a_stream_of_several_members_is_re_encoded(tmp_path, source):
    src, data = source
    chunk = src / "1.1.1"
    raw = gzip.decompress(chunk.read_bytes())
    two = gzip.compress(raw[:1000]) + gzip.compress(raw[1000:])
    chunk.write_bytes(two)
    ngshard.convert(src, tmp_path / "out", progress=False)
    got, _ = read_precomputed(tmp_path / "out")  # through tensorstore
    np.testing.assert_array_equal(got, as_xyzc(data, "zyx"))
    shards = b"".join(p.read_bytes() for p in (tmp_path / "out").rglob("*.shard"))
    assert two not in shards
