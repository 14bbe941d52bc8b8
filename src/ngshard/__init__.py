"""ngshard: the Neuroglancer precomputed sharded format in Python.

Sharded uint64 -> bytes stores (chunk IDs, skeleton, mesh and annotation segment IDs) on local
disk, HTTP or object storage::

    import ngshard
    kv = ngshard.open_kv("gs://bucket/skeletons")   # spec from <url>/info
    data = kv.get_many([1, 2, 3])                   # {key: bytes}, batched reads
"""

from .errors import (
    ConflictError,
    CorruptDataError,
    InvalidKeyError,
    NgShardError,
    ReadOnlyError,
    SpecError,
)
from .kv import ShardedKV, open_kv, write_kv
from .spec import ShardingSpec

__version__ = "0.1.0"

__all__ = [
    "ConflictError",
    "CorruptDataError",
    "InvalidKeyError",
    "NgShardError",
    "ReadOnlyError",
    "ShardedKV",
    "ShardingSpec",
    "SpecError",
    "open_kv",
    "write_kv",
]
