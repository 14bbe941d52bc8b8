"""ngshard: the Neuroglancer precomputed format (sharded or not) and Zarr in Python.

Sharded uint64 -> bytes stores (chunk IDs, skeleton, mesh and annotation segment IDs) on local
disk, HTTP or object storage::

    import ngshard
    kv = ngshard.open_kv("gs://bucket/skeletons")   # spec from <url>/info
    data = kv.get_many([1, 2, 3])                   # {key: bytes}, batched reads

What is here (every ``url``: a path, an fsspec URL or a Neuroglancer source):

- Sharded stores: :class:`ShardingSpec`, :func:`open_kv` -> :class:`ShardedKV`,
  :func:`write_kv`.
- Volumes: :func:`open_volume`, :func:`create_volume` -> :class:`Volume`; :class:`Bounds`.
- Segment layers: :func:`write_skeletons`, :func:`write_meshes`,
  :func:`write_legacy_meshes`, :func:`write_annotations`, :func:`write_segment_properties`;
  :class:`Skeletons`, :class:`Meshes`, :class:`LegacyMeshes`, :class:`Annotations`,
  :class:`SegmentProperties` (and ``open_skeletons``, ... for each); :func:`attach` names
  meshes, skeletons and segment properties in a segmentation's info.
- :func:`open`: any layer by what is stored (a volume, a segment layer, a bare store, a
  zarr array).
- :func:`convert`: zarr <-> precomputed; :func:`downsample`: a pyramid in one pass;
  :func:`serve`: an HTTP server for Neuroglancer.
- :func:`mesh`, :func:`skeletonize`: a segmentation's meshes and skeletons, made by tasks
  on any executor.
- Subpackages: ``ngshard.zarr`` (zarr v2/v3 arrays, ``PrecomputedStore``), ``ngshard.dask``
  (the writers on a Dask cluster), ``ngshard.types`` (the ``Literal`` types of the
  signatures).
- Errors: :class:`NgShardError` and its subclasses.

Conventions: every ``write_*`` returns what it wrote, open for reading (``write_kv`` the
:class:`ShardedKV`, ``write_skeletons`` the :class:`Skeletons`, ...); ``create_volume``
returns the new :class:`Volume` open for writing. Stores and layers read by id as dicts do:
``x[id]`` raises KeyError for an absent id, ``x.get(id)`` gives None (or the default given),
``x.get_many(ids)`` the present ones, in one batch.

``import ngshard`` imports its required dependencies only (numpy, fsspec, the codecs):
Dask, DracoPy, Pillow, zarr-python and the other optional packages are imported when a
function needs them.
"""

from importlib.metadata import PackageNotFoundError, version

from . import dask as dask
from . import types as types
from . import zarr as zarr
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
    RequestError,
    SpecError,
    StorageAccessError,
    StorageWriteError,
    UnlistableError,
)
from .layers import (
    Annotation,
    Annotations,
    AnnotationSet,
    LegacyMeshes,
    Mesh,
    Meshes,
    SegmentProperties,
    Skeleton,
    Skeletons,
    attach,
    open_annotations,
    open_meshes,
    open_segment_properties,
    open_skeletons,
    write_annotations,
    write_legacy_meshes,
    write_meshes,
    write_segment_properties,
    write_skeletons,
)
from .layers import open_layer as open  # ngshard.open(url), as tarfile.open
from .pipelines import convert, downsample, mesh, skeletonize, transfer
from .server import serve
from .sharded import ShardedKV, ShardingSpec, open_kv, write_kv
from .volume import Bounds, Volume, create_volume, open_volume

try:
    __version__ = version("ngshard")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.1.0"

# The subpackages dask, zarr and types are attributes (see dir(ngshard)) but not in __all__:
# ``from ngshard import *`` would otherwise shadow the dask and zarr packages and the standard
# library's types module.
__all__ = [
    "Annotation",
    "AnnotationSet",
    "Annotations",
    "Bounds",
    "ChangedError",
    "ConflictError",
    "CorruptDataError",
    "ExistsError",
    "InvalidKeyError",
    "LegacyMeshes",
    "Mesh",
    "Meshes",
    "MissingDependencyError",
    "NgShardError",
    "NotFoundError",
    "ReadOnlyError",
    "RequestError",
    "SegmentProperties",
    "ShardedKV",
    "ShardingSpec",
    "Skeleton",
    "Skeletons",
    "SpecError",
    "StorageAccessError",
    "StorageWriteError",
    "UnlistableError",
    "Volume",
    "attach",
    "convert",
    "downsample",
    "transfer",
    "create_volume",
    "mesh",
    "open",
    "open_annotations",
    "open_kv",
    "open_meshes",
    "open_segment_properties",
    "open_skeletons",
    "open_volume",
    "serve",
    "skeletonize",
    "write_annotations",
    "write_kv",
    "write_legacy_meshes",
    "write_meshes",
    "write_segment_properties",
    "write_skeletons",
]
