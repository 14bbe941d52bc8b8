"""JPEG XL chunks, laid out as jpeg chunks are (a 2-D image of width x and height y * z, rows
over y then z; one gray or three RGB uint8 channels), as cloud-volume and Neuroglancer store
them. Decoded and encoded by libjxl through the ``pillow-jxl-plugin`` package (the ``images``
extra). Pure functions, no I/O.

libjxl decodes the whole image at once, so the size its header declares is read here first
(the codestream's SizeHeader, inside an ISO BMFF container or bare) and checked against the
chunk: no image larger than the chunk is ever decoded.
"""

from __future__ import annotations

import numpy as np

from ..errors import MissingDependencyError
from ..types import Blob
from .images import Corrupt

_BARE = b"\xff\x0a"
_CONTAINER = b"\x00\x00\x00\x0cJXL \r\n\x87\n"
# SizeHeader's fixed aspect ratios (xsize = ysize * num // den), by its 3-bit code
_RATIOS = {1: (1, 1), 2: (12, 10), 3: (4, 3), 4: (3, 2), 5: (16, 9), 6: (5, 4), 7: (2, 1)}


def pillow_jxl():
    """The pillow_jxl module; MissingDependencyError naming the extra if it is missing."""
    try:
        import pillow_jxl
    except ImportError:
        raise MissingDependencyError("jxl chunks need pillow-jxl-plugin: pip install "
                                     "'ngshard[images]'") from None
    return pillow_jxl


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) a JPEG XL file declares; Corrupt if it is not one."""
    stream = _codestream(data)
    if stream[:2] != _BARE:
        raise Corrupt("not a jxl image (no codestream signature)")
    bits = int.from_bytes(stream[2:14].ljust(12, b"\0"), "little")  # SizeHeader: <= 90 bits
    pos = 0

    def take(n: int) -> int:
        nonlocal pos
        value = (bits >> pos) & ((1 << n) - 1)
        pos += n
        return value

    def u32() -> int:  # U32(Bits(9) + 1, Bits(13) + 1, Bits(18) + 1, Bits(30) + 1)
        return take((9, 13, 18, 30)[take(2)]) + 1

    small = take(1)
    height = 8 * (take(5) + 1) if small else u32()
    ratio = take(3)
    if ratio:
        num, den = _RATIOS[ratio]
        width = height * num // den
    else:
        width = 8 * (take(5) + 1) if small else u32()
    if len(stream) < 2 + -(-pos // 8):
        raise Corrupt("truncated jxl image header")
    return width, height


def _codestream(data: bytes) -> bytes:
    """The start of the codestream: the file itself, or its first jxlc / jxlp box's."""
    if not data.startswith(_CONTAINER):
        return data
    at = 0
    while at + 8 <= len(data):
        size, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
        body = at + 8
        if size == 1:
            size, body = int.from_bytes(data[at + 8:at + 16], "big"), at + 16
        if kind == b"jxlc":
            return data[body:]
        if kind == b"jxlp":
            return data[body + 4:]
        if size < body - at:  # 0: the box runs to the end of the file
            break
        at += size
    raise Corrupt("jxl container without a codestream box")


def decode_jxl(data: Blob, shape: tuple[int, ...], decode_jpeg) -> np.ndarray:
    """An (x, y, z, c) uint8 chunk from a JPEG XL image (a recompressed JPEG is rebuilt and
    handed to ``decode_jpeg``)."""
    x, y, z, c = shape
    data = bytes(data)
    width, height = image_size(data)
    if (width, height) != (x, y * z):
        raise Corrupt(f"jxl image is {width}x{height}, expected {x}x{y * z} for chunk shape "
                      f"{tuple(shape)}")
    try:
        jpeg, info, pixels, *_ = pillow_jxl().Decoder(num_threads=1)(data)
    except Exception as e:  # the binding raises its own exception types
        raise Corrupt(f"undecodable jxl image ({type(e).__name__}: {e})") from None
    if jpeg:
        return decode_jpeg(pixels, shape)
    if (info.width, info.height) != (x, y * z) or info.mode != ("L" if c == 1 else "RGB") \
            or len(pixels) != x * y * z * c:
        raise Corrupt(f"jxl image of mode {info.mode} ({info.width}x{info.height}) does not "
                      f"hold {c} channel(s) of uint8 for chunk shape {tuple(shape)}")
    return np.frombuffer(pixels, np.uint8).reshape(z, y, x, c).transpose(2, 1, 0, 3)


def encode_jxl(array: np.ndarray, quality: int) -> bytes:
    """An (x, y, z, c) uint8 chunk as a JPEG XL image; lossless at ``quality`` 100."""
    x, y, z, c = array.shape
    img = np.ascontiguousarray(array.transpose(2, 1, 0, 3).reshape(z * y, x, c), np.uint8)
    encoder = pillow_jxl().Encoder(mode="L" if c == 1 else "RGB", lossless=quality >= 100,
                                   quality=float(quality), num_threads=1)
    return bytes(encoder(img.tobytes(), x, y * z, jpeg_encode=False))
