"""Chunk encodings of Neuroglancer precomputed volumes: bytes <-> (x, y, z, channel) arrays.

Pure functions, no I/O. ``decode_chunk`` raises only CorruptDataError (prefixed with ``where``,
the chunk's name) on bad bytes; ``encode_chunk`` raises SpecError for combinations of encoding,
dtype and channel count that tensorstore would not accept either.

compressed_segmentation is ngshard's own numpy codec (``cseg/``), which validates every header
as tensorstore does. jpeg goes through libjpeg-turbo (simplejpeg) treating libjpeg's warnings
as errors, as tensorstore does; png through Pillow, after the checks libpng makes for
tensorstore (Pillow's are fewer); jxl through libjxl (``jxl.py``). compresso and crackle go
through their packages (``label_codecs.py``). Each checks the size a header declares against
the chunk first: nothing larger than the chunk is decoded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np

from .._kernels import fortran_bytes
from ..errors import CorruptDataError, SpecError
from ..types import Blob, Place
from . import cseg, images, jxl, label_codecs
from .images import Corrupt, decode_image, encode_image

__all__ = ["ENCODINGS", "IMAGE_CHANNELS", "SEGMENTATION_ENCODINGS", "check_encoding",
           "decode_chunk", "encode_chunk", "require_codec"]

_DT = np.dtype
ENCODINGS: Mapping[str, frozenset[np.dtype]] = MappingProxyType({
    "raw": frozenset(map(_DT, ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64",
                               "float32"))),
    "compressed_segmentation": frozenset(map(_DT, ("uint32", "uint64"))),
    "jpeg": frozenset({_DT("uint8")}),
    "png": frozenset(map(_DT, ("uint8", "uint16"))),
    "jxl": frozenset({_DT("uint8")}),
    "compresso": frozenset(map(_DT, ("uint8", "uint16", "uint32", "uint64"))),
    "crackle": frozenset(map(_DT, ("uint8", "uint16", "uint32", "uint64"))),
})
"""The dtypes each encoding supports (those tensorstore accepts, less png uint16 multi-channel;
compresso's and crackle's unsigned labels)."""

SEGMENTATION_ENCODINGS = frozenset({"compressed_segmentation", "compresso", "crackle"})
"""The label encodings: a layer written with one is a segmentation by default."""

IMAGE_CHANNELS: Mapping[tuple[str, np.dtype], tuple[int, ...]] = MappingProxyType({
    ("jpeg", _DT("uint8")): (1, 3),
    ("jxl", _DT("uint8")): (1, 3),
    ("png", _DT("uint8")): (1, 2, 3, 4),
    ("png", _DT("uint16")): (1,),  # Pillow decodes 16-bit multi-channel PNG to 8 bits
    **{(e, dt): (1,) for e in ("compresso", "crackle") for dt in ENCODINGS[e]},
})
"""Channel counts the image and label encodings support (compresso and crackle chunks hold
one, as cloud-volume writes them); raw and compressed_segmentation take any."""

#: The extra holding each encoding's packages.
EXTRAS = MappingProxyType({"jpeg": "images", "png": "images", "jxl": "images",
                           "compresso": "segmentation", "crackle": "segmentation"})


def check_encoding(encoding: str, dtype, num_channels: int | None = None) -> np.dtype:
    """The native-order dtype if ``encoding`` supports it (and ``num_channels``), else SpecError."""
    try:
        dt = np.dtype(dtype).newbyteorder("=")
    except TypeError:
        raise SpecError(f"unknown data type {dtype!r}") from None
    if encoding not in ENCODINGS:
        raise SpecError(f"ngshard cannot decode encoding {encoding!r} (it reads "
                        f"{', '.join(ENCODINGS)})")
    if dt not in ENCODINGS[encoding]:
        raise SpecError(f"encoding {encoding!r} does not support data type {dt.name}")
    channels = IMAGE_CHANNELS.get((encoding, dt))
    if num_channels is not None and (num_channels < 1 or channels and num_channels not in channels):
        raise SpecError(f"encoding {encoding!r} with data type {dt.name} does not support "
                        f"{num_channels} channels")
    return dt


def decode_chunk(data: Blob, encoding: str, shape: tuple[int, int, int, int],
                 dtype, *, block_size: Sequence[int] | None = None, where: Place = "",
                 reuse: bool = False, out: np.ndarray | None = None) -> np.ndarray:
    """Decode one chunk to an array of ``shape`` (x, y, z, channels: the clipped chunk shape).

    ``block_size`` is the scale's ``compressed_segmentation_block_size``. The result may be a
    read-only view of ``data`` (raw) and need not be contiguous. With ``reuse`` it may also
    live in a buffer that this thread's next decode overwrites: for callers that copy it out
    at once. ``out``: a writable array of ``shape`` and ``dtype`` (any strides, a slice of a
    larger array say) that receives the chunk and is returned (compressed_segmentation
    decodes straight into it; the other encodings decode, then copy); on bad bytes it may
    hold part of the chunk. ValueError if ``out`` has another shape or dtype.
    """
    try:
        shape = _shape(shape)
        dt = check_encoding(encoding, dtype, shape[3])
        if encoding == "compressed_segmentation":
            return cseg.decode(data, shape, dt, _block_size(block_size), reuse=reuse, out=out)
        if encoding == "raw":
            array = _decode_raw(data, shape, dt)
        elif encoding in label_codecs.ENCODINGS:
            array = label_codecs.decode_labels(data, encoding, shape, dt)
        elif encoding == "jxl":
            array = jxl.decode_jxl(data, shape, images.decode_jpeg)
        else:
            array = decode_image(data, encoding, shape, dt)
    except (SpecError, Corrupt, CorruptDataError) as e:
        raise CorruptDataError(f"{where}: {e}" if where else str(e)) from None
    if out is None:
        return array
    if out.shape != array.shape or out.dtype != array.dtype:
        raise ValueError(f"cannot decode a {array.shape} {array.dtype.name} chunk into a "
                         f"{out.shape} {out.dtype.name} array")
    out[...] = array
    return out


def encode_chunk(array: np.ndarray, encoding: str, *, block_size: Sequence[int] | None = None,
                 quality: int = 90, copy: bool = True, out: memoryview | None = None) -> Blob:
    """Encode an (x, y, z, channels) array; jpeg is lossy with ``quality`` in 0..100.

    ``copy=False``: a raw chunk already laid out as stored (Fortran order, little endian) comes
    back as a byte view of ``array`` rather than a copy: for callers that keep ``array`` as it
    is until the bytes are written. ``out``: a raw chunk is written into this writable buffer
    of exactly ``array.nbytes`` (ValueError otherwise), which is returned."""
    array = np.asarray(array)
    if array.ndim != 4:
        raise SpecError(f"chunk arrays are (x, y, z, channels), not {array.ndim}-D")
    dt = check_encoding(encoding, array.dtype, array.shape[3])
    if out is not None and encoding != "raw":
        raise ValueError(f"encoding {encoding!r} has no size known before encoding: no out=")
    if encoding == "raw":
        array = np.asarray(array, dt.newbyteorder("<"))
        if out is not None:
            fortran_bytes(array, out)
            return out
        if not copy and array.flags.f_contiguous:
            return array.ravel(order="F").data.cast("B")
        # one pass from any strides, tile by tile (numpy's tobytes(order="F") reads a byte
        # every few KiB: 2-4x slower, and it holds the GIL)
        return fortran_bytes(array)
    if encoding == "compressed_segmentation":
        return cseg.encode(array, _block_size(block_size))
    if encoding in label_codecs.ENCODINGS:
        return label_codecs.encode_labels(array, encoding)
    if encoding in ("jpeg", "jxl") and not (isinstance(quality, (int, np.integer))
                                            and 0 <= quality <= 100):
        raise SpecError(f"{encoding} quality must be an integer in 0..100, not {quality!r}")
    if encoding == "jxl":
        return jxl.encode_jxl(array, int(quality))
    return encode_image(array, encoding, dt, int(quality))


def require_codec(encoding: str, *, writing: bool = True) -> None:
    """Refuse, before any work, an encoding ngshard cannot read (or write): SpecError for an
    encoding it does not know, MissingDependencyError naming the extra to install where a
    package it needs is missing (Pillow writes jpeg and png and reads png, simplejpeg reads
    jpeg, pillow-jxl-plugin reads and writes jxl, compresso with connected-components-3d and
    crackle-codec their encodings; writers read too, for partial chunks)."""
    if encoding not in ENCODINGS:
        raise SpecError(f"ngshard cannot decode encoding {encoding!r} (it reads "
                        f"{', '.join(ENCODINGS)})")
    if encoding in ("jpeg", "png"):
        images.require_codec(encoding, writing=writing)
    elif encoding == "jxl":
        jxl.pillow_jxl()
    elif encoding == "compresso":
        label_codecs.compresso()
    elif encoding == "crackle":
        label_codecs.crackle()


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

def _decode_raw(data: Blob, shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    expected = math.prod(shape) * dt.itemsize
    if len(data) != expected:
        raise Corrupt(f"raw chunk has {len(data)} bytes, expected {expected} for shape "
                       f"{shape} of {dt.name}")
    arr = np.frombuffer(data, dt.newbyteorder("<")).reshape(shape, order="F")
    return arr if arr.dtype == dt else arr.astype(dt)
