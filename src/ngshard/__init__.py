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
    ChangedError,
    ConflictError,
    CorruptDataError,
    ExistsError,
    InvalidKeyError,
    MissingDependencyError,
    NgShardError,
    NotFoundError,
    ReadOnlyError,
    SpecError,
    StorageWriteError,
    UnlistableError,
)
from .sharded import ShardedKV, ShardingSpec, open_kv, write_kv

try:
    __version__ = version("ngshard")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"

_VOLUME_NAMES = ("Bounds", "Volume", "create_volume", "open_volume")
_LAYER_NAMES = ("Annotation", "AnnotationSet", "Annotations", "LegacyMeshes", "Mesh", "Meshes",
                "SegmentProperties", "Skeleton", "Skeletons", "open_annotations", "open_meshes",
                "open_segment_properties", "open_skeletons", "write_annotations",
                "write_legacy_meshes", "write_meshes", "write_segment_properties",
                "write_skeletons")


def __getattr__(name: str):
    # Volumes pull in image and segmentation codecs, layers their codecs (Draco), ngshard.dask
    # pulls in Dask, ngshard.zarr its codecs: load them on first use only.
    if name in _VOLUME_NAMES:
        from . import volume

        return getattr(volume, name)
    if name in ("dask", "zarr", "convert"):  # convert: the package, callable as convert(src, dst)
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name in _LAYER_NAMES:
        from . import layers

        return getattr(layers, name)
    if name == "open":
        from .layers import open_layer

        return open_layer
    raise AttributeError(f"module 'ngshard' has no attribute {name!r}")

__all__ = [
    "Annotations",
    "Bounds",
    "ChangedError",
    "ConflictError",
    "CorruptDataError",
    "ExistsError",
    "InvalidKeyError",
    "Meshes",
    "MissingDependencyError",
    "NgShardError",
    "NotFoundError",
    "ReadOnlyError",
    "ShardedKV",
    "ShardingSpec",
    "Volume",
    "SpecError",
    "StorageWriteError",
    "UnlistableError",
    "SegmentProperties",
    "Skeletons",
    "convert",
    "create_volume",
    "open_annotations",
    "open_kv",
    "open_meshes",
    "open_segment_properties",
    "open_skeletons",
    "open_volume",
    "serve",
    "write_annotations",
    "write_kv",
    "write_meshes",
    "write_segment_properties",
    "write_skeletons",
]
