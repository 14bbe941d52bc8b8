"""One entry point for every layer: the format from the URL or what is stored (an ``info``,
or zarr metadata), a precomputed layer's kind from its ``info``, and what opening a layer's
store for writing needs to know (the unindexed entries in its shards)."""

from __future__ import annotations

import os
from typing import Any

from ..errors import SpecError
from ..kinds import (
    INFO,
    LEGACY_MESHES,
    MESHES,
    PROPERTIES,
    SKELETONS,
    STORE,
    VOLUME,
    kind_of,
    layer_kind,
)
from ..sharded.infofile import read_info
from ..sharded.unindexed import UnindexedSizes
from ..storage import Source, Storage, StorageOptions, open_source
from ..storage.urls import check_format

# The metadata files that say which format a folder holds.
_MARKERS = {INFO: "precomputed", "zarr.json": "zarr3", ".zarray": "zarr2", ".zattrs": "zarr2",
            ".zgroup": "zarr2"}


def stored_formats(storage: Storage) -> set[str]:
    """The formats whose metadata lies at the root of ``storage``: "precomputed" (an
    ``info``), "zarr3" (``zarr.json``), "zarr2" (``.zarray``, ``.zattrs``, ``.zgroup``);
    one batch of size queries."""
    names = list(_MARKERS)
    return {_MARKERS[n] for n, found in zip(names, storage.stat_many(names))
            if found is not None}


def checked_source(url: str | os.PathLike | dict | Storage,
                   storage_options: StorageOptions | None = None) -> tuple[Storage, Source]:
    """The storage of ``url`` and what it names; a URL that names a format other than the
    one stored there is a SpecError naming both (checked only when it names one)."""
    storage, source = open_source(url, storage_options=storage_options)
    if source.format is not None:
        check_format(source, stored_formats(storage), url, storage.url)
    return storage, source


def existing_source(url: str | os.PathLike | dict | Storage,
                    storage_options: StorageOptions | None = None) -> tuple[Storage, Source]:
    """:func:`checked_source` of a source a job reads: a local one that is missing or a
    plain file says so, not that its metadata is missing (``seg.h5/info: Not a
    directory``)."""
    storage, source = checked_source(url, storage_options)
    storage.require_folder("a layer: name a folder holding a precomputed layer (an info "
                           "file) or a zarr array or group")
    return storage, source


def unindexed_sizes(doc: dict | None) -> UnindexedSizes | None:
    """The function that measures the unindexed entries before each value in the shards of
    the layer ``doc`` describes (``open_kv(..., unindexed=)``), None for a layer whose shards
    keep none (:data:`ngshard.kinds.UNINDEXED` says which kinds keep some)."""
    if kind_of(doc) == MESHES:
        from .mesh_codec import unindexed_sizes as mesh_fragments

        return mesh_fragments
    return None


def open_layer(url: str | os.PathLike | dict | Storage, *,
               storage_options: StorageOptions | None = None, **kwargs: Any) -> Any:
    """Open whatever layer ``url`` holds: a precomputed layer by its info, or a zarr array
    (or an OME-Zarr group's level).

    Parameters
    ----------
    url
        A local path, any fsspec URL, a Neuroglancer source (``precomputed://...``,
        ``zarr://...``, ``gs://b/p/|zarr3:``, ...), a tensorstore spec dict of the
        neuroglancer_precomputed or a zarr driver, or an open Storage.
    **kwargs
        Passed to the opener (e.g. ``scale=``, ``mode=`` and ``fill_missing=`` for a volume,
        as :func:`ngshard.open_volume` takes them; ``mode=`` for a bare store; ``scale=``
        picks an OME-Zarr group's level).
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).

    Returns
    -------
    Volume, Skeletons, Meshes, Annotations, SegmentProperties, ShardedKV or ZarrArray

    Raises
    ------
    NotFoundError
        Neither an info nor zarr metadata at ``url`` (and no legacy mesh manifests).
    SpecError
        An info of no known kind, or an invalid one; a URL or spec that names a format other
        than the one stored there.
    """
    storage, source = checked_source(url, storage_options)
    if source.family == "zarr":
        return _open_zarr(storage, **kwargs)
    doc = read_info(storage)
    if doc is None and source.format is None and stored_formats(storage) & {"zarr2", "zarr3"}:
        return _open_zarr(storage, **kwargs)
    kind = layer_kind(doc, storage)
    if kind == VOLUME:
        from ..volume.handle import read_volume_info
        from ..volume.layers import open_volume
        from ..volume.spec_scale import select_scale

        scale = select_scale(read_volume_info(storage), source, kwargs.pop("scale", 0),
                             storage.url)
        return open_volume(storage, scale, **kwargs)
    if kind == STORE:
        from ..sharded import open_kv

        return open_kv(storage, **kwargs)
    if kind in (MESHES, LEGACY_MESHES) or doc is None:  # only legacy meshes have no info
        from .meshes import open_meshes

        return open_meshes(storage)
    if kind == SKELETONS:
        from .skeletons import Skeletons

        return Skeletons(storage, doc)
    if kind == PROPERTIES:
        from .properties import SegmentProperties

        return SegmentProperties(storage, doc, storage.path(INFO))
    from .annotations import Annotations

    return Annotations(storage, doc)


def _open_zarr(storage: Storage, scale: int = 0, **kwargs: Any) -> Any:
    """The zarr array at ``storage``, or level ``scale`` of the OME-Zarr group there."""
    from ..zarr import open_array
    from ..zarr.ome import read_group

    unknown = sorted(set(kwargs) - {"staged_bytes"})
    if unknown:
        raise SpecError(f"{storage.url}: a zarr array takes no {unknown[0]}= (only scale= "
                        f"for an OME-Zarr group's level, and staged_bytes=)")
    group = read_group(storage)
    if group is None:
        return open_array(storage, **kwargs)
    if not isinstance(scale, int) or not 0 <= scale < len(group.levels):
        raise SpecError(f"{storage.url}: scale must be a level index below "
                        f"{len(group.levels)} of this OME-Zarr group, got {scale!r}")
    return open_array(storage.child(group.levels[scale].path), **kwargs)
