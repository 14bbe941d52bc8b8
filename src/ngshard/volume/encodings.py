"""Chunk encodings of Neuroglancer precomputed volumes: bytes <-> (x, y, z, channel) arrays.

Pure functions, no I/O. ``decode_chunk`` raises only CorruptDataError (prefixed with ``where``,
the chunk's name) on bad bytes; ``encode_chunk`` raises SpecError for combinations of encoding,
dtype and channel count that tensorstore would not accept either.

compressed_segmentation is ngshard's own numpy codec (``cseg/``), which validates every header
as tensorstore does. jpeg goes through libjpeg-turbo (simplejpeg) treating libjpeg's warnings
as errors, as tensorstore does; png through Pillow. Both check the image size in the header
first (no decoding of an image larger than the chunk).
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
                 quality: int = 90, copy: bool = True) -> bytes | memoryview:
    """Encode an (x, y, z, channels) array; jpeg is lossy with ``quality`` in 0..100.

    ``copy=False``: a raw chunk already laid out as stored (Fortran order, little endian) comes
    back as a byte view of ``array`` rather than a copy: for callers that keep ``array`` as it
    is until the bytes are written."""
    array = np.asarray(array)
    if array.ndim != 4:
        raise SpecError(f"chunk arrays are (x, y, z, channels), not {array.ndim}-D")
    dt = check_encoding(encoding, array.dtype, array.shape[3])
    if encoding == "raw":
        array = np.asarray(array, dt.newbyteorder("<"))
        if not copy and array.flags.f_contiguous:
            return memoryview(array.ravel(order="F")).cast("B")
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


def _decode_jpeg(data: bytes, shape: tuple[int, ...]) -> np.ndarray:
    """libjpeg-turbo through simplejpeg, strict, as tensorstore decodes: any libjpeg warning
    while reading the scanlines (a segment that ends early, a bad Huffman code) is an error,
    where Pillow would return the damaged image. Like tensorstore, which stops after the last
    scanline, a missing end marker, or junk between the image data and it, is not: an end
    marker is appended (libjpeg stops at the first), and junk before it is forgiven."""
    simplejpeg = _simplejpeg()
    x, y, z, c = shape
    data = bytes(data) + b"\xff\xd9"
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
        _check_png_chunks(data)
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


def require_codec(encoding: str, *, writing: bool = True) -> None:
    """MissingDependencyError now, before any work, if reading (or writing) ``encoding``
    needs a package that is not installed: Pillow writes jpeg and png and reads png,
    simplejpeg reads jpeg (writers read too, for partial chunks)."""
    if encoding == "png" or (encoding == "jpeg" and writing):
        _pillow()
    if encoding == "jpeg":
        _simplejpeg()


def _check_png_chunks(data: bytes) -> None:
    """Chunks up to the last IDAT complete, critical ones with a valid CRC, as libpng reads them
    for tensorstore (which never looks past the image data). Pillow does not check IDAT CRCs.
    """
    view = memoryview(data)
    if bytes(view[:8]) != b"\x89PNG\r\n\x1a\n":
        raise _Corrupt("undecodable png image (no PNG signature)")
    pos, idat = 8, False
    while pos < len(view):
        kind = bytes(view[pos + 4:pos + 8])
        if idat and kind != b"IDAT":
            return
        idat = kind == b"IDAT"
        size = int.from_bytes(view[pos:pos + 4], "big")
        end = pos + 12 + size
        if end > len(view):
            raise _Corrupt(f"undecodable png image (truncated chunk at byte {pos})")
        crc = int.from_bytes(view[end - 4:end], "big")
        if not kind[0] & 0x20 and zlib.crc32(view[pos + 4:end - 4]) != crc:
            raise _Corrupt(f"undecodable png image (bad CRC of {kind!r} chunk at byte {pos})")
        pos = end


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
