"""Chunk encodings of Neuroglancer precomputed volumes: bytes <-> (x, y, z, channel) arrays.

Pure functions, no I/O. ``decode_chunk`` raises only CorruptDataError (prefixed with ``where``,
the chunk's name) on bad bytes; ``encode_chunk`` raises SpecError for combinations of encoding,
dtype and channel count that tensorstore would not accept either.

compressed_segmentation is decoded by the C++ ``compressed_segmentation`` package, which checks
nothing: out-of-range offsets, bit widths or table indices make it read outside the buffer
(segfaults or silently wrong labels), and it mis-decodes valid 32-bit blocks. Every channel is
therefore validated here first, with tensorstore's rules, and blocks the package cannot decode
safely go through a numpy decoder. jpeg goes through libjpeg-turbo (simplejpeg) in strict mode,
so damage libjpeg merely warns about is an error, as in tensorstore; png through Pillow, after
the checks libpng makes for tensorstore (Pillow's are fewer). Both check the image size in the
header first (no decoding of an image larger than the chunk).
"""

from __future__ import annotations

import io
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from ..errors import CorruptDataError, MissingDependencyError, SpecError
from . import cseg

__all__ = ["ENCODINGS", "IMAGE_CHANNELS", "check_encoding", "decode_chunk", "encode_chunk",
           "require_codec"]

_DT = np.dtype
ENCODINGS: Mapping[str, frozenset[np.dtype]] = MappingProxyType({
    "raw": frozenset(map(_DT, ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64",
                               "float32"))),
    "compressed_segmentation": frozenset(map(_DT, ("uint32", "uint64"))),
    "jpeg": frozenset({_DT("uint8")}),
    "png": frozenset(map(_DT, ("uint8", "uint16"))),
})
"""The dtypes each encoding supports (those tensorstore accepts, less png uint16 multi-channel)."""

IMAGE_CHANNELS: Mapping[tuple[str, np.dtype], tuple[int, ...]] = MappingProxyType({
    ("jpeg", _DT("uint8")): (1, 3),
    ("png", _DT("uint8")): (1, 2, 3, 4),
    ("png", _DT("uint16")): (1,),  # Pillow decodes 16-bit multi-channel PNG to 8 bits
})
"""Channel counts the image encodings support; raw and compressed_segmentation take any."""


def check_encoding(encoding: str, dtype, num_channels: int | None = None) -> np.dtype:
    """The native-order dtype if ``encoding`` supports it (and ``num_channels``), else SpecError."""
    try:
        dt = np.dtype(dtype).newbyteorder("=")
    except TypeError:
        raise SpecError(f"unknown data type {dtype!r}") from None
    if encoding not in ENCODINGS:
        raise SpecError(f"unknown encoding {encoding!r} (known: {', '.join(ENCODINGS)})")
    if dt not in ENCODINGS[encoding]:
        raise SpecError(f"encoding {encoding!r} does not support data type {dt.name}")
    channels = IMAGE_CHANNELS.get((encoding, dt))
    if num_channels is not None and (num_channels < 1 or channels and num_channels not in channels):
        raise SpecError(f"encoding {encoding!r} with data type {dt.name} does not support "
                        f"{num_channels} channels")
    return dt


def decode_chunk(data: bytes | memoryview, encoding: str, shape: tuple[int, int, int, int],
                 dtype, *, block_size: Sequence[int] | None = None, where: str = "",
                 reuse: bool = False) -> np.ndarray:
    """Decode one chunk to an array of ``shape`` (x, y, z, channels: the clipped chunk shape).

    ``block_size`` is the scale's ``compressed_segmentation_block_size``. The result may be a
    read-only view of ``data`` (raw) and need not be contiguous. With ``reuse`` it may also
    live in a buffer that this thread's next decode overwrites: for callers that copy it out
    at once.
    """
    try:
        shape = _shape(shape)
        dt = check_encoding(encoding, dtype, shape[3])
        if encoding == "raw":
            return _decode_raw(data, shape, dt)
        if encoding == "compressed_segmentation":
            return cseg.decode(data, shape, dt, _block_size(block_size), reuse=reuse)
        return _decode_image(data, encoding, shape, dt)
    except (SpecError, _Corrupt, CorruptDataError) as e:
        raise CorruptDataError(f"{where}: {e}" if where else str(e)) from None


