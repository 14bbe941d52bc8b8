"""One entry point for every precomputed layer: the kind is read from the ``info``."""

from __future__ import annotations

import os
from typing import Any

from ..errors import NotFoundError, SpecError
from ..sharded.infofile import INFO, read_info
from ..storage import Storage, open_storage
from ..storage.twins import plain_names

SKELETONS = "neuroglancer_skeletons"
MESHES = "neuroglancer_multilod_draco"
LEGACY_MESHES = "neuroglancer_legacy_mesh"
ANNOTATIONS = "neuroglancer_annotations_v1"
PROPERTIES = "neuroglancer_segment_properties"
LAYER_TYPES = (SKELETONS, MESHES, LEGACY_MESHES, ANNOTATIONS, PROPERTIES)


def layer_kind(doc: dict | None, storage: Storage) -> str:
    """What an info describes: one of LAYER_TYPES, "volume", "store" (a bare sharded store)
    or, with no info, "legacy_mesh" for a directory of ``<id>:0`` manifests."""
    if doc is None:
        if any(name.endswith(":0") for name in plain_names(storage.list())):
            return LEGACY_MESHES
        raise NotFoundError(f"{storage.path(INFO)}: no info file: not a precomputed layer")
    kind = doc.get("@type")
    if kind in LAYER_TYPES:
        return kind
    if "scales" in doc:
        return "volume"
    if "sharding" in doc:
        return "store"
    raise SpecError(f"{storage.path(INFO)}: not a layer ngshard knows (@type {kind!r}, no "
                    f"scales, no sharding)")


def open_layer(url: str | os.PathLike | Storage, **kwargs: Any) -> Any:
    """Open whatever precomputed layer ``url`` holds, by its info.

    Parameters
    ----------
    url
        A local path, any fsspec URL, or an open Storage.
    **kwargs
        Passed to the opener (e.g. ``scale=`` and ``mode=`` for a volume, ``mode=`` for a
        bare store).

    Returns
    -------
    Volume, Skeletons, Meshes, Annotations, SegmentProperties or ShardedKV

    Raises
    ------
    NotFoundError
        No info at ``url`` (and no legacy mesh manifests).
    SpecError
        An info of no known kind, or an invalid one.
    """
    storage = open_storage(url)
    doc = read_info(storage)
    kind = layer_kind(doc, storage)
    if kind == "volume":
        from ..volume.layers import open_volume

        return open_volume(storage, **kwargs)
    if kind == "store":
        from ..sharded import open_kv

        return open_kv(storage, **kwargs)
    if kind == SKELETONS:
        from .skeletons import Skeletons

        return Skeletons(storage, doc)
    if kind == PROPERTIES:
        from .properties import SegmentProperties

        return SegmentProperties(storage, doc, storage.path(INFO))
    if kind in (MESHES, LEGACY_MESHES):
        from .meshes import open_meshes

        return open_meshes(storage)
    from .annotations import Annotations

    return Annotations(storage, doc)
