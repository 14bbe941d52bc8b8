"""Adding a coarser scale to a volume: downsampled from the present chunks of a finer one, so
the cost follows the data, not the volume's bounds."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from ..destination import claim
from ..errors import ExistsError, SpecError
from ..kinds import SEGMENTATION
from ..progress import progress_bar
from ..sharded.spec import ShardingSpec
from ..threads import WORKERS, pmap
from .downsample import downsample_mean, downsample_mode
from .handle import ScaleHandle, read_volume_info, write_volume_info
from .info import Scale, chunk_nbytes
from .layers import scale_key
from .sharding import auto_sharding
from .vectors import xyz
from .volume import Volume


def coarse_positions(fine: Volume, factor: np.ndarray, coarse: Volume) -> np.ndarray:
    """Chunk positions of ``coarse`` that the present chunks of ``fine`` reach, with those
    ``coarse`` holds already (they must be remade too), unique and sorted."""
    present = fine.chunk_positions()
    cs = np.asarray(fine.chunk_size)
    grid_max = np.asarray(coarse.grid.shape) - 1
    lo = present * cs // factor // cs
    hi = np.minimum(((present + 1) * cs - 1) // factor // cs, grid_max)
    corners = [lo + off for off in itertools.product((0, 1), repeat=3)]
    reach = np.concatenate([r[(r <= hi).all(axis=1)] for r in corners] +
                           [coarse.handle.store.list_positions()])
    return np.unique(reach, axis=0) if len(reach) else reach.reshape(0, 3)


def add_scale(vol: Volume, factor: Sequence[int] = (2, 2, 2), *, overwrite: bool = False,
              progress: bool = False) -> Volume:
    """Make (or remake) the scale ``factor`` times coarser than ``vol`` and fill it from
    ``vol``: the mean for images, the most frequent label for segmentations.

    Only coarse chunks that a present fine chunk reaches are computed, one at a time (memory
    follows the chunk size), and those that come out all zero (the fill value) are not stored
    unless they replace a stored chunk. The chunks are written first and the info last: a
    crash leaves a layer that reads as before, with at most files of the new scale that no
    info names yet (a rerun then needs ``overwrite``). Returns the new scale, committed.

    Raises
    ------
    ExistsError
        The scale is there with another geometry, chunk size, encoding or sharding than this
        one would have (or its folder holds chunks no info describes), and not
        ``overwrite``. With ``overwrite`` it is taken out of the info, its files removed, and
        it is made anew.
    """
    factor = tuple(int(f) for f in factor)
    if len(factor) != 3 or min(factor) < 1:
        raise SpecError(f"factor must be 3 positive integers, got {factor!r}")
    s = vol.scale
    size = xyz(-(-n // f) for n, f in zip(s.size, factor))
    resolution = xyz(r * f for r, f in zip(s.resolution, factor))
    chunk_bytes = chunk_nbytes(s.chunk_size, vol.info.num_channels, vol.dtype)
    sharding = None if s.sharding is None else auto_sharding(
        size, s.chunk_size, chunk_bytes, encoding=s.encoding)
    scale = Scale(key=scale_key(resolution), size=size, chunk_size=s.chunk_size,
                  resolution=resolution,
                  voxel_offset=xyz(o // f for o, f in zip(s.voxel_offset, factor)),
                  encoding=s.encoding, sharding=sharding,
                  compressed_segmentation_block_size=s.compressed_segmentation_block_size)
    storage = vol.storage
    layer = read_volume_info(storage)
    existing = next((x for x in layer.scales if x.key == scale.key), None)
    if existing is not None and existing != scale:
        if not overwrite:
            raise ExistsError(f"{storage.path(scale.key)}: scale {scale.key} is there with "
                              f"{_differences(existing, scale)}: pass overwrite=True to "
                              f"replace it")
        # out of the info first: no info then names the files removed and rewritten
        layer = replace(layer, scales=tuple(x for x in layer.scales if x is not existing))
        write_volume_info(storage, layer)
        existing = None
    if existing is None:  # a new scale: its folder must not hold chunks of another
        claim(storage.child(scale.key), overwrite=overwrite)
    info = layer.with_scale(scale)
    coarse = Volume(ScaleHandle(storage, info, scale.key, "r+", compress=vol.compress),
                    new=existing is None)
    reduce = downsample_mode if info.type == SEGMENTATION else downsample_mean
    f = np.asarray(factor)
    positions = coarse_positions(vol, f, coarse)
    stored = {tuple(p) for p in coarse.handle.store.list_positions().tolist()}
    starts, stops = coarse.grid.bounds(positions)
    channels = info.num_channels
    # blocks of factor voxels from each scale's origin (as igneous makes them): 0-based views
    fine, coarse0 = vol.translate_to[0], coarse.translate_to[0]
    for pos, lo, hi in progress_bar(zip(positions.tolist(), starts, stops),
                                    total=len(positions), desc=f"scale {scale.key}",
                                    unit="chunk", enabled=progress):
        small = _in_slabs(reduce, fine.read_box(lo * f, np.minimum(hi * f, s.size)), factor)
        if small.any() or tuple(pos) in stored:
            coarse0[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2], 0:channels] = small
    coarse.commit(progress=progress)
    if existing is None:  # the info last, as stored now (another scale may have come)
        info = read_volume_info(storage).with_scale(scale)
        write_volume_info(storage, info)
    vol.handle.info = coarse.handle.info = info
    return coarse


def _differences(stored: Scale, new: Scale) -> str:
    """How a stored scale differs from the one add_scale would write, member by member."""
    def show(scale: Scale, name: str) -> object:
        value = getattr(scale, name)
        return json.dumps(value.to_json()) if isinstance(value, ShardingSpec) else value

    names = ("size", "voxel_offset", "resolution", "chunk_size", "encoding", "sharding",
             "compressed_segmentation_block_size")
    return "; ".join(f"{n} {show(stored, n)} (add_scale would write {show(new, n)})"
                     for n in names if getattr(stored, n) != getattr(new, n))


def _in_slabs(reduce: Callable[[np.ndarray, Sequence[int]], np.ndarray], fine: np.ndarray,
              factor: Sequence[int]) -> np.ndarray:
    """``reduce(fine, factor)`` in slabs along z on threads (whole blocks in each)."""
    step = -(-fine.shape[2] // factor[2] // WORKERS) * factor[2]
    parts = pmap(lambda z: reduce(fine[:, :, z:z + step], factor),
                 range(0, fine.shape[2], step), min_items=2)
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)
