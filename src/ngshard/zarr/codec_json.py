"""Zarr codecs from their JSON: each codec of a ``codecs`` list parsed and checked
(:func:`parse_codec`), and the list assembled into a :class:`CodecPipeline` in the order the
spec allows: array -> array codecs, one array -> bytes codec, bytes -> bytes codecs
(:func:`parse_pipeline`). SpecError names the codec and where it was declared.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import SpecError
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


def _config(codec: Any, where: str) -> tuple[str, dict]:
    if isinstance(codec, str):
        return codec, {}
    if not isinstance(codec, dict) or not isinstance(codec.get("name"), str):
        raise SpecError(f"{where}: malformed codec {codec!r}")
    config = codec.get("configuration") or {}
    if not isinstance(config, dict):
        raise SpecError(f"{where}: malformed configuration of codec {codec['name']!r}")
    return codec["name"], config


def _int(config: dict, key: str, default: Any, where: str, name: str) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SpecError(f"{where}: codec {name}: {key} must be an integer, got {value!r}")
    return value


def parse_codec(codec: Any, dtype: np.dtype, shape: tuple[int, ...], where: str
                ) -> ArrayArrayCodec | ArrayBytesCodec | BytesBytesCodec:
    """One codec from its JSON; SpecError naming the codec and ``where`` for one ngshard
    does not know or a bad configuration."""
    name, config = _config(codec, where)
    ndim = len(shape)
    if name == "transpose":
        order = config.get("order")
        if order == "C":
            order = list(range(ndim))
        elif order == "F":
            order = list(range(ndim))[::-1]
        if not isinstance(order, list) or sorted(order) != list(range(ndim)):
            raise SpecError(f"{where}: transpose order {order!r} is not a permutation of "
                            f"{ndim} axes")
        return Transpose(tuple(order))
    if name == "bytes":
        endian = config.get("endian")
        if endian not in ("little", "big", None) or (endian is None and dtype.itemsize > 1):
            raise SpecError(f"{where}: bytes codec endian {endian!r} (must be 'little' or "
                            f"'big' for {dtype})")
        return Bytes(endian)
    if name == "crc32c":
        return Crc32c()
    if name == "gzip":
        return Gzip(_int(config, "level", 6, where, name))
    if name == "zstd":
        return Zstd(_int(config, "level", 0, where, name), bool(config.get("checksum", False)))
    if name == "blosc":
        Blosc.module(f"{where}: codec blosc")
        shuffle = config.get("shuffle", "noshuffle")
        if shuffle not in SHUFFLES:
            raise SpecError(f"{where}: blosc shuffle {shuffle!r} (one of {list(SHUFFLES)})")
        return Blosc(str(config.get("cname", "zstd")), _int(config, "clevel", 5, where, name),
                     SHUFFLES[shuffle], _int(config, "typesize", dtype.itemsize, where, name),
                     _int(config, "blocksize", 0, where, name))
    if name == "sharding_indexed":
        from .sharding import ShardingCodec

        return ShardingCodec.from_config(config, dtype, shape, where)
    raise SpecError(f"{where}: unsupported codec {name!r} (ngshard reads transpose, bytes, "
                    f"sharding_indexed, gzip, zstd, blosc, crc32c)")


def parse_pipeline(codecs: Any, dtype: np.dtype, shape: tuple[int, ...], where: str
                   ) -> CodecPipeline:
    """A pipeline from the ``codecs`` JSON list of a chunk of ``shape``."""
    if not isinstance(codecs, list) or not codecs:
        raise SpecError(f"{where}: codecs must be a non-empty list, got {codecs!r}")
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
