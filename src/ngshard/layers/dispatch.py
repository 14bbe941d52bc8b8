"""One entry point for every precomputed layer: the kind is read from the ``info``."""

from __future__ import annotations

import os
from typing import Any

from ..kinds import (
    INFO,
    LEGACY_MESHES,
    MESHES,
    PROPERTIES,
    SKELETONS,
    STORE,
    VOLUME,
    layer_kind,
)
from ..sharded.infofile import read_info
from ..storage import Storage, open_storage


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
    if kind == VOLUME:
        from ..volume import Volume
        from ..volume.layers import read_volume_info

        scale, mode = kwargs.pop("scale", 0), kwargs.pop("mode", "r")
        return Volume(storage, read_volume_info(storage), scale, mode, **kwargs)
    if kind == STORE:
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
