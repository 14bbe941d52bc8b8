"""ngshard: the Neuroglancer precomputed sharded format in Python.

Sharded uint64 -> bytes stores (chunk IDs, skeleton, mesh and annotation segment IDs) on local
disk, HTTP or object storage::

    import ngshard
    kv = ngshard.open_kv("gs://bucket/skeletons")   # spec from <url>/info
    data = kv.get_many([1, 2, 3])                   # {key: bytes}, batched reads
"""

from importlib.metadata import PackageNotFoundError, version

from . import serve  # the package, callable: serve(path_or_url, host="127.0.0.1", port=0)
from .errors import (
    ConflictError,
    CorruptDataError,
    InvalidKeyError,
    MissingDependencyError,
    NgShardError,
    NotFoundError,
    ReadOnlyError,
    SpecError,
    StorageWriteError,
)
from .sharded import ShardedKV, ShardingSpec, open_kv, write_kv

try:
    __version__ = version("ngshard")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"

_VOLUME_NAMES = ("Volume", "create_volume", "open_volume")


def __getattr__(name: str):
    # Volumes pull in image and segmentation codecs: load them on first use only.
    if name in _VOLUME_NAMES:
        from . import volume

        return getattr(volume, name)
    raise AttributeError(f"module 'ngshard' has no attribute {name!r}")

__all__ = [
    "ConflictError",
    "CorruptDataError",
    "InvalidKeyError",
    "MissingDependencyError",
    "NgShardError",
    "NotFoundError",
    "ReadOnlyError",
    "ShardedKV",
    "ShardingSpec",
    "Volume",
    "SpecError",
    "StorageWriteError",
    "create_volume",
    "open_kv",
    "open_volume",
    "serve",
    "write_kv",
]
