"""The ``sharding_indexed`` codec, pure: its configuration, the geometry of inner chunks in a
shard, and whole-shard encoding and decoding (what nested sharding needs, and what a shard
read or written whole goes through). Partial reads of stored shards are ``reader.py``'s."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np

from ..errors import CorruptDataError, SpecError
from ..jsondoc import Doc, is_int, kind
from ..types import IndexLocation, Place
from .codec_json import parse_pipeline
from .codecs import ArrayBytesCodec, CodecPipeline
from .dtypes import is_fill
from .shard_index import ShardIndex, decode_index, encode_index, index_nbytes, index_range, lay_out


@dataclass(frozen=True)
class ShardingCodec(ArrayBytesCodec):
    """Inner chunks of ``chunk_shape`` in a shard of ``shard_shape``, each encoded with
    ``codecs``, found through an index encoded with ``index_codecs``."""

    chunk_shape: tuple[int, ...]
    shard_shape: tuple[int, ...]
    codecs: CodecPipeline
    index_codecs: CodecPipeline
    index_location: str = "end"
    name = "sharding_indexed"

    @classmethod
    def from_config(cls, config: Doc, dtype: np.dtype, shape: tuple[int, ...], where: str
                    ) -> ShardingCodec:
        inner = config.get("chunk_shape")
        if not isinstance(inner, list) or len(inner) != len(shape) or not all(
                is_int(c) and c > 0 and n % c == 0 for c, n in zip(inner, shape)):
            raise SpecError(f"{where}: sharding chunk_shape {kind(inner)} must divide the "
                            f"shard shape {list(shape)} on every axis")
        inner = tuple(inner)
        location = config.text("index_location", "end", choices=get_args(IndexLocation))
        cps = tuple(n // c for n, c in zip(shape, inner))
        index_codecs = parse_pipeline(config.get("index_codecs"), np.dtype(np.uint64),
                                      (*cps, 2), f"{where} (index_codecs)")
        codec = cls(inner, tuple(shape), parse_pipeline(config.get("codecs"), dtype, inner,
                                                        f"{where} (sharding codecs)"),
                    index_codecs, location)
        try:
            codec.index_nbytes  # noqa: B018 (a variable-size index codec fails here)
        except SpecError as e:
            raise SpecError(f"{where}: {e}") from None
        return codec

    def configuration(self) -> dict:
        return {"chunk_shape": list(self.chunk_shape), "codecs": self.codecs.to_json(),
                "index_codecs": self.index_codecs.to_json(),
                "index_location": self.index_location}

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(n // c for n, c in zip(self.shard_shape, self.chunk_shape))

    @property
    def num_chunks(self) -> int:
        return math.prod(self.chunks_per_shard)

    @property
    def index_nbytes(self) -> int:
        return index_nbytes(self.index_codecs, self.chunks_per_shard)

    def index_range(self, shard_size: int) -> tuple[int, int]:
        """[start, end) of the index in a stored shard of ``shard_size`` bytes."""
        return index_range(shard_size, self.index_nbytes, self.index_location)

    def decode_index(self, data: Any, shard_size: int, where: Place) -> ShardIndex:
        if len(data) != self.index_nbytes:
            raise CorruptDataError(f"{where}: {shard_size} bytes, shorter than its shard "
                                   f"index of {self.index_nbytes}")
        return decode_index(data, self.index_codecs, self.chunks_per_shard, shard_size, where)

    def read_index(self, shard: Any, where: Place) -> ShardIndex:
        """The index of a whole shard's bytes."""
        start, end = self.index_range(len(shard))
        if start < 0:
            raise CorruptDataError(f"{where}: {len(shard)} bytes, shorter than its shard "
                                   f"index of {self.index_nbytes}")
        return self.decode_index(memoryview(shard)[start:end], len(shard), where)

    # --- whole shards -----------------------------------------------------------------------

    def assemble(self, blobs: Sequence[Any]) -> list[Any] | None:
        """The parts of a shard holding ``blobs`` (one per inner chunk in C order, None where
        empty), written in that order; None if every one is empty."""
        sizes = np.array([-1 if b is None else len(b) for b in blobs], np.int64)
        if (sizes < 0).all():
            return None
        index = lay_out(sizes, self.index_nbytes, self.index_location)
        head = encode_index(index, self.index_codecs, self.chunks_per_shard)
        data = [b for b in blobs if b is not None]
        return [head, *data] if self.index_location == "start" else [*data, head]

    def inner_boxes(self) -> list[tuple[slice, ...]]:
        """The index into a shard of each inner chunk, in C order."""
        grid = np.indices(self.chunks_per_shard).reshape(len(self.chunk_shape), -1).T
        return [tuple(slice(p * c, (p + 1) * c) for p, c in zip(row, self.chunk_shape))
                for row in grid.tolist()]

    def encode(self, shard: np.ndarray, fill: Any) -> bytes:
        blobs = [None if is_fill(shard[box], fill) else self.codecs.encode(shard[box], fill)
                 for box in self.inner_boxes()]
        parts = self.assemble(blobs)
        if parts is None:  # inside another codec, an empty shard is still an index
            return encode_index(ShardIndex.new(self.num_chunks), self.index_codecs,
                                self.chunks_per_shard)
        return b"".join(bytes(p) for p in parts)

    def decode(self, data: Any, shape: tuple[int, ...], dtype: np.dtype, fill: Any,
               where: Place) -> np.ndarray:
        index = self.read_index(data, where)
        out = np.full(shape, fill, dtype)
        view, empty = memoryview(data), index.empty.tolist()
        for i, box in enumerate(self.inner_boxes()):
            offset, nbytes = index.table[i].tolist()
            if not empty[i]:
                out[box] = self.codecs.decode(view[offset:offset + nbytes], self.chunk_shape,
                                              dtype, fill, f"{where} inner chunk {i}")
        return out
