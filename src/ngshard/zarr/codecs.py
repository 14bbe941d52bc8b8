"""The Zarr v3 codec pipeline, pure: a chunk (numpy array) through its array -> array codecs
(``transpose``), one array -> bytes codec (``bytes``, or ``sharding_indexed`` from
``sharding.py``) and its bytes -> bytes codecs (``gzip``, ``zstd``, ``crc32c``, ``blosc``; and
v2's ``zlib``), and back. Decoding checks every size it can know (a chunk's bytes, a
compressor's output) and raises CorruptDataError naming the chunk. From their JSON:
``codec_json.py``.
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
from ..errors import CorruptDataError, MissingDependencyError
from ..limits import CHUNK_SLACK, CHUNK_SLACK_BYTES
from ..types import Blob, Place


class Codec:
    """One codec: ``kind`` is "array" (array -> array), "array_bytes" or "bytes"; each kind
    is a subclass below, with the methods the pipeline calls."""

    kind = "bytes"
    name = ""

    def configuration(self) -> dict:
        return {}

    def to_json(self) -> dict:
        config = self.configuration()
        return {"name": self.name, "configuration": config} if config else {"name": self.name}


class ArrayArrayCodec(Codec):
    """array -> array."""

    kind = "array"

    def encoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def encode(self, chunk: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def decode(self, chunk: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class ArrayBytesCodec(Codec):
    """array -> bytes: the one codec between the array codecs and the bytes codecs."""

    kind = "array_bytes"

    def encoded_size(self, shape: tuple[int, ...], dtype: np.dtype) -> int | None:
        """Bytes of a chunk of ``shape`` encoded, None where it varies."""
        return None

    def encode(self, chunk: np.ndarray, fill: Any) -> Blob:
        raise NotImplementedError

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype, fill: Any,
               where: Place) -> np.ndarray:
        raise NotImplementedError


class BytesBytesCodec(Codec):
    """bytes -> bytes."""

    kind = "bytes"

    def encoded_size(self, size: int) -> int | None:
        """Bytes ``size`` bytes encode to, None where it varies."""
        return None

    def encode(self, data: Any) -> Blob:
        raise NotImplementedError

    def decode(self, data: Any, where: Place, limit: int) -> Blob:
        """The bytes ``data`` encodes, at most ``limit`` of them; CorruptDataError naming
        ``where`` if it does not decode."""
        raise NotImplementedError


@dataclass(frozen=True)
class _Leveled(BytesBytesCodec):
    """A compression configured by its level alone."""

    level: int

    def configuration(self) -> dict:
        return {"level": self.level}


# --- array -> array ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Transpose(ArrayArrayCodec):
    """Permute the axes: encoded axis ``i`` is decoded axis ``order[i]``."""

    order: tuple[int, ...]
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
class Bytes(ArrayBytesCodec):
    """The values in C order, little or big endian (None: one byte per value)."""

    endian: str | None = "little"
    name = "bytes"

    def configuration(self) -> dict:
        return {} if self.endian is None else {"endian": self.endian}

    def stored(self, dtype: np.dtype) -> np.dtype:
        return dtype.newbyteorder(">" if self.endian == "big" else "<")

    def encoded_size(self, shape: tuple[int, ...], dtype: np.dtype) -> int:
        return math.prod(shape) * dtype.itemsize

    def encode(self, chunk: np.ndarray, fill: Any) -> Blob:
        stored = self.stored(chunk.dtype)
        if chunk.dtype != stored and chunk.dtype.itemsize > 1:
            chunk = chunk.astype(stored)
        return np.ascontiguousarray(chunk).reshape(-1).view(np.uint8).data

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype, fill: Any,
               where: Place) -> np.ndarray:
        expected = self.encoded_size(shape, dtype)
        if len(data) != expected:
            raise CorruptDataError(f"{where}: {len(data)} bytes, not the {expected} of a "
                                   f"{'x'.join(map(str, shape))} {dtype} chunk")
        chunk = np.frombuffer(data, self.stored(dtype)).reshape(shape)
        return chunk if chunk.dtype == dtype else chunk.astype(dtype)


# --- bytes -> bytes ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Crc32c(BytesBytesCodec):
    """A CRC32C of the bytes appended to them (4 bytes, little endian)."""

    name = "crc32c"

    def encoded_size(self, size: int) -> int:
        return size + 4

    def encode(self, data: Any) -> bytes:
        return bytes(data) + struct.pack("<I", google_crc32c.value(bytes(data)))

    def decode(self, data: Any, where: Place, limit: int) -> Any:
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
class Gzip(_Leveled):
    level: int = 6
    name = "gzip"

    def encode(self, data: Any) -> Blob:
        return gzip_compress(bytes(data), self.level)

    def decode(self, data: Any, where: Place, limit: int) -> Blob:
        return gzip_decompress(data, where, limit)


@dataclass(frozen=True)
class Zstd(_Leveled):
    level: int = 0
    checksum: bool = False
    name = "zstd"

    def configuration(self) -> dict:
        return {"level": self.level, "checksum": self.checksum}

    def encode(self, data: Any) -> bytes:
        return zstd_compress(bytes(data), self.level, self.checksum)

    def decode(self, data: Any, where: Place, limit: int) -> bytes:
        return zstd_decompress(data, where, limit)


@dataclass(frozen=True)
class Zlib(_Leveled):
    """A zlib stream (Zarr v2's ``zlib`` compressor)."""

    level: int = 1
    name = "zlib"

    def encode(self, data: Any) -> bytes:
        return zlib.compress(bytes(data), self.level)

    def decode(self, data: Any, where: Place, limit: int) -> bytes:
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
class Blosc(BytesBytesCodec):
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
    def module(where: Place = "") -> Any:
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

    def decode(self, data: Any, where: Place, limit: int) -> bytes:
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

    array: tuple[ArrayArrayCodec, ...]
    array_bytes: ArrayBytesCodec
    bytes_codecs: tuple[BytesBytesCodec, ...]

    def to_json(self) -> list[dict]:
        return [c.to_json() for c in (*self.array, self.array_bytes, *self.bytes_codecs)]

    def encoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for codec in self.array:
            shape = codec.encoded_shape(shape)
        return shape

    def encoded_size(self, shape: tuple[int, ...], dtype: np.dtype) -> int | None:
        """Bytes of an encoded chunk where every codec's output size is fixed, else None."""
        size = self.array_bytes.encoded_size(self.encoded_shape(shape), dtype)
        for codec in self.bytes_codecs:
            if size is None:
                return None
            size = codec.encoded_size(size)
        return size

    def encode(self, chunk: np.ndarray, fill: Any) -> Blob:
        for a in self.array:
            chunk = a.encode(chunk)
        data = self.array_bytes.encode(chunk, fill)
        for b in self.bytes_codecs:
            data = b.encode(data)
        return data

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype, fill: Any,
               where: Place) -> np.ndarray:
        """The chunk of ``shape`` encoded in ``data``; CorruptDataError naming ``where``."""
        inner = self.encoded_shape(shape)
        raw = math.prod(shape) * dtype.itemsize
        # the size each bytes codec's output must have, where it can be known
        sizes = [self.array_bytes.encoded_size(inner, dtype)]
        for b in self.bytes_codecs:
            size = sizes[-1]
            sizes.append(None if size is None else b.encoded_size(size))
        for b, expected in zip(reversed(self.bytes_codecs), reversed(sizes[:-1])):
            limit = expected if expected is not None else CHUNK_SLACK * raw + CHUNK_SLACK_BYTES
            data = b.decode(data, where, limit)
        chunk = self.array_bytes.decode(data, inner, dtype, fill, where)
        for a in reversed(self.array):
            chunk = a.decode(chunk)
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
