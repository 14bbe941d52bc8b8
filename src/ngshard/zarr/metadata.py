"""Zarr array metadata, pure: ``zarr.json`` (v3) and ``.zarray``/``.zattrs`` (v2) parsed into
one model (shape, dtype, chunk grid, fill value, codec pipeline, chunk key encoding), and a v3
document written from it. A v2 array becomes the v3 pipeline it amounts to: ``order: F`` a
transpose, its dtype's byte order a ``bytes`` codec, its compressor a bytes -> bytes codec.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SpecError
from .codec_json import parse_pipeline
from .codecs import (
    Blosc,
    Bytes,
    BytesBytesCodec,
    CodecPipeline,
    Gzip,
    Transpose,
    Zlib,
    Zstd,
)
from .dtypes import decode_fill, v2_dtype, v3_dtype
from .sharding import ShardingCodec

V3_NAME, V2_NAME, V2_ATTRS = "zarr.json", ".zarray", ".zattrs"


@dataclass(frozen=True)
class KeyEncoding:
    """How a chunk's grid position names its object: ``default`` ("c/1/2", or "c.1.2") or
    ``v2`` ("1.2", or "1/2")."""

    kind: str = "default"
    separator: str = "/"

    def to_json(self) -> dict:
        return {"name": self.kind, "configuration": {"separator": self.separator}}

    def keys(self, positions: np.ndarray | Sequence[Sequence[int]]) -> list[str]:
        sep = self.separator
        rows = (sep.join(map(str, row)) for row in np.asarray(positions).tolist())
        if self.kind == "default":
            return [f"c{sep}{row}" for row in rows]
        return list(rows)

    def parse(self, name: str, ndim: int) -> tuple[int, ...] | None:
        """The grid position a key names, None if it names none."""
        if self.kind == "default":
            if not name.startswith(f"c{self.separator}"):
                return None
            name = name[2:]
        parts = name.split(self.separator)
        if len(parts) != ndim or not all(p.isdigit() for p in parts):
            return None
        return tuple(int(p) for p in parts)


@dataclass(frozen=True)
class ArrayMetadata:
    """One array's metadata, either format. ``chunk_shape`` is the chunk grid's (the shard
    shape of a sharded array); ``document`` the JSON as read, kept to be written back with
    a new shape."""

    zarr_format: int
    shape: tuple[int, ...]
    dtype: np.dtype
    chunk_shape: tuple[int, ...]
    fill_value: Any
    codecs: CodecPipeline
    key_encoding: KeyEncoding
    attributes: dict
    dimension_names: tuple[str | None, ...] | None
    document: dict

    @property
    def name(self) -> str:
        """The metadata object's name."""
        return V3_NAME if self.zarr_format == 3 else V2_NAME

    @property
    def sharding(self) -> ShardingCodec | None:
        """The sharding codec when shards are stored as ``sharding_indexed`` alone (inner
        chunks read one by one); None otherwise (nested inside other codecs, a shard is one
        chunk decoded whole)."""
        c = self.codecs
        return c.array_bytes if isinstance(c.array_bytes, ShardingCodec) and not c.array and \
            not c.bytes_codecs else None

    @property
    def shard_codec(self) -> ShardingCodec:
        """:attr:`sharding`, for code that runs on such sharded arrays alone."""
        sharding = self.sharding
        if sharding is None:
            raise SpecError(f"{self.name}: not sharded with sharding_indexed alone")
        return sharding

    @property
    def chunks(self) -> tuple[int, ...]:
        """The read and write granule: the inner chunk shape, or the chunk shape."""
        return self.sharding.chunk_shape if self.sharding else self.chunk_shape

    @property
    def chunk_codecs(self) -> CodecPipeline:
        """The pipeline of one granule."""
        return self.sharding.codecs if self.sharding else self.codecs

    @property
    def grid(self) -> tuple[int, ...]:
        """Granules per axis."""
        return tuple(-(-n // c) for n, c in zip(self.shape, self.chunks))

    def resized(self, shape: tuple[int, ...]) -> ArrayMetadata:
        return dataclasses.replace(self, shape=tuple(shape),
                                   document={**self.document, "shape": list(shape)})

    def to_json(self) -> dict:
        return self.document


# --- v3 ---------------------------------------------------------------------------------------

_V3_KEYS = {"zarr_format", "node_type", "shape", "data_type", "chunk_grid",
            "chunk_key_encoding", "fill_value", "codecs", "attributes", "dimension_names",
            "storage_transformers"}


def _ints(value: Any, what: str, where: str, positive: bool = False) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= (1 if positive else 0)
            for v in value):
        least = "positive" if positive else "non-negative"
        raise SpecError(f"{where}: {what} must be a list of {least} integers, got {value!r}")
    return tuple(value)


def _key_encoding(value: Any, where: str) -> KeyEncoding:
    if not isinstance(value, dict) or value.get("name") not in ("default", "v2"):
        raise SpecError(f"{where}: unsupported chunk_key_encoding {value!r} (default or v2)")
    kind = value["name"]
    sep = (value.get("configuration") or {}).get("separator", "/" if kind == "default" else ".")
    if sep not in ("/", "."):
        raise SpecError(f"{where}: chunk key separator {sep!r} (must be '/' or '.')")
    return KeyEncoding(kind, sep)


def parse_v3(doc: Any, where: str) -> ArrayMetadata:
    """The metadata of a ``zarr.json``; SpecError naming ``where`` and the field."""
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3:
        raise SpecError(f"{where}: not Zarr v3 metadata (zarr_format 3)")
    if doc.get("node_type") != "array":
        raise SpecError(f"{where}: node_type {doc.get('node_type')!r}, not an array")
    for key in doc.keys() - _V3_KEYS:
        if not (isinstance(doc[key], dict) and doc[key].get("must_understand") is False):
            raise SpecError(f"{where}: unknown field {key!r} that must be understood")
    if doc.get("storage_transformers"):
        raise SpecError(f"{where}: storage transformers are not supported: "
                        f"{doc['storage_transformers']!r}")
    shape = _ints(doc.get("shape"), "shape", where)
    dtype = v3_dtype(doc.get("data_type"), where)
    grid = doc.get("chunk_grid")
    if not isinstance(grid, dict) or grid.get("name") != "regular":
        raise SpecError(f"{where}: unsupported chunk_grid {grid!r} (regular only)")
    chunks = _ints((grid.get("configuration") or {}).get("chunk_shape"), "chunk_shape", where,
                   positive=True)
    if len(chunks) != len(shape) or not shape:
        raise SpecError(f"{where}: chunk_shape {list(chunks)} for shape {list(shape)} (the "
                        f"same number of axes, at least one)")
    names = doc.get("dimension_names")
    if names is not None and (not isinstance(names, list) or len(names) != len(shape) or
                              not all(n is None or isinstance(n, str) for n in names)):
        raise SpecError(f"{where}: dimension_names {names!r} for {len(shape)} axes")
    attributes = doc.get("attributes", {})
    if not isinstance(attributes, dict):
        raise SpecError(f"{where}: attributes must be an object")
    return ArrayMetadata(
        3, shape, dtype, chunks, decode_fill(doc.get("fill_value"), dtype, where),
        parse_pipeline(doc.get("codecs"), dtype, chunks, where),
        _key_encoding(doc.get("chunk_key_encoding"), where), attributes,
        None if names is None else tuple(names), doc)


def v3_document(shape: tuple[int, ...], dtype_name: str, chunk_shape: tuple[int, ...],
                fill_json: Any, codecs: list[dict], dimension_names: Any = None,
                attributes: dict | None = None) -> dict:
    """A ``zarr.json`` for a new array (default key encoding, "/" separator)."""
    doc = {"zarr_format": 3, "node_type": "array", "shape": list(shape),
           "data_type": dtype_name,
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
           "chunk_key_encoding": KeyEncoding().to_json(), "fill_value": fill_json,
           "codecs": codecs, "attributes": attributes or {}}
    if dimension_names is not None:
        doc["dimension_names"] = list(dimension_names)
    return doc


# --- v2 ---------------------------------------------------------------------------------------

def _compressor(config: Any, dtype: np.dtype, where: str) -> tuple[BytesBytesCodec, ...]:
    if config is None:
        return ()
    kind = config.get("id") if isinstance(config, dict) else None
    level = config.get("level", 1) if isinstance(config, dict) else 1
    if kind == "gzip":
        return (Gzip(level),)
    if kind == "zlib":
        return (Zlib(level),)
    if kind == "zstd":
        return (Zstd(level, bool(config.get("checksum", False))),)
    if kind == "blosc":
        Blosc.module(f"{where}: compressor blosc")
        return (Blosc(config.get("cname", "lz4"), config.get("clevel", 5),
                      config.get("shuffle", 1), dtype.itemsize, config.get("blocksize", 0)),)
    raise SpecError(f"{where}: unsupported compressor {config!r} (ngshard reads gzip, zlib, "
                    f"zstd, blosc or none)")


def parse_v2(doc: Any, attrs: Any, where: str) -> ArrayMetadata:
    """The metadata of a ``.zarray`` (with its ``.zattrs``, if any)."""
    if not isinstance(doc, dict) or doc.get("zarr_format") != 2:
        raise SpecError(f"{where}: not Zarr v2 array metadata (zarr_format 2)")
    shape = _ints(doc.get("shape"), "shape", where)
    chunks = _ints(doc.get("chunks"), "chunks", where, positive=True)
    if len(chunks) != len(shape) or not shape:
        raise SpecError(f"{where}: chunks {list(chunks)} for shape {list(shape)}")
    stored = v2_dtype(doc.get("dtype"), where)
    if doc.get("filters"):
        names = [f.get("id") if isinstance(f, dict) else f for f in doc["filters"]]
        raise SpecError(f"{where}: filters are not supported: {names}")
    order = doc.get("order", "C")
    if order not in ("C", "F"):
        raise SpecError(f"{where}: order {order!r} (must be 'C' or 'F')")
    sep = doc.get("dimension_separator", ".")
    if sep not in ("/", "."):
        raise SpecError(f"{where}: dimension_separator {sep!r}")
    dtype = stored.newbyteorder("=")
    endian = None if stored.itemsize == 1 else "big" if stored.byteorder == ">" or (
        stored.byteorder == "=" and np.little_endian is False) else "little"
    transpose = (Transpose(tuple(range(len(shape)))[::-1]),) if order == "F" else ()
    pipeline = CodecPipeline(transpose, Bytes(endian), _compressor(doc.get("compressor"),
                                                                   stored, where))
    if attrs is not None and not isinstance(attrs, dict):
        raise SpecError(f"{where}: .zattrs must hold a JSON object")
    return ArrayMetadata(2, shape, dtype, chunks,
                         decode_fill(doc.get("fill_value"), dtype, where, zarr_format=2),
                         pipeline, KeyEncoding("v2", sep), attrs or {}, None, doc)


def chunk_nbytes(meta: ArrayMetadata) -> int:
    """Decoded bytes of one granule."""
    return math.prod(meta.chunks) * meta.dtype.itemsize
