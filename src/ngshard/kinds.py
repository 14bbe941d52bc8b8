"""Layer kinds: the ``info`` document (parsed defensively), the kind of layer it describes
(:func:`kind_of`), the files such a layer owns (so that replacing a layer can remove all of it
and nothing else), the stores inside it, and which kinds keep unindexed entries in their
shards. The one module that spells a layer's ``@type`` or decides what kind a layer is: every
other asks it.

Pure knowledge, no I/O: the functions that look at a listing are given the names, or a store
whose ``list()`` they call. ``ngshard.destination`` acts on it.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

from .compression import split_twin
from .errors import NotFoundError, SpecError
from .jsondoc import Doc, parse_json
from .storage.names import is_inside

INFO = "info"
#: Where ``ngshard.convert`` records the job and the tasks of it that are done, until it is.
CONVERT_RECORDS, CONVERT_JOB = ".ngshard-convert", "job.json"
#: Where ``ngshard.mesh`` and ``ngshard.skeletonize`` keep the pieces of each task box until
#: the layer is written (in the layer being made).
FRAGMENTS = ".ngshard-fragments"

VOLUME = "volume"
STORE = "store"
#: The ``@type`` of a volume's info (image or segmentation), and the volume types (``type``).
VOLUME_TYPE = "neuroglancer_multiscale_volume"
IMAGE: Final = "image"
SEGMENTATION: Final = "segmentation"
VOLUME_TYPES = (IMAGE, SEGMENTATION)
SKELETONS = "neuroglancer_skeletons"
MESHES = "neuroglancer_multilod_draco"
LEGACY_MESHES = "neuroglancer_legacy_mesh"
ANNOTATIONS = "neuroglancer_annotations_v1"
PROPERTIES = "neuroglancer_segment_properties"
LAYER_TYPES = (SKELETONS, MESHES, LEGACY_MESHES, ANNOTATIONS, PROPERTIES)
#: Kinds whose shards keep unindexed entries before their values (what they are, for
#: messages): their stores are opened with the function that measures them, which the layer
#: supplies (``ngshard.layers.dispatch.unindexed_sizes``).
UNINDEXED = {MESHES: "its mesh fragments lie unindexed before each manifest"}
#: Info members of a segmentation (or a skeleton or mesh layer) naming layers that go with it.
LINKS = ("mesh", "skeletons", "segment_properties")

# The names of the files each kind writes. Unsharded files may have compression twins.
_TWIN = r"(?:\.(?:gz|br|zstd|xz|bz2))?"
#: Shard files, and the two files of the obsolete split form.
SHARD_FILES = re.compile(r"[0-9a-f]+\.(?:shard|index|data)")
#: Unsharded volume chunks ``x0-x1_y0-y1_z0-z1`` (the offset may make them negative).
CHUNK_FILES = re.compile(rf"(?:-?[0-9]+--?[0-9]+_){{2}}-?[0-9]+--?[0-9]+{_TWIN}")
#: Unsharded skeletons and multi-resolution meshes: ``<id>``, ``<id>.index``.
SEGMENT_FILES = re.compile(rf"[0-9]{{1,20}}(?:\.index)?{_TWIN}")
#: Legacy mesh manifests ``<id>:<lod>`` and their fragments ``<id>:<lod>:<anything>``.
LEGACY_MESH_FILES = re.compile(r"[0-9]{1,20}:[0-9]+(?::[^/]*)?")
#: Unsharded annotation indices: ids, and spatial cells ``x_y_z`` (any rank).
ANNOTATION_FILES = re.compile(rf"[0-9]+(?:_[0-9]+)*{_TWIN}")
#: What a scale directory of a volume holds: shards or chunk files.
SCALE_FILES = re.compile(f"{SHARD_FILES.pattern}|{CHUNK_FILES.pattern}")
EVERYTHING = re.compile(r".*", re.DOTALL)

#: Zarr metadata: v3 (array or group), v2 array, group, attributes, consolidated.
ZARR_V3, ZARR_ARRAY, ZARR_GROUP = "zarr.json", ".zarray", ".zgroup"
ZARR_METADATA = (ZARR_V3, ZARR_ARRAY, ZARR_GROUP, ".zattrs", ".zmetadata")
#: Chunk keys at the top of a zarr array (v3 ``c``, ``c.0.0``; v2 ``0.0``), and the
#: directories that hold nothing but its chunks (v3 ``c/``; v2 with "/" separators).
ZARR_CHUNK_FILES = re.compile(r"c(?:\.[0-9]+)*|[0-9]+(?:\.[0-9]+)*")
ZARR_CHUNK_DIRS = re.compile(r"c|[0-9]+")


def parse_info(raw: bytes | str, where: str) -> dict:
    """An info document as a dict; SpecError naming ``where`` for anything else (bad JSON,
    not an object, numbers too long to convert). Members nested past MAX_JSON_DEPTH are
    kept unparsed (:func:`ngshard.jsondoc.parse_json`)."""
    return Doc(parse_json(raw, where), where).value


def kind_of(doc: dict | None) -> str | None:
    """What an info describes: one of LAYER_TYPES, VOLUME (an image or segmentation: it has
    scales), STORE (a bare sharded store: only a sharding); None for no info, or one of no
    kind ngshard knows."""
    if doc is None:
        return None
    kind = doc.get("@type")
    if kind in LAYER_TYPES:
        return kind
    if "scales" in doc:
        return VOLUME
    if "sharding" in doc:
        return STORE
    return None


def layer_kind(doc: dict | None, storage: Any) -> str:
    """:func:`kind_of`, where no info may be a legacy mesh layer (a directory of ``<id>:0``
    manifests; ``storage``, the layer's store, is listed only then).

    Raises
    ------
    NotFoundError
        No info, and no legacy mesh manifests.
    SpecError
        An info of no kind ngshard knows.
    """
    if doc is None:
        if storage.supports_listing and any(split_twin(name)[0].endswith(":0")
                                            for name in storage.list()):
            return LEGACY_MESHES
        raise NotFoundError(f"{storage.path(INFO)}: no info file: not a precomputed layer")
    kind = kind_of(doc)
    if kind is None:
        raise SpecError(f"{storage.path(INFO)}: not a layer ngshard knows (@type "
                        f"{doc.get('@type')!r}, no scales, no sharding)")
    return kind


def is_segmentation(doc: dict | None) -> bool:
    """Whether an info describes a segmentation volume (its ``type``)."""
    return doc is not None and kind_of(doc) == VOLUME and doc.get("type") == SEGMENTATION


def unindexed_entries(doc: dict | None) -> str | None:
    """What the unindexed entries in the shards of the layer ``doc`` describes are (for
    messages), None for a layer whose shards keep none."""
    kind = kind_of(doc)
    return None if kind is None else UNINDEXED.get(kind)


def stores(doc: dict | None) -> dict[str, dict | None]:
    """The key-value stores in folders of a layer: {folder (relative): its sharding spec
    JSON, None where it keeps a file per key}: a volume's scales, an annotation layer's
    indices. A layer's own ``sharding`` (at its root) is not among them."""
    kind, doc = kind_of(doc), doc or {}
    if kind == VOLUME:
        found = doc.get("scales")
    elif kind == ANNOTATIONS:
        found = [doc.get("by_id")] + list(doc.get("relationships") or []) + \
            list(doc.get("spatial") or [])
    else:
        return {}
    return {part["key"]: part.get("sharding") for part in found
            if isinstance(part, dict) and isinstance(part.get("key"), str)} \
        if isinstance(found, list) else {}


def describe(kind: str, doc: dict | None) -> str:
    """A layer for messages: "a precomputed segmentation with scales 8_8_8, 16_16_16"."""
    doc = doc or {}
    if kind == VOLUME:
        keys = [s.get("key") for s in doc.get("scales", []) if isinstance(s, dict)]
        return (f"a precomputed {doc.get('type', 'volume')} with scale"
                f"{'s' if len(keys) != 1 else ''} {', '.join(map(str, keys))}")
    return {STORE: "a sharded store", SKELETONS: "a skeleton layer",
            MESHES: "a multi-resolution mesh layer", LEGACY_MESHES: "a legacy mesh layer",
            ANNOTATIONS: f"an annotation layer ({doc.get('annotation_type', '?')})",
            PROPERTIES: "a segment properties layer"}[kind]


class Part(NamedTuple):
    """Files a layer owns: those in ``folder`` (relative to the layer, "" itself) whose names
    ``names`` matches in full."""

    folder: str
    names: re.Pattern


def relative_folder(value: Any) -> str | None:
    """``value`` if it names a folder inside the layer (no scheme, no '..', not absolute:
    :mod:`ngshard.storage.names`), else None: only such folders are the layer's to remove."""
    return value.rstrip("/") if is_inside(value, folder=True) else None


def parts(kind: str, doc: dict | None) -> list[Part]:
    """The files a layer of ``kind`` described by ``doc`` owns besides its info (and the
    layers it links to, see :func:`links`): what replacing it removes."""
    doc = doc or {}

    def segments(names: re.Pattern) -> re.Pattern:
        return SHARD_FILES if doc.get("sharding") is not None else names

    if kind == VOLUME:
        return [Part(k, SCALE_FILES) for k in stores(doc) if relative_folder(k)]
    if kind == STORE:
        return [Part("", SHARD_FILES)]
    if kind in (SKELETONS, MESHES):
        return [Part("", segments(SEGMENT_FILES))]
    if kind == LEGACY_MESHES:
        return [Part("", segments(LEGACY_MESH_FILES))]
    if kind == ANNOTATIONS:
        return [Part(k, ANNOTATION_FILES if sharding is None else SHARD_FILES)
                for k, sharding in stores(doc).items() if relative_folder(k)]
    return []


def links(doc: dict | None) -> list[str]:
    """The folders inside the layer holding layers that go with it (its meshes, skeletons,
    segment properties): replaced with it."""
    doc = doc or {}
    return [f for f in (relative_folder(doc.get(name)) for name in LINKS) if f]
