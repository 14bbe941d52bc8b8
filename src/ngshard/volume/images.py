"""jpeg and png chunks of precomputed volumes, decoded as tensorstore decodes them: jpeg by
libjpeg-turbo (simplejpeg) with libjpeg's warnings as errors up to the last scanline, png by
Pillow after the checks libpng makes for tensorstore. Pure functions, no I/O."""

from __future__ import annotations

import io
import re
import zlib

import numpy as np

from ..errors import MissingDependencyError, SpecError
from ..types import Blob


class Corrupt(Exception):
    """Internal: a decoding failure, re-raised as CorruptDataError with the chunk's name."""


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


def decode_jpeg(data: Blob, shape: tuple[int, ...]) -> np.ndarray:
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
            raise Corrupt(f"jpeg image is {width}x{height}, expected {x}x{y * z} for chunk "
                           f"shape {shape}")
        if colorspace not in (("Gray",) if c == 1 else ("RGB", "YCbCr")):
            raise Corrupt(f"jpeg image in {colorspace} does not hold {c} channel(s) of uint8")
        space = "GRAY" if c == 1 else "RGB"
        try:
            arr = simplejpeg.decode_jpeg(data, colorspace=space, strict=True)
        except ValueError as e:
            if not _JUNK_BEFORE_EOI.search(str(e)):
                raise
            arr = simplejpeg.decode_jpeg(data, colorspace=space, strict=False)
    except Corrupt:
        raise
    except (ValueError, RuntimeError) as e:
        raise Corrupt(f"undecodable jpeg image ({e})") from None
    return arr.reshape(z, y, x, c).transpose(2, 1, 0, 3)


def decode_image(data: Blob, encoding: str, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    if encoding == "jpeg":
        return decode_jpeg(data, shape)
    Image = _pillow()
    x, y, z, c = shape
    if encoding == "png":
        data = _check_png(data)
    try:
        with Image.open(io.BytesIO(data), formats=[encoding.upper()]) as im:
            if im.size != (x, y * z):
                raise Corrupt(f"{encoding} image is {im.size[0]}x{im.size[1]}, expected "
                               f"{x}x{y * z} for chunk shape {shape}")
            rawmode = im.tile[0][3] if im.tile and isinstance(im.tile[0][3], str) else ""
            if dt == np.uint16:
                ok = im.mode in ("I;16", "I;16B", "I") and rawmode.startswith("I;16")
                got = f"{im.mode} ({rawmode})"
            else:
                ok = _MODE_CHANNELS.get(im.mode) == c and ";16" not in rawmode
                got = f"{im.mode} ({rawmode})" if ";16" in rawmode else im.mode
            if not ok:
                raise Corrupt(f"{encoding} image of mode {got} does not hold {c} channel(s) "
                               f"of {dt.name}")
            im.load()
            arr = np.asarray(im)
    except Corrupt:
        raise
    except Exception as e:  # Pillow raises many kinds (OSError, SyntaxError, ValueError, ...)
        raise Corrupt(f"undecodable {encoding} image ({type(e).__name__}: {e})") from None
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


def require_codec(encoding: str, *, writing: bool = True) -> None:
    """MissingDependencyError now, before any work, if reading (or writing) ``encoding``
    needs a package that is not installed: Pillow writes jpeg and png and reads png,
    simplejpeg reads jpeg (writers read too, for partial chunks)."""
    if encoding == "png" or (encoding == "jpeg" and writing):
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


def _check_png(data: Blob) -> bytes:
    """The PNG reduced to IHDR, PLTE and its image data, after libpng's checks up to the end of
    the image data (which must be one zlib stream inflating to exactly the image's rows)."""
    view = memoryview(data)
    if bytes(view[:8]) != b"\x89PNG\r\n\x1a\n":
        raise Corrupt("undecodable png image (no PNG signature)")
    keep: list[Blob] = [bytes(view[:8])]
    pos, header, seen, palette = 8, None, set(), 0
    inflate, want, total, first_idat = zlib.decompressobj(), 0, 0, None
    while True:
        if pos + 12 > len(view):
            raise Corrupt(f"undecodable png image (truncated chunk at byte {pos})")
        size, kind = int.from_bytes(view[pos:pos + 4], "big"), bytes(view[pos + 4:pos + 8])
        end = pos + 12 + size
        if not (kind.isalpha() and kind[2:3].isupper()) or size >= 2**31:
            raise Corrupt(f"undecodable png image (bad chunk header at byte {pos})")
        if end > len(view):
            raise Corrupt(f"undecodable png image (truncated {kind!r} chunk at byte {pos})")
        if zlib.crc32(view[pos + 4:end - 4]) != int.from_bytes(view[end - 4:end], "big"):
            raise Corrupt(f"undecodable png image (bad CRC of {kind!r} chunk at byte {pos})")
        if first_idat is not None and kind != b"IDAT":
            raise Corrupt("undecodable png image (not enough image data)")

        def bad(why: str, kind: bytes = kind, at: int = pos) -> Corrupt:
            return Corrupt(f"undecodable png image ({kind.decode()} chunk at byte {at}: {why})")

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


def encode_image(array: np.ndarray, encoding: str, dt: np.dtype, quality: int) -> bytes:
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
