"""Compression shared by every layer: gzip (libdeflate where it can, zlib where it must) and the
sharded format's data encodings. Pure: bytes in, bytes out."""

from __future__ import annotations

import struct
import zlib

import deflate

from .errors import CorruptDataError


def gzip_compress(data: bytes, level: int = 6) -> bytes:
    """One gzip stream holding ``data`` (libdeflate: about twice zlib's speed)."""
    return deflate.gzip_compress(data, level)


def gzip_decompress(data: bytes, where: str = "") -> bytes:
    """Decode one or more concatenated gzip streams; CorruptDataError if it is not gzip.

    libdeflate takes the common single-stream case at several times zlib's speed; it sizes
    its output from the stream's trailer, so that claim is checked first (deflate expands at
    most about 1032:1). Anything else goes through zlib, which streams and is bounded by the
    bytes actually read.
    """
    if len(data) >= 18 and data[:2] == b"\x1f\x8b" and \
            0 < int.from_bytes(data[-4:], "little") <= 1032 * len(data):
        try:
            out = deflate.gzip_decompress(bytes(data))
        except deflate.DeflateError:
            out = None  # several streams, or damage: zlib tells which
        # libdeflate stops at the end of the first stream: only if the file's own trailer
        # (CRC and length) describes this output was there nothing after it
        if out is not None and data[-8:] == struct.pack("<II", zlib.crc32(out),
                                                        len(out) & 0xFFFFFFFF):
            return out
    out = []
    rest = memoryview(data)
    while True:
        d = zlib.decompressobj(31)
        try:
            out.append(d.decompress(rest))
        except zlib.error as e:
            raise CorruptDataError(f"{where}: bad gzip data ({e})") from None
        if not d.eof:
            raise CorruptDataError(f"{where}: truncated gzip data")
        rest = memoryview(d.unused_data)
        if not rest:
            return b"".join(out) if len(out) > 1 else out[0]


def encode(data: bytes, encoding: str) -> bytes:
    """Apply a sharded-format encoding ("raw" or "gzip")."""
    return gzip_compress(data) if encoding == "gzip" else data


def decode(data: bytes, encoding: str, where: str = "") -> bytes:
    """Undo a sharded-format encoding ("raw" or "gzip")."""
    return gzip_decompress(data, where) if encoding == "gzip" else bytes(data)