def encode_chunk(array: np.ndarray, encoding: str, *, block_size: Sequence[int] | None = None,
                 quality: int = 90) -> bytes:
    """Encode an (x, y, z, channels) array; jpeg is lossy with ``quality`` in 0..100."""
    array = np.asarray(array)
    if array.ndim != 4:
        raise SpecError(f"chunk arrays are (x, y, z, channels), not {array.ndim}-D")
    dt = check_encoding(encoding, array.dtype, array.shape[3])
    if encoding == "raw":
        array = np.asarray(array, dt.newbyteorder("<"))
        if not (array.flags.c_contiguous or array.flags.f_contiguous):
            # A box cut from a larger array: gathering it first (contiguous runs) makes the
            # transposing copy below run in cache, about 3x faster than doing both at once.
            array = np.ascontiguousarray(array)
        return array.tobytes(order="F")
    if encoding == "compressed_segmentation":
        return cseg.encode(array, _block_size(block_size))
    if encoding == "jpeg" and not (isinstance(quality, (int, np.integer)) and 0 <= quality <= 100):
        raise SpecError(f"jpeg quality must be an integer in 0..100, not {quality!r}")
    return _encode_image(array, encoding, dt, int(quality))


class _Corrupt(Exception):
    """Internal: a decoding failure, re-raised as CorruptDataError with the chunk's name."""


def _shape(shape) -> tuple[int, int, int, int]:
    try:
        out = tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        out = ()
    if len(out) != 4 or min(out) < 0:
        raise SpecError(f"chunk shape must be 4 sizes >= 0 (x, y, z, channels), not {shape!r}")
    return out


def _block_size(block_size) -> tuple[int, int, int]:
    try:
        bs = tuple(int(n) for n in block_size)
    except (TypeError, ValueError):
        bs = ()
    if len(bs) != 3 or not all(1 <= n < 2**31 for n in bs):
        raise SpecError(f"compressed_segmentation_block_size must be 3 integers >= 1, "
                        f"not {block_size!r}")
    return bs


# --- raw ---------------------------------------------------------------------------------------

