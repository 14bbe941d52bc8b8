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
from ..jsondoc import INT64_MAX, Doc, kind
from ..limits import MAX_RANK
from ..storage.names import shown
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


def _shape(d: Doc, key: str, positive: bool = False) -> tuple[int, ...]:
    """A shape or chunk shape: sizes in int64, chunks at least 1, at most MAX_RANK axes."""
    shape = d.integers(key, lo=1 if positive else 0, hi=INT64_MAX)
    if len(shape) > MAX_RANK:
        raise d.fail(f"has {len(shape)} axes, more than {MAX_RANK}", key)
    return shape


def _chunk_fits(chunks: tuple[int, ...], dtype: np.dtype, where: str) -> None:
    """A chunk is one array: its bytes must fit int64 (numpy refuses larger arrays)."""
    if math.prod(chunks) * dtype.itemsize >= 1 << 63:
        raise SpecError(f"{where}: a chunk of {list(chunks)} {dtype} passes 2**63 bytes")


def _key_encoding(d: Doc) -> KeyEncoding:
    enc = d.obj("chunk_key_encoding")
    kind = enc.text("name", choices=("default", "v2"))
    config = enc.obj("configuration", None)
    sep = "/" if kind == "default" else "."
    if config is not None:
        sep = config.text("separator", sep, choices=("/", "."))
    return KeyEncoding(kind, sep)


def parse_v3(doc: Any, where: str) -> ArrayMetadata:
    """The metadata of a ``zarr.json``; SpecError naming ``where`` and the field."""
    d = Doc(doc, where)
    if d.get("zarr_format") != 3:
        raise SpecError(f"{where}: not Zarr v3 metadata (zarr_format 3)")
    if d.get("node_type") != "array":
        raise SpecError(f"{where}: node_type {kind(d.get('node_type'))}, not an array")
    for key in d.keys() - _V3_KEYS:
        if not (isinstance(doc[key], dict) and doc[key].get("must_understand") is False):
            raise SpecError(f"{where}: unknown field {shown(key)} that must be understood")
    if d.get("storage_transformers"):
        raise SpecError(f"{where}: storage transformers are not supported: "
                        f"{kind(d.get('storage_transformers'))}")
    shape = _shape(d, "shape")
    dtype = v3_dtype(d.get("data_type"), where)
    grid = d.obj("chunk_grid")
    if grid.get("name") != "regular":
        raise SpecError(f"{where}: unsupported chunk_grid {kind(grid.get('name'))} (regular "
                        f"only)")
    chunks = _shape(grid.obj("configuration"), "chunk_shape", positive=True)
    if len(chunks) != len(shape) or not shape:
        raise SpecError(f"{where}: chunk_shape {list(chunks)} for shape {list(shape)} (the "
                        f"same number of axes, at least one)")
    _chunk_fits(chunks, dtype, where)
    names = d.array("dimension_names", None, length=len(shape))
    if names is not None and not all(n is None or isinstance(n, str) for n in names):
        raise SpecError(f"{where}: dimension_names must be strings or null")
    attributes = d.obj("attributes", None)
    return ArrayMetadata(
        3, shape, dtype, chunks, decode_fill(d.get("fill_value"), dtype, where),
        parse_pipeline(d.get("codecs"), dtype, chunks, where), _key_encoding(d),
        {} if attributes is None else attributes.value,
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

def _compressor(d: Doc, dtype: np.dtype) -> tuple[BytesBytesCodec, ...]:
    config = d.obj("compressor", None)
    if config is None:
        return ()
    name = config.get("id")
    if name in ("gzip", "zlib", "zstd"):
        level = config.integer("level", 1, lo=-(1 << 31), hi=(1 << 31) - 1)
        return (Gzip(level),) if name == "gzip" else (Zlib(level),) if name == "zlib" else \
            (Zstd(level, bool(config.get("checksum", False))),)
    if name == "blosc":
        Blosc.module(f"{d.where}: compressor blosc")
        return (Blosc(config.text("cname", "lz4"), config.integer("clevel", 5, lo=0, hi=9),
                      config.integer("shuffle", 1, lo=-1, hi=2), dtype.itemsize,
                      config.integer("blocksize", 0, lo=0, hi=(1 << 31) - 1)),)
    raise SpecError(f"{d.where}: unsupported compressor {kind(name)} (ngshard reads gzip, "
                    f"zlib, zstd, blosc or none)")


def parse_v2(doc: Any, attrs: Any, where: str) -> ArrayMetadata:
    """The metadata of a ``.zarray`` (with its ``.zattrs``, if any)."""
    d = Doc(doc, where)
    if d.get("zarr_format") != 2:
        raise SpecError(f"{where}: not Zarr v2 array metadata (zarr_format 2)")
    shape = _shape(d, "shape")
    chunks = _shape(d, "chunks", positive=True)
    if len(chunks) != len(shape) or not shape:
        raise SpecError(f"{where}: chunks {list(chunks)} for shape {list(shape)}")
    stored = v2_dtype(d.get("dtype"), where)
    _chunk_fits(chunks, stored, where)
    filters = d.get("filters")
    if filters:
        names = [f.get("id") if isinstance(f, dict) else f for f in filters] \
            if isinstance(filters, list) else filters
        raise SpecError(f"{where}: filters are not supported: {shown(names)}")
    order = d.text("order", "C", choices=("C", "F"))
    sep = d.text("dimension_separator", ".", choices=("/", "."))
    dtype = stored.newbyteorder("=")
    endian = None if stored.itemsize == 1 else "big" if stored.byteorder == ">" or (
        stored.byteorder == "=" and np.little_endian is False) else "little"
    transpose = (Transpose(tuple(range(len(shape)))[::-1]),) if order == "F" else ()
    pipeline = CodecPipeline(transpose, Bytes(endian), _compressor(d, stored))
    if attrs is not None and not isinstance(attrs, dict):
        raise SpecError(f"{where}: .zattrs must hold a JSON object")
    return ArrayMetadata(2, shape, dtype, chunks,
                         decode_fill(doc.get("fill_value"), dtype, where, zarr_format=2),
                         pipeline, KeyEncoding("v2", sep), attrs or {}, None, doc)


def chunk_nbytes(meta: ArrayMetadata) -> int:
    """Decoded bytes of one granule."""
    return math.prod(meta.chunks) * meta.dtype.itemsize
