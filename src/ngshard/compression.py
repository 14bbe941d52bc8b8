"""Compression shared by every layer: gzip (libdeflate where it can, zlib where it must) and the
sharded format's data encodings. Pure: bytes in, bytes out."""

from __future__ import annotations

import struct
import zlib

import deflate
import zstandard

from .errors import CorruptDataError


def gzip_compress(data: bytes, level: int = 6) -> bytes:
    """One gzip stream holding ``data`` (libdeflate: about twice zlib's speed)."""
    return deflate.gzip_compress(data, level)


def gzip_decompress(data: bytes, where: str = "", limit: int | None = None,
                    members: bool = True) -> bytes:
    """Decode one or more concatenated gzip streams (only one unless ``members``, as tensorstore
    and neuroglancer read the sharded format); CorruptDataError if it is not gzip, or if it
    inflates past ``limit`` bytes (a bomb: memory stays bounded by the limit, not by what the
    data claims).

    libdeflate takes the common single-stream case at several times zlib's speed; it sizes
    its output from the stream's trailer, so that claim is checked first (deflate expands at
    most about 1032:1, and never past ``limit``). Anything else goes through zlib, which
    streams and stops one byte past the limit.
    """
    claimed = int.from_bytes(data[-4:], "little") if len(data) >= 18 else 0
    if data[:2] == b"\x1f\x8b" and 0 < claimed <= 1032 * len(data) and \
            (limit is None or claimed <= limit):
        whole = bytes(data)
        try:
            out = deflate.gzip_decompress(whole)
        except deflate.DeflateError:
            out = None  # several streams, or damage: zlib tells which
        # libdeflate stops at the end of the first stream: it was the whole file only if the
        # file ends with this output's trailer (CRC and length) and holds it nowhere before, as
        # a first stream followed by others (even of the same bytes) would
        if out is not None:
            trailer = struct.pack("<II", zlib.crc32(out), len(out) & 0xFFFFFFFF)
            if whole.find(trailer) == len(whole) - 8:
                return out
    return _inflate(memoryview(data), where, limit, members)


_PIECE = 8 << 20


def _inflate(rest: memoryview, where: str, limit: int | None, members: bool) -> bytes:
    out: list[bytes] = []
    total = 0
    while True:
        d = zlib.decompressobj(31)
        tail = rest
        while True:
            # in pieces (zlib grows each output buffer by doubling: one large call would peak
            # at twice its size), and at most one byte past the limit
            room = _PIECE if limit is None else min(_PIECE, limit - total + 1)
            try:
                piece = d.decompress(tail, room)
            except zlib.error as e:
                raise CorruptDataError(f"{where}: bad gzip data ({e})") from None
            out.append(piece)
            total += len(piece)
            if limit is not None and total > limit:
                raise CorruptDataError(f"{where}: gzip data inflates past the {limit} bytes "
                                       f"it may hold")
            tail = d.unconsumed_tail
            if d.eof or (not piece and not tail):
                break
        if not d.eof:
            raise CorruptDataError(f"{where}: truncated gzip data")
        rest = memoryview(d.unused_data)
        if not rest:
            return b"".join(out) if len(out) > 1 else out[0]
        if not members:
            raise CorruptDataError(f"{where}: {len(rest)} bytes after the end of the gzip data")


def zstd_compress(data: bytes, level: int = 3, checksum: bool = False) -> bytes:
    """One zstd frame holding ``data`` (its size recorded in the frame header; with
    ``checksum``, a checksum of the content at its end)."""
    return zstandard.ZstdCompressor(level=level, write_checksum=checksum).compress(data)


def zstd_decompress(data: bytes, where: str = "", limit: int | None = None) -> bytes:
    """Decode one or more concatenated zstd frames; CorruptDataError if it is not zstd, is
    truncated, or inflates past ``limit`` bytes. A frame that declares its size is checked
    against the limit before it is decoded (zstandard's one-shot call would trust it); one
    that does not is fed in small pieces, so memory stays near the limit."""
    out: list[bytes] = []
    total = 0
    rest = bytes(data)
    try:
        while True:
            declared = zstandard.frame_content_size(rest)
            if limit is not None and declared > limit - total:
                raise CorruptDataError(f"{where}: a zstd frame of {declared} bytes, past the "
                                       f"{limit} it may hold")
            d = zstandard.ZstdDecompressor().decompressobj()
            step = len(rest) if declared >= 0 or limit is None else 1024
            for at in range(0, len(rest), step):
                piece = d.decompress(rest[at:at + step])
                out.append(piece)
                total += len(piece)
                if limit is not None and total > limit:
                    raise CorruptDataError(f"{where}: zstd data inflates past the {limit} "
                                           f"bytes it may hold")
                if d.eof:
                    rest = d.unused_data + rest[at + step:]
                    break
            if not d.eof:
                raise CorruptDataError(f"{where}: truncated zstd data")
            if not rest:
                return b"".join(out) if len(out) != 1 else out[0]
    except zstandard.ZstdError as e:
        raise CorruptDataError(f"{where}: bad zstd data ({e})") from None


def encode(data: bytes, encoding: str) -> bytes:
    """Apply a sharded-format encoding ("raw" or "gzip")."""
    return gzip_compress(data) if encoding == "gzip" else data


def decode(data: bytes, encoding: str, where: str = "", limit: int | None = None) -> bytes:
    """Undo a sharded-format encoding ("raw" or "gzip": one gzip stream, nothing after it),
    refusing output past ``limit``."""
    return gzip_decompress(data, where, limit, False) if encoding == "gzip" else bytes(data)


