"""Compression shared by every layer: gzip (written by libdeflate; read by libdeflate where it
can, zlib where it must), the sharded format's data encodings, and the compressed twins of
unsharded files. Pure: bytes in, bytes out (or pieces in, pieces out), every decoder bounded
by a limit on what it may produce.

The twins: cloud-files (under cloud-volume and igneous) stores a file ``name`` written with
``compress=`` as ``name.gz``, ``name.br``, ``name.zstd``, ``name.xz`` or ``name.bz2`` on file
systems (object stores keep the name and record a Content-Encoding instead).
"""

from __future__ import annotations

import bz2
import lzma
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import brotli
import deflate
import zstandard

from .errors import CorruptDataError, SpecError
from .limits import DEFAULT_MAX_VALUE_BYTES, INFLATE_PIECE_BYTES, STREAM_STEP_BYTES
from .types import Blob, Place

#: ngshard's own gzip level (the sharded data encoding, ``.gz`` twins), written by libdeflate:
#: on image chunks level 1 takes half of level 6's CPU for 1-5% more bytes. ISA-L (the
#: ``isal`` package) takes a third of level 1's CPU, but its output for one input varied
#: between runs (in about 1 demo run of 30), and ngshard promises byte-identical reruns.
GZIP_LEVEL = 1


def gzip_compress(data: Blob, level: int | None = None) -> bytes | bytearray:
    """One gzip stream holding ``data``.

    Parameters
    ----------
    data
        The bytes to compress.
    level
        A zlib level (0-9), as a format's metadata names one (zarr's gzip codec). None:
        ngshard's own choice, :data:`GZIP_LEVEL`. libdeflate writes either, at about twice
        zlib's speed and with the same output for the same input on every run.

    Returns
    -------
    bytes or bytearray
        A single gzip member; any gzip reader (zlib, tensorstore, browsers) decodes it.
    """
    return deflate.gzip_compress(data, GZIP_LEVEL if level is None else level)


