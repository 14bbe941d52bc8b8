"""The Zarr v3 codec pipeline, pure: a chunk (numpy array) through its array -> array codecs
(``transpose``), one array -> bytes codec (``bytes``, or ``sharding_indexed`` from
``sharding.py``) and its bytes -> bytes codecs (``gzip``, ``zstd``, ``crc32c``, ``blosc``; and
v2's ``zlib``), and back. Decoding checks every size it can know (a chunk's bytes, a
compressor's output) and raises CorruptDataError naming the chunk.
"""

from __future__ import annotations

import math
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numpy as np

from ..compression import gzip_compress, gzip_decompress, zstd_compress, zstd_decompress
from ..errors import CorruptDataError, MissingDependencyError, SpecError
from ..jsondoc import Doc, is_int, kind
from ..limits import CHUNK_SLACK, CHUNK_SLACK_BYTES
from ..storage.names import shown


class Codec:
    """One codec: ``kind`` is "array" (array -> array), "array_bytes" or "bytes"."""

    kind = "bytes"
    name = ""

    def configuration(self) -> dict:
        return {}

    def to_json(self) -> dict:
        config = self.configuration()
        return {"name": self.name, "configuration": config} if config else {"name": self.name}


# --- array -> array ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Transpose(Codec):
    """Permute the axes: encoded axis ``i`` is decoded axis ``order[i]``."""

    order: tuple[int, ...]
    kind = "array"
    name = "transpose"

    def configuration(self) -> dict:
        return {"order": list(self.order)}

    def encoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[a] for a in self.order)

    def encode(self, chunk: np.ndarray) -> np.ndarray:
        return chunk.transpose(self.order)

    def decode(self, chunk: np.ndarray) -> np.ndarray:
        return chunk.transpose(np.argsort(self.order))


# --- array -> bytes ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Bytes(Codec):
    """The values in C order, little or big endian (None: one byte per value)."""

    endian: str | None = "little"
    kind = "array_bytes"
    name = "bytes"

    def configuration(self) -> dict:
        return {} if self.endian is None else {"endian": self.endian}

    def stored(self, dtype: np.dtype) -> np.dtype:
        return dtype.newbyteorder(">" if self.endian == "big" else "<")

    def encoded_size(self, shape: tuple[int, ...], dtype: np.dtype) -> int:
        return math.prod(shape) * dtype.itemsize

    def encode(self, chunk: np.ndarray, fill: Any) -> bytes | memoryview:
        stored = self.stored(chunk.dtype)
        if chunk.dtype != stored and chunk.dtype.itemsize > 1:
            chunk = chunk.astype(stored)
        return memoryview(np.ascontiguousarray(chunk).reshape(-1).view(np.uint8))

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype, fill: Any,
               where: str) -> np.ndarray:
        expected = self.encoded_size(shape, dtype)
        if len(data) != expected:
            raise CorruptDataError(f"{where}: {len(data)} bytes, not the {expected} of a "
                                   f"{'x'.join(map(str, shape))} {dtype} chunk")
        chunk = np.frombuffer(data, self.stored(dtype)).reshape(shape)
        return chunk if chunk.dtype == dtype else chunk.astype(dtype)


# --- bytes -> bytes ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Crc32c(Codec):
    """A CRC32C of the bytes appended to them (4 bytes, little endian)."""

    name = "crc32c"

    def encoded_size(self, size: int) -> int:
        return size + 4

    def encode(self, data: Any) -> bytes:
        return bytes(data) + struct.pack("<I", google_crc32c.value(bytes(data)))

    def decode(self, data: Any, where: str, limit: int) -> Any:
        if len(data) < 4:
            raise CorruptDataError(f"{where}: {len(data)} bytes, too short for a crc32c")
        body = memoryview(data)[:-4]
        stored = struct.unpack("<I", bytes(data[-4:]))[0]
        actual = google_crc32c.value(bytes(body))
        if stored != actual:
            raise CorruptDataError(f"{where}: crc32c checksum mismatch (stored {stored:08x}, "
                                   f"computed {actual:08x})")
        return body


@dataclass(frozen=True)
class Gzip(Codec):
    level: int = 6
    name = "gzip"

    def configuration(self) -> dict:
        return {"level": self.level}

    def encode(self, data: Any) -> bytes:
        return gzip_compress(bytes(data), self.level)

    def decode(self, data: Any, where: str, limit: int) -> bytes:
        return gzip_decompress(data, where, limit)


@dataclass(frozen=True)
class Zstd(Codec):
    level: int = 0
    checksum: bool = False
    name = "zstd"

    def configuration(self) -> dict:
        return {"level": self.level, "checksum": self.checksum}

    def encode(self, data: Any) -> bytes:
        return zstd_compress(bytes(data), self.level, self.checksum)

    def decode(self, data: Any, where: str, limit: int) -> bytes:
        return zstd_decompress(data, where, limit)


@dataclass(frozen=True)
class Zlib(Codec):
    """A zlib stream (Zarr v2's ``zlib`` compressor)."""

    level: int = 1
    name = "zlib"

    def configuration(self) -> dict:
        return {"level": self.level}

    def encode(self, data: Any) -> bytes:
        return zlib.compress(bytes(data), self.level)

    def decode(self, data: Any, where: str, limit: int) -> bytes:
        d = zlib.decompressobj()
        try:
            out = d.decompress(data, limit + 1)
        except zlib.error as e:
            raise CorruptDataError(f"{where}: bad zlib data ({e})") from None
        if len(out) > limit:
            raise CorruptDataError(f"{where}: zlib data inflates past the {limit} bytes it "
                                   f"may hold")
        if not d.eof:
            raise CorruptDataError(f"{where}: truncated zlib data")
        return out


SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


