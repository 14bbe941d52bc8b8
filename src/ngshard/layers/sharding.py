"""Choosing the sharding of a segment layer (skeletons, meshes, annotation indices) from how many
ids it holds: ``sharding="auto"``.

Segment ids are scattered, so the hash is murmurhash3 (identity would pile consecutive ids
into one minishard). The rule:

- about 64 ids per minishard, so a lookup fetches a minishard index of ~1.5 KiB raw;
- at most 2**14 ids per shard (and at most ``shard_bytes`` of values), so a bulk write has
  several shards to build in parallel and no shard file is huge; at most 2**11 minishards per
  shard, so the shard index readers fetch whole is at most 32 KiB;
- minishard indices gzip-compressed; data gzip-compressed unless the values are already
  compressed (Draco meshes), must stay raw (mesh fragments read by byte range) or are tiny
  (under 128 bytes on average, such as single annotations).
"""

from __future__ import annotations

import math

from ..errors import SpecError
from ..limits import (
    DEFAULT_SEGMENT_SHARD_BYTES,
    IDS_PER_MINISHARD,
    MAX_IDS_PER_SHARD,
    MAX_MINISHARD_BITS,
    SMALL_VALUE,
    UNKNOWN_COUNT,
)
from ..sharded import ShardingSpec
from ..types import DataEncoding


def _bits(n: float) -> int:
    """The least b with 2**b >= n (0 for n <= 1)."""
    return max(0, math.ceil(math.log2(n))) if n > 1 else 0


def segment_sharding(count: int | None, value_bytes: float | None = None, *,
                     data_encoding: DataEncoding = "gzip",
                     shard_bytes: int = DEFAULT_SEGMENT_SHARD_BYTES) -> ShardingSpec:
    """The "auto" sharding for a layer of ``count`` ids whose values average ``value_bytes``.

    Parameters
    ----------
    count
        How many ids (None: unknown, taken as 2**20).
    value_bytes
        Mean encoded size of a value, if known: shards then hold at most ``shard_bytes``.
    data_encoding
        "gzip" or "raw" (mesh layers need raw).

    Returns
    -------
    ShardingSpec
    """
    count = UNKNOWN_COUNT if count is None else max(1, int(count))
    per_shard = MAX_IDS_PER_SHARD
    if value_bytes:
        per_shard = max(1, min(per_shard, int(shard_bytes // max(1.0, value_bytes))))
    shard_bits = _bits(count / per_shard)
    in_shard = count / (1 << shard_bits)
    minishard_bits = min(MAX_MINISHARD_BITS, _bits(in_shard / IDS_PER_MINISHARD))
    return ShardingSpec(hash="murmurhash3_x86_128", preshift_bits=0,
                        minishard_bits=minishard_bits, shard_bits=shard_bits,
                        minishard_index_encoding="gzip", data_encoding=data_encoding)


def resolve_sharding(sharding: None | str | dict | ShardingSpec, count: int | None,
                     value_bytes: float | None = None, *, data_encoding: DataEncoding = "gzip"
                     ) -> ShardingSpec | None:
    """A writer's ``sharding`` argument as a spec (None: unsharded, a file per id)."""
    if sharding is None:
        return None
    if isinstance(sharding, ShardingSpec):
        return sharding
    if sharding == "auto":
        if value_bytes is not None and value_bytes < SMALL_VALUE:
            data_encoding = "raw"  # gzip would cost time and add its 18-byte frame
        return segment_sharding(count, value_bytes, data_encoding=data_encoding)
    if isinstance(sharding, (dict, str)):
        return ShardingSpec.from_json(sharding)
    raise SpecError(f"sharding must be None, 'auto', a ShardingSpec or its JSON, "
                    f"got {sharding!r}")
