"""Opening or creating a precomputed volume (the info on storage is read and written by
``handle.py``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..compression import twin_suffix
from ..destination import claim
from ..errors import SpecError
from ..kinds import IMAGE, SEGMENTATION
from ..limits import DEFAULT_VOLUME_SHARD_BYTES
from ..sharded.spec import ShardingSpec
from ..staged import DEFAULT_STAGED_BYTES
from ..storage import Location, Storage, StorageOptions, open_storage
from ..types import Compress, Encoding, LayerType, VolumeMode
from .encodings import SEGMENTATION_ENCODINGS, require_codec
from .handle import ScaleHandle, write_volume_info
from .info import VolumeInfo, chunk_nbytes
from .sharding import auto_sharding
from .volume import Volume


def scale_key(resolution: Sequence[float]) -> str:
    """The conventional key of a scale: its resolution, e.g. ``8_8_40``."""
    return "_".join(f"{r:g}" for r in resolution)


def open_volume(url: str | os.PathLike | dict | Storage, scale: int | str = 0,
                mode: VolumeMode = "r", *,
                fill_missing: bool = True, progress: bool = False,
                staged_bytes: int = DEFAULT_STAGED_BYTES, compress: Compress | None = None,
                storage_options: StorageOptions | None = None) -> Volume:
    """Open one scale of the precomputed volume at ``url``, indexed in its voxel coordinates
    (``vol.bounds``: ``[voxel_offset, voxel_offset + size)``; ``vol.translate_to[0]`` is a
    view indexed from 0).

    Parameters
    ----------
    url
        The layer's directory (with ``info``): a local path, any fsspec URL, a Neuroglancer
        source (``precomputed://gs://...``, ``gs://b/p/|neuroglancer-precomputed:``), a
        tensorstore spec dict of the neuroglancer_precomputed driver (its ``scale_index``
        or ``scale_metadata`` choose the scale), or an open Storage.
    scale
        The scale's index (0 is the finest) or key.
    mode
        "r" or "r+" (assignments staged, written by ``commit`` or on leaving ``with``;
        ``abort()`` or an exception inside ``with`` drops them).
    fill_missing
        Absent chunks read as 0, the fill value (True, as tensorstore); False: a read that
        touches one raises NotFoundError naming it (cloud-volume's default), so absent and
        zero can be told apart. Writes are the same either way.
    progress
        Progress bars on reads, writes and commits of many chunks.
    staged_bytes
        Memory for staged (decoded) chunks; past it the oldest are encoded and moved out of
        memory (to the sharded store's spill files) until the commit.
    compress
        How an unsharded scale's chunk files are written: None (plain files), "gzip", "br"
        or "zstd" (cloud-volume's ``compress``: the ``.gz``, ``.br``, ``.zstd`` twin).
        Reads take whichever is stored.
    storage_options
        How to reach the storage (credentials, ``anon``, ``endpoint_url``, ...) and the
        ``retries`` and ``retry_seconds`` of its requests (see :mod:`ngshard.storage.options`).

    Returns
    -------
    Volume

    Raises
    ------
    NotFoundError
        No info at ``url``.
    SpecError
        An invalid info, scale, mode or ``compress`` (or ``compress`` for a sharded scale);
        a URL that names zarr; a spec the layer disagrees with.
    MissingDependencyError
        The scale's encoding needs a package that is not installed (the message names the
        extra to install).

    Examples
    --------
    >>> vol = open_volume("gs://bucket/em")            # doctest: +SKIP
    >>> vol.bounds                                     # doctest: +SKIP
    Bounds(start=(1000, 2000, 30), stop=(9192, 10192, 1054))
    >>> vol[1000:1512, 2000:2512, 100, 0].shape        # doctest: +SKIP
    (512, 512)
    """
    handle = ScaleHandle.open(url, scale, mode, compress=compress, staged_bytes=staged_bytes,
                              storage_options=storage_options)
    return Volume(handle, progress=progress, fill_missing=fill_missing,
                  staged_bytes=staged_bytes)


def create_volume(url: Location, *, dtype: Any, shape: Sequence[int],
                  chunk_size: Sequence[int] = (64, 64, 64), layer_type: LayerType | None = None,
                  encoding: Encoding = "raw", resolution: Sequence[float] = (1, 1, 1),
                  voxel_offset: Sequence[int] = (0, 0, 0), num_channels: int | None = None,
                  sharding: None | str | ShardingSpec | dict = None,
                  shard_bytes: int = DEFAULT_VOLUME_SHARD_BYTES,
                  compressed_segmentation_block_size: Sequence[int] = (8, 8, 8),
                  compress: Compress | None = None, progress: bool = False,
                  staged_bytes: int = DEFAULT_STAGED_BYTES, overwrite: bool = False,
                  storage_options: StorageOptions | None = None) -> Volume:
    """Write the ``info`` of a new single-scale precomputed layer and open it for writing.

    Parameters
    ----------
    url
        Where the layer goes (a local path, any fsspec URL, or an open Storage).
    dtype, shape
        Voxel type; (x, y, z) or (x, y, z, channels).
    chunk_size, resolution, voxel_offset, num_channels
        As in the info (resolution in nm).
    layer_type
        "image" or "segmentation" (default: segmentation for compressed_segmentation).
    encoding
        raw, compressed_segmentation, compresso or crackle (labels; the ``segmentation``
        extra), jpeg, png or jxl (the ``images`` extra).
    sharding
        None (a file per chunk), "auto" (box shards of at most ``shard_bytes``, see
        :func:`auto_sharding`) or a spec.
    compress
        Unsharded only: each chunk file written as its compressed twin, as cloud-volume's
        ``compress=`` does: None (plain files), "gzip" (``.gz``), "br" (``.br``) or "zstd"
        (``.zstd``). A sharded scale compresses per its spec's ``data_encoding``.
    progress
        Progress bars on writes, reads and commits of many chunks.
    staged_bytes
        As for :func:`open_volume`.
    overwrite
        Replace a layer, store or zarr array already at ``url``: everything it owns (its
        scales' chunks and shards, its linked meshes and skeletons) is removed first. By
        default such a destination is refused.
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).

    Returns
    -------
    Volume
        Scale 0, open in mode "r+", indexed in voxel coordinates from ``voxel_offset``:
        a new layer has no data to read yet, so unlike the ``write_*`` functions (which
        return what they wrote, open for reading) it is returned open for writing.

    Raises
    ------
    SpecError
        An invalid combination (checked before anything is written).
    MissingDependencyError
        The encoding needs a package that is not installed (nothing is written).
    ExistsError
        ``url`` holds a layer or store (the message says which), and not ``overwrite``.

    Examples
    --------
    >>> with create_volume("/tmp/em", dtype="uint8", shape=(1024, 1024, 256),
    ...                    sharding="auto") as vol:                    # doctest: +SKIP
    ...     vol[:, :, :64] = np.load("slab.npy")
    """
    shape = tuple(int(s) for s in shape)
    channels = num_channels or (shape[3] if len(shape) == 4 else 1)
    dtype = np.dtype(dtype)
    layer_type = layer_type or (SEGMENTATION if encoding in SEGMENTATION_ENCODINGS
                                else IMAGE)
    twin_suffix(compress)
    chunk_bytes = chunk_nbytes(chunk_size, channels, dtype)
    if sharding == "auto":
        sharding = auto_sharding(shape[:3], chunk_size, chunk_bytes, shard_bytes, encoding)
    elif isinstance(sharding, (dict, str)):
        sharding = ShardingSpec.from_json(sharding)
    scale: dict[str, Any] = {"key": scale_key(resolution), "size": list(shape[:3]),
             "voxel_offset": list(voxel_offset), "resolution": list(resolution),
             "chunk_sizes": [list(chunk_size)], "encoding": encoding}
    if sharding is not None:
        scale["sharding"] = sharding.to_json()
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = list(compressed_segmentation_block_size)
    info = VolumeInfo.from_json({"type": layer_type, "data_type": dtype.name,
                                 "num_channels": channels, "scales": [scale]})
    if sharding is not None and compress is not None:
        raise SpecError("compress= is for a file per chunk (sharding=None); a sharded scale "
                        "compresses as its sharding spec's data_encoding says")
    require_codec(encoding)  # before the info is written: no orphan layer
    storage = open_storage(url, expect="precomputed", storage_options=storage_options)
    claim(storage, overwrite=overwrite, into=[storage.child(scale["key"])])
    write_volume_info(storage, info)
    handle = ScaleHandle(storage, info, 0, "r+", compress=compress, staged_bytes=staged_bytes)
    return Volume(handle, progress=progress, staged_bytes=staged_bytes, new=True)