@dataclass(frozen=True)
class Blosc(Codec):
    """Blosc, through numcodecs (the ``zarr`` extra)."""

    cname: str = "zstd"
    clevel: int = 5
    shuffle: int = 1  # numcodecs' numbers: 0 none, 1 bytes, 2 bits, -1 auto (v2)
    typesize: int = 1
    blocksize: int = 0
    name = "blosc"

    def configuration(self) -> dict:
        names = {v: k for k, v in SHUFFLES.items()}
        shuffle = names.get(self.shuffle, "bitshuffle" if self.typesize == 1 else "shuffle")
        return {"cname": self.cname, "clevel": self.clevel, "shuffle": shuffle,
                "typesize": self.typesize, "blocksize": self.blocksize}

    @staticmethod
    def module(where: str = "") -> Any:
        try:
            from numcodecs import blosc
        except ImportError:
            raise MissingDependencyError(
                f"{where}: the blosc codec needs numcodecs: pip install 'ngshard[zarr]'"
                ) from None
        return blosc

    def encode(self, data: Any) -> bytes:
        typed = np.frombuffer(data, f"u{self.typesize}") \
            if self.typesize in (1, 2, 4, 8) and len(data) % self.typesize == 0 else \
            np.frombuffer(data, "u1")
        return bytes(self.module().compress(typed, self.cname.encode(), self.clevel,
                                            self.shuffle, self.blocksize))

    def decode(self, data: Any, where: str, limit: int) -> bytes:
        data = bytes(data)
        if len(data) < 16:
            raise CorruptDataError(f"{where}: {len(data)} bytes, too short for blosc")
        nbytes, _, cbytes = struct.unpack("<III", data[4:16])
        if cbytes != len(data) or nbytes > limit:
            raise CorruptDataError(f"{where}: blosc header claims {nbytes} bytes from "
                                   f"{cbytes}, not what the chunk can hold ({len(data)} "
                                   f"bytes stored, at most {limit} decoded)")
        try:
            return bytes(self.module(where).decompress(data))
        except (RuntimeError, ValueError) as e:
            raise CorruptDataError(f"{where}: bad blosc data ({e})") from None


# --- the pipeline -----------------------------------------------------------------------------

@dataclass(frozen=True)
class CodecPipeline:
    """Array -> array codecs, one array -> bytes codec, bytes -> bytes codecs, applied in
    that order when encoding (and the reverse when decoding)."""

    array: tuple[Codec, ...]
    array_bytes: Codec
    bytes_codecs: tuple[Codec, ...]

    def to_json(self) -> list[dict]:
        return [c.to_json() for c in (*self.array, self.array_bytes, *self.bytes_codecs)]

    def encoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for codec in self.array:
            shape = codec.encoded_shape(shape)
        return shape

    def encoded_size(self, shape: tuple[int, ...], dtype: np.dtype) -> int | None:
        """Bytes of an encoded chunk where every codec's output size is fixed, else None."""
        size = getattr(self.array_bytes, "encoded_size", None)
        if size is None:
            return None
        size = size(self.encoded_shape(shape), dtype)
        for codec in self.bytes_codecs:
            if not hasattr(codec, "encoded_size"):
                return None
            size = codec.encoded_size(size)
        return size

    def encode(self, chunk: np.ndarray, fill: Any) -> bytes | memoryview:
        for codec in self.array:
            chunk = codec.encode(chunk)
        data = self.array_bytes.encode(chunk, fill)
        for codec in self.bytes_codecs:
            data = codec.encode(data)
        return data

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype, fill: Any,
               where: str) -> np.ndarray:
        """The chunk of ``shape`` encoded in ``data``; CorruptDataError naming ``where``."""
        inner = self.encoded_shape(shape)
        size = getattr(self.array_bytes, "encoded_size", None)
        raw = math.prod(shape) * dtype.itemsize
        # the size each bytes codec's output must have, where it can be known
        sizes = [size(inner, dtype) if size is not None else None]
        for codec in self.bytes_codecs:
            known = sizes[-1] is not None and hasattr(codec, "encoded_size")
            sizes.append(codec.encoded_size(sizes[-1]) if known else None)
        for codec, expected in zip(reversed(self.bytes_codecs), reversed(sizes[:-1])):
            limit = expected if expected is not None else CHUNK_SLACK * raw + CHUNK_SLACK_BYTES
            data = codec.decode(data, where, limit)
        chunk = self.array_bytes.decode(data, inner, dtype, fill, where)
        for codec in reversed(self.array):
            chunk = codec.decode(chunk)
        return chunk

    def token(self, dtype: np.dtype) -> str:
        """The ChunkStore encoding token ("raw C <u2", "gzip C >f4", "zstd C <u1"), or
        "" where the bytes are not a plain compression of the C-order values."""
        if self.array or not isinstance(self.array_bytes, Bytes) or len(self.bytes_codecs) > 1:
            return ""
        compression = "raw" if not self.bytes_codecs else \
            {Gzip: "gzip", Zstd: "zstd"}.get(type(self.bytes_codecs[0]), "")
        if not compression:
            return ""
        order = ">" if self.array_bytes.endian == "big" and dtype.itemsize > 1 else "<"
        return f"{compression} C {order}{dtype.kind}{dtype.itemsize}"


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


def parse_codec(codec: Any, dtype: np.dtype, shape: tuple[int, ...], where: str) -> Codec:
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
    array, array_bytes, after = [], None, []
    for item in codecs:
        codec = parse_codec(item, dtype, shape, where)
        if codec.kind == "array":
            if array_bytes is not None:
                raise SpecError(f"{where}: array -> array codec {codec.name} after the array "
                                f"-> bytes codec")
            array.append(codec)
            shape = codec.encoded_shape(shape)
        elif codec.kind == "array_bytes":
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
