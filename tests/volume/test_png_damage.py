"""Damaged png chunks: ngshard decodes those tensorstore (libpng, every warning an error, reading
up to the last row) decodes, to the same voxels, and refuses the rest. Each file here was a
difference the fuzzer (tools/fuzz.py) found while Pillow alone checked the files."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard

SIG = b"\x89PNG\r\n\x1a\n"
GRAY = b"".join(b"\0" + bytes([3 * y, 3 * y + 1, 3 * y + 2, 9]) for y in range(3))  # 4 x 3


def chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def ihdr(depth=8, colour=0, compression=0, filtering=0, interlace=0) -> bytes:
    return chunk(b"IHDR", struct.pack(">IIBBBBB", 4, 3, depth, colour, compression, filtering,
                                      interlace))


def png(*middle: bytes, header: bytes | None = None, rows: bytes = GRAY) -> bytes:
    """A 4 x 3 8-bit gray image with chunks between IHDR and the image data."""
    return (SIG + (ihdr() if header is None else header) + b"".join(middle)
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


IDAT = chunk(b"IDAT", zlib.compress(GRAY))
IEND = chunk(b"IEND", b"")
PALETTE = chunk(b"PLTE", bytes(range(9)))
ROWS_P = b"".join(b"\0" + bytes([0, 1, 2, 1]) for _ in range(3))
FILES = {
    "valid": png(),
    "gAMA, pHYs, tEXt, sBIT, tRNS, bKGD": png(
        chunk(b"gAMA", struct.pack(">I", 45455)), chunk(b"sBIT", b"\x08"),
        chunk(b"pHYs", bytes(9)), chunk(b"tEXt", b"k\0v"), chunk(b"tRNS", bytes(2)),
        chunk(b"bKGD", bytes(2))),
    "unknown ancillary chunk before IHDR": SIG + chunk(b"zzZz", b"x") + ihdr() + IDAT + IEND,
    "known chunk before IHDR": SIG + chunk(b"tEXt", b"k\0v") + ihdr() + IDAT + IEND,
    "IDAT before IHDR": SIG + IDAT + ihdr() + IDAT + IEND,
    "IHDR twice": png(ihdr()),
    "IHDR of 14 bytes": png(header=chunk(b"IHDR", struct.pack(">IIBBBBBB", 4, 3, 8, 0, 0, 0, 0,
                                                              0))),
    "compression method 1": png(header=ihdr(compression=1)),
    "filter method 1": png(header=ihdr(filtering=1)),
    "interlace method 2": png(header=ihdr(interlace=2)),
    "bit depth 3": png(header=ihdr(depth=3)),
    "bad CRC of an ancillary chunk": png(chunk(b"zzZz", b"x", crc=5)),
    "unknown critical chunk": png(chunk(b"ZZZZ", b"x")),
    "reserved bit of a chunk name": png(chunk(b"zzzz", b"x")),
    "PLTE in a gray image": png(PALETTE),
    "palette image without PLTE": png(header=ihdr(colour=3), rows=ROWS_P),
    "palette image": png(PALETTE, header=ihdr(colour=3), rows=ROWS_P),
    "gAMA after PLTE": png(PALETTE, chunk(b"gAMA", b"\0\0\1\0"), header=ihdr(colour=3),
                           rows=ROWS_P),
    "tRNS before PLTE": png(chunk(b"tRNS", b"\0"), PALETTE, header=ihdr(colour=3), rows=ROWS_P),
    "tRNS longer than the palette": png(PALETTE, chunk(b"tRNS", bytes(4)), header=ihdr(colour=3),
                                        rows=ROWS_P),
    "bKGD index past the palette": png(PALETTE, chunk(b"bKGD", b"\3"), header=ihdr(colour=3),
                                       rows=ROWS_P),
    "gAMA twice": png(chunk(b"gAMA", b"\0\0\1\0"), chunk(b"gAMA", b"\0\0\1\0")),
    "gAMA of 5 bytes": png(chunk(b"gAMA", bytes(5))),
    "gAMA past 2**31": png(chunk(b"gAMA", b"\x80\0\0\0")),
    "sRGB intent 4": png(chunk(b"sRGB", b"\4")),
    "sBIT of 9 bits": png(chunk(b"sBIT", b"\x09")),
    "tRNS of 3 bytes": png(chunk(b"tRNS", bytes(3))),
    "bKGD of 1 byte": png(chunk(b"bKGD", b"\0")),
    "tIME second 61": png(chunk(b"tIME", bytes([7, 228, 12, 31, 23, 59, 61]))),
    "tEXt of 1 byte": png(chunk(b"tEXt", b"k")),
    "hIST": png(PALETTE, chunk(b"hIST", bytes(6)), header=ihdr(colour=3), rows=ROWS_P),
    "APNG chunks (unknown to libpng)": png(chunk(b"acTL", b"junk"), chunk(b"fcTL", b"junk")),
    "too much image data": png(rows=GRAY + b"\0"),
    "not enough image data": png(rows=GRAY[:-1]),
    "no checksum at the end of the stream": SIG + ihdr() + chunk(
        b"IDAT", zlib.compress(GRAY)[:-4]) + IEND,
    "bytes after the stream in its IDAT": SIG + ihdr() + chunk(
        b"IDAT", zlib.compress(GRAY) + b"xx") + IEND,
    "two zlib streams": SIG + ihdr() + chunk(
        b"IDAT", zlib.compress(GRAY[:5]) + zlib.compress(GRAY[5:])) + IEND,
    "junk IDAT after the stream": SIG + ihdr() + IDAT + chunk(b"IDAT", b"junk") + IEND,
    "stream split over IDATs with a chunk between": SIG + ihdr() + chunk(
        b"IDAT", zlib.compress(GRAY)[:5]) + chunk(b"zzZz", b"") + chunk(
        b"IDAT", zlib.compress(GRAY)[5:]) + IEND,
    "bad row filter": png(rows=b"\5" + GRAY[1:]),
    "damaged chunk after the image data": SIG + ihdr() + IDAT + chunk(b"gAMA", bytes(3)) + IEND,
    "IEND before IDAT": SIG + ihdr() + IEND + IDAT,
}


@pytest.fixture(scope="module")
def volume(tmp_path_factory):
    path = tmp_path_factory.mktemp("png")
    with ngshard.create_volume(path, dtype="uint8", shape=(4, 3, 1), chunk_size=(4, 3, 1),
                               encoding="png") as vol:
        vol[:] = 1
    return path, path / vol.scale.key / vol.grid.chunk_names([[0, 0, 0]])[0]


@pytest.mark.parametrize("name", sorted(FILES))
def test_damaged_png_as_tensorstore_reads_it(volume, name):
    path, chunk_path = volume
    chunk_path.write_bytes(FILES[name])
    try:
        want = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/"},
                       context=ts.Context(), read=True).result(timeout=PEER_TIMEOUT
                                                               ).read().result(timeout=PEER_TIMEOUT)
    except ValueError:
        want = None
    try:
        got = ngshard.open_volume(path)[:]
    except ngshard.CorruptDataError as e:
        assert chunk_path.name in str(e)
        got = None
    assert (got is None) == (want is None), f"tensorstore {'decodes' if got is None else 'refuses'}"
    if got is not None:
        np.testing.assert_array_equal(got, want)