def gzip_decompress(data: Blob, where: Place = "", limit: int | None = None,
                    members: bool = True) -> bytes | bytearray:
    """Decode one or more concatenated gzip streams (only one unless ``members``, as tensorstore
    and neuroglancer read the sharded format), as bytes or (from libdeflate, not copied) a
    bytearray; CorruptDataError if it is not gzip, or if it
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
            trailer = struct.pack("<II", deflate.crc32(out), len(out) & 0xFFFFFFFF)
            if whole.find(trailer) == len(whole) - 8:
                return out
    return _inflate(memoryview(data), where, limit, members)


def _inflate(rest: memoryview, where: Place, limit: int | None, members: bool) -> bytes:
    out: list[bytes] = []
    total = 0
    while True:
        d = zlib.decompressobj(31)
        tail: bytes | memoryview = rest
        while True:
            # in pieces (zlib grows each output buffer by doubling: one large call would peak
            # at twice its size), and at most one byte past the limit
            room = INFLATE_PIECE_BYTES if limit is None else \
                min(INFLATE_PIECE_BYTES, limit - total + 1)
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


def zstd_compress(data: Blob, level: int = 3, checksum: bool = False) -> bytes:
    """One zstd frame holding ``data`` (its size recorded in the frame header; with
    ``checksum``, a checksum of the content at its end)."""
    return zstandard.ZstdCompressor(level=level, write_checksum=checksum).compress(data)


_zstd = threading.local()  # .one: this thread's ZstdDecompressor


def _zstd_one() -> zstandard.ZstdDecompressor:
    """This thread's decompressor, made once: a new one allocates and warms its context,
    about a tenth of the decoding of a 256 KiB chunk (a decompressor is not thread-safe)."""
    one = getattr(_zstd, "one", None)
    if one is None:
        one = _zstd.one = zstandard.ZstdDecompressor()
    return one


def zstd_decompress(data: Blob, where: Place = "", limit: int | None = None) -> bytes:
    """Decode one or more concatenated zstd frames; CorruptDataError if it is not zstd, is
    truncated, or inflates past ``limit`` bytes. A frame that declares its size is checked
    against the limit before it is decoded (zstandard's one-shot call would trust it); from
    the first that does not, the rest is streamed in small steps (:func:`iter_decompress`),
    so memory stays near the limit whatever the frames hold."""
    out: list[bytes] = []
    total = 0
    try:
        declared = zstandard.frame_content_size(data)
        if declared >= 0 and (limit is None or declared <= limit):
            try:  # the common case, one frame of declared size: one call, no copies
                return _zstd_one().decompress(data, allow_extra_data=False)
            except zstandard.ZstdError:
                pass  # more frames, or corrupt: the general path below tells which
        rest = bytes(data)
        while True:
            declared = zstandard.frame_content_size(rest)
            if declared < 0 and limit is not None:
                room = limit - total
                out += iter_decompress(_reader(rest), ".zstd", where, room,
                                       min(room + 1, INFLATE_PIECE_BYTES))
                return b"".join(out)
            if limit is not None and declared > limit - total:
                raise CorruptDataError(f"{where}: a zstd frame of {declared} bytes, past the "
                                       f"{limit} it may hold")
            d = zstandard.ZstdDecompressor().decompressobj()
            piece = d.decompress(rest)
            out.append(piece)
            total += len(piece)
            if not d.eof:
                raise CorruptDataError(f"{where}: truncated zstd data")
            rest = d.unused_data
            if not rest:
                return b"".join(out) if len(out) != 1 else out[0]
    except zstandard.ZstdError as e:
        raise CorruptDataError(f"{where}: bad zstd data ({e})") from None


def zstd_prefix(data: Blob, size: int, nbytes: int) -> bytearray | None:
    """The first ``nbytes`` bytes of the one zstd frame in ``data`` that declares ``size``
    bytes of content, decoding only the blocks that hold them (a 256 KiB chunk is two
    blocks: a read of its first half costs half); None where that cannot be had so (another
    size declared or none, several frames, damage): the caller then decodes all of it, which
    raises for damage."""
    try:
        if zstandard.frame_content_size(data) != size:
            return None
        out = bytearray(nbytes)
        view, done = memoryview(out), 0
        with _zstd_one().stream_reader(data, read_size=len(data), closefd=False) as reader:
            while done < nbytes:
                got = reader.readinto(view[done:])
                if not got:
                    return None
                done += got
        return out
    except zstandard.ZstdError:
        return None


def _reader(data: bytes) -> Callable[[int, int], memoryview]:
    """``read(offset, n)`` of :func:`iter_decompress` over ``data``."""
    view = memoryview(data)
    return lambda at, n: view[at:at + n]


def encode(data: Blob, encoding: str) -> Blob:
    """Apply a sharded-format encoding ("raw" or "gzip")."""
    return gzip_compress(data) if encoding == "gzip" else data


def decode(data: Blob, encoding: str, where: Place = "", limit: int | None = None
           ) -> bytes | bytearray:
    """Undo a sharded-format encoding ("raw" or "gzip": one gzip stream, nothing after it),
    refusing output past ``limit``."""
    return gzip_decompress(data, where, limit, False) if encoding == "gzip" else bytes(data)




# --- compressed twins --------------------------------------------------------------------------

#: Twin suffix -> its coding, in the order cloud-files looks for them after the plain name.
TWINS = {".gz": "gzip", ".br": "br", ".zstd": "zstd", ".xz": "xz", ".bz2": "bzip2"}
#: What writers may write (``compress=``): the codings browsers take as a Content-Encoding.
COMPRESS = {"gzip": ".gz", "br": ".br", "zstd": ".zstd"}
#: A Content-Encoding -> the twin suffix of its coding.
_CODING_SUFFIX = {**{coding: suffix for suffix, coding in TWINS.items()}, "x-gzip": ".gz"}


def twin_suffix(compress: str | None) -> str:
    """The file suffix of a writer's ``compress=`` value ("" for None); SpecError naming the
    values allowed for anything else."""
    if compress is None:
        return ""
    if not isinstance(compress, str) or compress.lower() not in COMPRESS:
        raise SpecError(f"compress must be None, {', '.join(map(repr, COMPRESS))}, "
                        f"not {compress!r}")
    return COMPRESS[compress.lower()]


def split_twin(name: str) -> tuple[str, str]:
    """(plain name, twin suffix) of a stored file name ("" as the suffix of a plain one)."""
    for suffix in TWINS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[:-len(suffix)], suffix
    return name, ""


def compress_twin(data: Blob, suffix: str) -> bytes | bytearray:
    """The bytes of the ``suffix`` twin of a file holding ``data`` (as cloud-files writes
    them: gzip as :func:`gzip_compress` chooses, brotli quality 5, zstd level 3)."""
    if suffix == ".gz":
        return gzip_compress(bytes(data))
    if suffix == ".br":
        return brotli.compress(bytes(data), quality=5)
    if suffix == ".zstd":
        return zstd_compress(data)
    if suffix == ".xz":
        return lzma.compress(data)
    if suffix == ".bz2":
        return bz2.compress(data)
    return bytes(data)


def decode_content(data: Blob, coding: str, where: Place = "",
                   limit: int = DEFAULT_MAX_VALUE_BYTES) -> Blob:
    """An object's content from its bytes as stored under the ``Content-Encoding``
    ``coding``: how cloud-files stores a file written with ``compress=`` on object stores, and
    how a web server sends a compressed twin (``ngshard serve`` to a client that asks for no
    particular coding). CorruptDataError for a coding none of the twins has, or bytes that do
    not decode within ``limit``."""
    codings = [c.strip().lower() for c in coding.split(",") if c.strip()]
    for c in reversed(codings):  # listed in the order they were applied
        if c == "identity":
            continue
        suffix = _CODING_SUFFIX.get(c)
        if suffix is None:
            raise CorruptDataError(f"{where}: stored with Content-Encoding {coding!r}, which "
                                   f"ngshard does not decode")
        data = decompress_twin(data, suffix, where, limit)
    return data


def decompress_twin(data: Blob, suffix: str, where: Place = "",
                    limit: int | None = None) -> bytes | bytearray:
    """The content of a ``suffix`` twin (``where`` names it); CorruptDataError if it does not
    decode, or decodes past ``limit`` bytes (memory stays bounded by the limit)."""
    if not len(data):  # as cloud-files: a twin of no bytes is damage, not an empty file
        raise CorruptDataError(f"{where}: an empty {TWINS[suffix]} file")
    if suffix == ".gz":
        return gzip_decompress(data, where, limit)
    if suffix == ".zstd":
        return zstd_decompress(data, where, limit)
    view = memoryview(data)
    pieces = iter_decompress(lambda at, n: view[at:at + n], suffix, where, limit)
    return b"".join(pieces)


_ZSTD_IN = 64  # zstd input per step: at most 2 MiB of output (a 4-byte block holds 128 KiB)


def iter_decompress(read: Callable[[int, int], Blob], suffix: str,
                    where: Place = "", limit: int | None = None, piece: int = INFLATE_PIECE_BYTES
                    ) -> Iterator[bytes]:
    """Decode a ``suffix`` twin as a stream: ``read(offset, n)`` gives up to ``n`` bytes of
    it from ``offset`` (none at its end); yields the content in pieces of about ``piece``
    bytes (brotli's may reach twice that), so memory is bounded whatever the data claims.

    Raises
    ------
    CorruptDataError
        Bytes that do not decode, end early, run on past the end of the data, or decode
        past ``limit`` bytes; the message names ``where``.
    """
    coding = TWINS[suffix]
    pos = 0

    def more(n: int = STREAM_STEP_BYTES) -> bytes:
        nonlocal pos
        data = bytes(read(pos, n))
        pos += len(data)
        return data

    streams = {".gz": _gunzip, ".br": _unbrotli, ".zstd": _unzstd, ".xz": _unlzma,
               ".bz2": _unbz2}
    total = 0
    try:
        for out in streams[suffix](more, piece):
            total += len(out)
            if limit is not None and total > limit:
                raise CorruptDataError(f"{where}: {coding} data decodes past the {limit} "
                                       f"bytes it may hold")
            yield out
    except _Bad as e:
        raise CorruptDataError(f"{where}: {e.args[0] if e.args else 'bad'} {coding} "
                               f"data") from None
    except (zlib.error, lzma.LZMAError, OSError, EOFError, brotli.error,
            zstandard.ZstdError) as e:
        raise CorruptDataError(f"{where}: bad {coding} data ({e})") from None


class _Bad(Exception):
    """Internal: the stream ended early ("truncated") or had nothing ("empty")."""


class _More(Protocol):
    """The next bytes of the stream being decoded: up to ``n``, none at its end."""

    def __call__(self, n: int = ...) -> bytes: ...


class _Decompressor(Protocol):
    """zlib's, lzma's and bz2's decompressor objects, as :func:`_streams` uses them."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


def _streams(more: _More, piece: int, make: Callable[[], _Decompressor],
             again: Callable[[Any, bytes], bytes | None]) -> Iterator[bytes]:
    """Decode concatenated streams (gzip members, xz or bzip2 streams) with decompressors
    ``make()`` gives, up to ``piece`` bytes a call; ``again(d, out)`` is the input to call
    ``d`` with once more before reading on (None: ``d`` needs more input)."""
    d, data = make(), more()
    if not data:
        raise _Bad("empty")
    while True:
        out = d.decompress(data, piece)
        if out:
            yield out
        if d.eof:  # another stream may follow
            data = d.unused_data or more()
            if not data:
                return
            d = make()
        elif (rest := again(d, out)) is not None:
            data = rest
        elif not (data := more()):
            raise _Bad("truncated")


def _gunzip(more: _More, piece: int) -> Iterator[bytes]:
    # zlib hands back the input it did not reach; a call stopped at the limit may have more
    # output pending even with none left
    return _streams(more, piece, lambda: zlib.decompressobj(31),
                    lambda d, out: d.unconsumed_tail
                    if len(out) == piece or d.unconsumed_tail else None)


def _unlzma(more: _More, piece: int,
            make: Callable[[], _Decompressor] = lzma.LZMADecompressor) -> Iterator[bytes]:
    # lzma and bz2 keep unread input themselves: called with none until they need more
    return _streams(more, piece, make, lambda d, out: None if d.needs_input else b"")


def _unbz2(more: _More, piece: int) -> Iterator[bytes]:
    return _unlzma(more, piece, bz2.BZ2Decompressor)


def _unbrotli(more: _More, piece: int) -> Iterator[bytes]:
    d, data = brotli.Decompressor(), more()
    if not data:
        raise _Bad("empty")
    while not d.is_finished():
        out = d.process(data, output_buffer_limit=piece)
        data = b""
        if out:
            yield out
        elif d.can_accept_more_data() and not (data := more()):
            raise _Bad("truncated")
    if more(1):  # brotli.error for bytes given with its last piece; these came after
        raise _Bad("bytes after the end of the")


def _unzstd(more: _More, piece: int) -> Iterator[bytes]:
    # zstandard's decompressobj has no output limit: small inputs bound each output
    buf, at = more(), 0
    if not buf:
        raise _Bad("empty")
    d, held, size = zstandard.ZstdDecompressor().decompressobj(), [], 0
    while True:
        if at >= len(buf):
            buf, at = more(), 0
            if not buf:
                break
        if d.eof:  # another frame follows
            d = zstandard.ZstdDecompressor().decompressobj()
        out = d.decompress(buf[at:at + _ZSTD_IN])
        at += _ZSTD_IN
        if d.eof and d.unused_data:
            buf, at = d.unused_data + buf[at:], 0
        held.append(out)
        size += len(out)
        if size >= piece:
            yield b"".join(held)
            held, size = [], 0
    if not d.eof:
        raise _Bad("truncated")
    if size:
        yield b"".join(held)