def _decode_raw(data: bytes, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    expected = math.prod(shape) * dt.itemsize
    if len(data) != expected:
        raise _Corrupt(f"raw chunk has {len(data)} bytes, expected {expected} for shape "
                       f"{shape} of {dt.name}")
    arr = np.frombuffer(data, dt.newbyteorder("<")).reshape(shape, order="F")
    return arr if arr.dtype == dt else arr.astype(dt)


# --- jpeg and png ------------------------------------------------------------------------------
# The image is width x, height y * z: rows run over y, then z. Pillow reads the header at open, so
# the size is checked before decoding. PNG bit depths below 8 come back as tensorstore (libpng
# with packing only) gives them: palette indices and unscaled gray levels.

_MODE_CHANNELS = {"1": 1, "L": 1, "P": 1, "LA": 2, "RGB": 3, "RGBA": 4}
_GRAY_SCALE = {"L;2": 85, "L;4": 17}  # Pillow stretches 2- and 4-bit gray to 0..255


# libjpeg's warning for junk before the end-of-image marker, met only after the last scanline
_JUNK_BEFORE_EOI = re.compile(r"extraneous bytes before marker 0xd9")


_SOF_SEQUENTIAL = (0xC0, 0xC1)


def _jpeg_through_scan(data: bytes) -> bytes:
    """A sequential jpeg whose one scan holds every component, cut at the first marker after
    the scan's data (restart markers and stuffed bytes aside); other files as they are."""
    pos, components = 2, None
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        end = pos + 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            components = data[pos + 9] if marker in _SOF_SEQUENTIAL and pos + 9 < len(data) \
                else -1
        elif marker == 0xDA:
            if pos + 4 >= len(data) or components != data[pos + 4]:
                return data
            at = end
            while (at := data.find(b"\xff", at) + 1) and at < len(data):
                if data[at] not in _IN_SCAN:
                    return data[:at - 1]
            return data
        elif marker in (0xD8, 0xD9) or 0xD0 <= marker <= 0xD7:
            return data  # libjpeg's to judge
        pos = end
    return data


_IN_SCAN = frozenset([0x00, 0xFF, *range(0xD0, 0xD8)])  # stuffed byte, fill, restart markers


def _decode_jpeg(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """libjpeg-turbo through simplejpeg, strict, as tensorstore decodes: any libjpeg warning
    while reading the scanlines (a segment that ends early, a bad Huffman code) is an error,
    where Pillow would return the damaged image. Like tensorstore, which stops after the last
    scanline, nothing after the image data counts: a missing end marker, junk or damaged
    markers after the scan. The image ends with an end marker (libjpeg stops at the first),
    right after its scan where it has one, and junk before that marker is forgiven."""
    simplejpeg = _simplejpeg()
    x, y, z, c = shape
    data = _jpeg_through_scan(bytes(data)) + b"\xff\xd9"
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        if (width, height) != (x, y * z):
            raise _Corrupt(f"jpeg image is {width}x{height}, expected {x}x{y * z} for chunk "
                           f"shape {shape}")
        if colorspace not in (("Gray",) if c == 1 else ("RGB", "YCbCr")):
            raise _Corrupt(f"jpeg image in {colorspace} does not hold {c} channel(s) of uint8")
        space = "GRAY" if c == 1 else "RGB"
        try:
            arr = simplejpeg.decode_jpeg(data, colorspace=space, strict=True)
        except ValueError as e:
            if not _JUNK_BEFORE_EOI.search(str(e)):
                raise
            arr = simplejpeg.decode_jpeg(data, colorspace=space, strict=False)
    except _Corrupt:
        raise
    except (ValueError, RuntimeError) as e:
        raise _Corrupt(f"undecodable jpeg image ({e})") from None
    return arr.reshape(z, y, x, c).transpose(2, 1, 0, 3)


def _decode_image(data: bytes, encoding: str, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    if encoding == "jpeg":
        return _decode_jpeg(data, shape)
    Image = _pillow()
    x, y, z, c = shape
    if encoding == "png":
        data = _check_png(data)
    try:
        with Image.open(io.BytesIO(data), formats=[encoding.upper()]) as im:
            if im.size != (x, y * z):
                raise _Corrupt(f"{encoding} image is {im.size[0]}x{im.size[1]}, expected "
                               f"{x}x{y * z} for chunk shape {shape}")
            rawmode = im.tile[0][3] if im.tile and isinstance(im.tile[0][3], str) else ""
            if dt == np.uint16:
                ok = im.mode in ("I;16", "I;16B", "I") and rawmode.startswith("I;16")
                got = f"{im.mode} ({rawmode})"
            else:
                ok = _MODE_CHANNELS.get(im.mode) == c and ";16" not in rawmode
                got = f"{im.mode} ({rawmode})" if ";16" in rawmode else im.mode
            if not ok:
                raise _Corrupt(f"{encoding} image of mode {got} does not hold {c} channel(s) "
                               f"of {dt.name}")
            im.load()
            arr = np.asarray(im)
    except _Corrupt:
        raise
    except Exception as e:  # Pillow raises many kinds (OSError, SyntaxError, ValueError, ...)
        raise _Corrupt(f"undecodable {encoding} image ({type(e).__name__}: {e})") from None
    if rawmode in _GRAY_SCALE:
        arr = arr // _GRAY_SCALE[rawmode]
    arr = arr.astype(dt, copy=False).reshape(z, y, x, c)
    return arr.transpose(2, 1, 0, 3)


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise MissingDependencyError("jpeg and png chunks need Pillow: pip install "
                                     "'ngshard[images]'") from None
    return Image


def _simplejpeg():
    try:
        import simplejpeg
    except ImportError:
        raise MissingDependencyError("jpeg chunks need simplejpeg: pip install "
                                     "'ngshard[images]'") from None
    return simplejpeg


def require_codec(encoding: str) -> None:
    """MissingDependencyError now, before anything is written, if ``encoding`` needs a package
    that is not installed."""
    if encoding in ("jpeg", "png"):
        _pillow()
    if encoding == "jpeg":
        _simplejpeg()


# libpng, as tensorstore reads PNG: it stops after the last row, and every libpng warning is an
# error to it. Pillow checks far less (IDAT CRCs, image data too long or short, IHDR fields,
# misplaced or malformed chunks), so the file is checked first and Pillow sees only IHDR, PLTE
# and the image data. Not checked: the contents of iCCP, zTXt, iTXt, sPLT, pCAL, sCAL, eXIf, cICP.
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # by colour type
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
          (0, 1, 1, 2))
_PNG_BEFORE_PLTE = frozenset({b"gAMA", b"sRGB", b"iCCP", b"cHRM", b"cICP", b"sBIT"})
_PNG_ONCE = _PNG_BEFORE_PLTE | {b"tRNS", b"bKGD", b"hIST", b"pHYs", b"oFFs", b"pCAL", b"sCAL",
                                b"tIME", b"eXIf", b"cLLI", b"mDCV"}
_PNG_KNOWN = _PNG_ONCE | {b"PLTE", b"IDAT", b"IEND", b"tEXt", b"zTXt", b"iTXt", b"sPLT"}
_PNG_LENGTH = {b"gAMA": 4, b"sRGB": 1, b"cHRM": 32, b"pHYs": 9, b"oFFs": 9, b"tIME": 7}


def _check_png(data: bytes | memoryview) -> bytes:
    """The PNG reduced to IHDR, PLTE and its image data, after libpng's checks up to the end of
    the image data (which must be one zlib stream inflating to exactly the image's rows)."""
    view = memoryview(data)
    if bytes(view[:8]) != b"\x89PNG\r\n\x1a\n":
        raise _Corrupt("undecodable png image (no PNG signature)")
    pos, header, keep, seen, palette = 8, None, [bytes(view[:8])], set(), 0
    inflate, want, total, first_idat = zlib.decompressobj(), 0, 0, None
    while True:
        if pos + 12 > len(view):
            raise _Corrupt(f"undecodable png image (truncated chunk at byte {pos})")
        size, kind = int.from_bytes(view[pos:pos + 4], "big"), bytes(view[pos + 4:pos + 8])
        end = pos + 12 + size
        if not (kind.isalpha() and kind[2:3].isupper()) or size >= 2**31:
            raise _Corrupt(f"undecodable png image (bad chunk header at byte {pos})")
        if end > len(view):
            raise _Corrupt(f"undecodable png image (truncated {kind!r} chunk at byte {pos})")
        if zlib.crc32(view[pos + 4:end - 4]) != int.from_bytes(view[end - 4:end], "big"):
            raise _Corrupt(f"undecodable png image (bad CRC of {kind!r} chunk at byte {pos})")
        if first_idat is not None and kind != b"IDAT":
            raise _Corrupt("undecodable png image (not enough image data)")

        def bad(why: str, kind: bytes = kind, at: int = pos) -> _Corrupt:
            return _Corrupt(f"undecodable png image ({kind.decode()} chunk at byte {at}: {why})")

        body = view[pos + 8:end - 4]
        if kind == b"IHDR":
            if header is not None or size != 13:
                raise bad("out of place" if header else "not 13 bytes")
            header = _png_header(body, bad)
            want = _png_size(header)
            keep.append(view[pos:end])
        elif header is None:
            if kind in _PNG_KNOWN or not kind[0] & 0x20:
                raise bad("before IHDR")
        elif kind == b"IDAT":
            if header[3] == 3 and not palette:
                raise bad("no PLTE before the image data")
            first_idat = pos if first_idat is None else first_idat
            total = _png_inflate(inflate, body, want, total, bad)
            if inflate.eof:
                keep += [view[first_idat:end], b"\0\0\0\0IEND\xaeB`\x82"]
                return b"".join(keep)
        elif kind == b"PLTE":
            if header[3] in (0, 4) or palette or not 0 < size <= 768 or size % 3:
                raise bad("in a gray image, repeated, or not 1 to 256 colours")
            palette = size // 3
            keep.append(view[pos:end])
        elif not kind[0] & 0x20 or kind == b"IEND":
            raise bad("unknown critical chunk, or before the image data")
        else:
            if kind in seen and kind in _PNG_ONCE or kind in _PNG_BEFORE_PLTE and palette:
                raise bad("repeated or out of place")
            seen.add(kind)
            _png_ancillary(kind, bytes(body), header, palette, bad)
        pos = end


def _png_header(body: memoryview, bad) -> tuple[int, int, int, int, int]:
    """(width, height, bit depth, colour type, interlace) of a valid IHDR (libpng's limits)."""
    width, height = int.from_bytes(body[0:4], "big"), int.from_bytes(body[4:8], "big")
    depth, colour, compression, filtering, interlace = body[8:13]
    if not (0 < width <= 10**6 and 0 < height <= 10**6 and depth in _PNG_DEPTHS.get(colour, ())
            and compression == filtering == 0 and interlace < 2):
        raise bad("invalid IHDR data")
    return width, height, depth, colour, interlace


def _png_size(header: tuple[int, ...]) -> int:
    """Bytes of the image's filtered rows (a filter byte each), Adam7 passes if interlaced."""
    width, height, depth, colour, interlace = header
    total = 0
    for x0, y0, dx, dy in _ADAM7 if interlace else ((0, 0, 1, 1),):
        w, h = -(-(width - x0) // dx), -(-(height - y0) // dy)
        if w > 0 and h > 0:
            total += h * (1 + -(-w * _PNG_CHANNELS[colour] * depth // 8))
    return total


def _png_inflate(inflate, body: memoryview, want: int, total: int, bad) -> int:
    """Inflate one IDAT chunk of the image data, output discarded and never more than ``want``
    bytes; returns the bytes so far. Once the stream ends they must be exactly ``want``, with
    nothing after the end. (Pillow checks the row filters.)"""
    tail = body
    while tail and not inflate.eof:
        try:
            total += len(inflate.decompress(tail, want + 1 - total))
        except zlib.error as e:
            raise bad(f"bad image data: {e}") from None
        if total > want:
            raise bad("too much image data")
        tail = inflate.unconsumed_tail
    if inflate.eof and (inflate.unused_data or total < want):
        raise bad("data after the end of the image data" if inflate.unused_data
                  else "not enough image data")
    return total


def _png_ancillary(kind: bytes, body: bytes, header: tuple[int, ...], palette: int, bad) -> None:
    """libpng's checks of the ancillary chunks it knows that come before the image data."""
    depth, colour = header[2], header[3]
    n, limit = len(body), 1 << depth
    values = [int.from_bytes(body[i:i + 2], "big") for i in range(0, n - 1, 2)]
    samples = 3 if colour == 3 else _PNG_CHANNELS[colour]
    ok = {
        b"gAMA": lambda: int.from_bytes(body, "big") < 2**31,
        b"sRGB": lambda: body[0] < 4,
        b"tIME": lambda: 1 <= body[2] <= 12 and 1 <= body[3] <= 31 and body[4] < 24
        and body[5] < 60 and body[6] < 61,
        b"sBIT": lambda: n == samples and all(0 < v <= (8 if colour == 3 else depth)
                                               for v in body),
        b"tRNS": lambda: (n == 2 * samples and all(v < limit for v in values)) if colour in (0, 2)
        else colour == 3 and 0 < n <= palette,
        b"bKGD": lambda: (n == 1 and body[0] < palette) if colour == 3
        else n == 2 * samples - 2 * (colour in (4, 6)) and all(v < limit for v in values),
        b"hIST": lambda: False,  # tensorstore's libpng refuses any ("out of place")
        b"tEXt": lambda: n >= 2,
    }.get(kind, lambda: True)
    if _PNG_LENGTH.get(kind, n) != n or not ok():
        raise bad("invalid")


def _encode_image(array: np.ndarray, encoding: str, dt: np.dtype, quality: int) -> bytes:
    Image = _pillow()
    x, y, z, c = array.shape
    img = np.ascontiguousarray(array.transpose(2, 1, 0, 3).reshape(z * y, x, c), dt)
    buf = io.BytesIO()
    try:
        im = Image.fromarray(img[..., 0] if c == 1 else img)
        if encoding == "jpeg":
            im.save(buf, "JPEG", quality=quality)
        else:
            im.save(buf, "PNG")
    except (OSError, ValueError) as e:
        raise SpecError(f"cannot encode a {x}x{y}x{z} chunk of {c} {dt.name} channel(s) as "
                        f"{encoding}: {e}") from None
    return buf.getvalue()
