"""Zarr codecs from their JSON: each codec of a ``codecs`` list parsed and checked
(:func:`parse_codec`), and the list assembled into a :class:`CodecPipeline` in the order the
spec allows: array -> array codecs, one array -> bytes codec, bytes -> bytes codecs
(:func:`parse_pipeline`). SpecError names the codec and where it was declared.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import SpecError
from ..jsondoc import Doc, is_int, kind
from ..storage.names import shown
from .codecs import (
    SHUFFLES,
    ArrayArrayCodec,
    ArrayBytesCodec,
    Blosc,
    Bytes,
    BytesBytesCodec,
    CodecPipeline,
    Crc32c,
    Gzip,
    Transpose,
    Zstd,
)


def _config(codec: Any, where: str) -> tuple[str, Doc]:
    """A codec's name and configuration (an empty one where it has none)."""
    if isinstance(codec, str):
        return codec, Doc({}, where, f"codec {codec}")
    c = Doc(codec, where, "codec")
    name = c.text("name")
    if c.get("configuration") is None:
        return name, Doc({}, where, f"codec {name}")
    return name, c.obj("configuration")


_INT32 = (-(1 << 31), (1 << 31) - 1)


def parse_codec(codec: Any, dtype: np.dtype, shape: tuple[int, ...], where: str
                ) -> ArrayArrayCodec | ArrayBytesCodec | BytesBytesCodec:
    """One codec from its JSON; SpecError naming the codec and ``where`` for one ngshard
    does not know or a bad configuration (any member of the wrong type or range)."""
    name, config = _config(codec, where)
    ndim = len(shape)
    if name == "transpose":
        order = config.get("order")
        if order == "C":
            order = list(range(ndim))
        elif order == "F":
            order = list(range(ndim))[::-1]
        if not isinstance(order, list) or not all(map(is_int, order)) or \
                sorted(order) != list(range(ndim)):
            raise SpecError(f"{where}: transpose order {kind(order)} is not a permutation of "
                            f"{ndim} axes")
        return Transpose(tuple(order))
    if name == "bytes":
        endian = config.get("endian")
        if endian not in ("little", "big", None) or (endian is None and dtype.itemsize > 1):
            raise SpecError(f"{where}: bytes codec endian {kind(endian)} (must be 'little' or "
                            f"'big' for {dtype})")
        return Bytes(endian)
    if name == "crc32c":
        return Crc32c()
    if name == "gzip":
        return Gzip(config.integer("level", 6, lo=0, hi=9))
    if name == "zstd":
        return Zstd(config.integer("level", 0, lo=_INT32[0], hi=_INT32[1]),
                    config.flag("checksum", False))
    if name == "blosc":
        Blosc.module(f"{where}: codec blosc")
        shuffle = config.text("shuffle", "noshuffle", choices=tuple(SHUFFLES))
        return Blosc(config.text("cname", "zstd"), config.integer("clevel", 5, lo=0, hi=9),
                     SHUFFLES[shuffle],
                     config.integer("typesize", dtype.itemsize, lo=1, hi=_INT32[1]),
                     config.integer("blocksize", 0, lo=0, hi=_INT32[1]))
    if name == "sharding_indexed":
        from .sharding import ShardingCodec

        return ShardingCodec.from_config(config, dtype, shape, where)
    raise SpecError(f"{where}: unsupported codec {shown(name)} (ngshard reads transpose, "
                    f"bytes, sharding_indexed, gzip, zstd, blosc, crc32c)")


def parse_pipeline(codecs: Any, dtype: np.dtype, shape: tuple[int, ...], where: str
                   ) -> CodecPipeline:
    """A pipeline from the ``codecs`` JSON list of a chunk of ``shape``."""
    if not isinstance(codecs, list) or not codecs:
        raise SpecError(f"{where}: codecs must be a non-empty list, got {kind(codecs)}")
    array: list[ArrayArrayCodec] = []
    array_bytes: ArrayBytesCodec | None = None
    after: list[BytesBytesCodec] = []
    for item in codecs:
        codec = parse_codec(item, dtype, shape, where)
        if isinstance(codec, ArrayArrayCodec):
            if array_bytes is not None:
                raise SpecError(f"{where}: array -> array codec {codec.name} after the array "
                                f"-> bytes codec")
            array.append(codec)
            shape = codec.encoded_shape(shape)
        elif isinstance(codec, ArrayBytesCodec):
            if array_bytes is not None:
                raise SpecError(f"{where}: two array -> bytes codecs ({array_bytes.name}, "
                                f"{codec.name})")
            array_bytes = codec
        else:
            if array_bytes is None:
                raise SpecError(f"{where}: bytes -> bytes codec {codec.name} before the array "
                                f"-> bytes codec")
            after.append(codec)
    if array_bytes is None:
        raise SpecError(f"{where}: no array -> bytes codec (bytes or sharding_indexed)")
    return CodecPipeline(tuple(array), array_bytes, tuple(after))
