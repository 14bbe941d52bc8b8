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
from .downsample import check_method, downsample
from .factors import near_isotropic_factors
from .handle import ScaleHandle, read_volume_info, write_volume_info
from .info import Scale, chunk_nbytes
from .layers import scale_key
from .sharding import auto_sharding
from .vectors import xyz
from .volume import Volume


def coarser_scale(parent: Scale, factor: Sequence[int], sharding: ShardingSpec | None = None,
                  chunk_size: Sequence[int] | None = None) -> Scale:
    """The scale ``factor`` times coarser than ``parent``: its voxel i is the block of
    ``parent`` voxels [i * factor, (i + 1) * factor) in absolute coordinates (as tensorstore,
    neuroglancer and igneous align them), so its voxel_offset is ``floor(offset / factor)``
    and its end ``ceil(end / factor)``."""
    lo = [o // f for o, f in zip(parent.voxel_offset, factor)]
    hi = [-(-(o + n) // f) for o, n, f in zip(parent.voxel_offset, parent.size, factor)]
    resolution = xyz(r * f for r, f in zip(parent.resolution, factor))
    return Scale(key=scale_key(resolution), size=xyz(b - a for a, b in zip(lo, hi)),
                 chunk_size=xyz(chunk_size or parent.chunk_size), resolution=resolution,
                 voxel_offset=xyz(lo), encoding=parent.encoding, sharding=sharding,
                 compressed_segmentation_block_size=parent.compressed_segmentation_block_size)


def coarse_positions(fine: Volume, factor: np.ndarray, coarse: Volume) -> np.ndarray:
    """Chunk positions of ``coarse`` that the present chunks of ``fine`` reach, with those
    ``coarse`` holds already (they must be remade too), unique and sorted."""
    present = fine.chunk_positions()
    cs = np.asarray(fine.chunk_size)
    grid_max = np.asarray(coarse.grid.shape) - 1
    # absolute voxels of each fine chunk -> absolute coarse voxels -> coarse chunks
    fine_off, coarse_off = np.asarray(fine.scale.voxel_offset), np.asarray(
        coarse.scale.voxel_offset)
    first = (present * cs + fine_off) // factor - coarse_off
    last = (np.minimum((present + 1) * cs, fine.scale.size) - 1 + fine_off) // factor - \
        coarse_off
    lo, hi = first // cs, np.minimum(last // cs, grid_max)
    corners = [lo + off for off in itertools.product((0, 1), repeat=3)]
    reach = np.concatenate([r[(r <= hi).all(axis=1)] for r in corners] +
                           [coarse.handle.store.list_positions()])
    return np.unique(reach, axis=0) if len(reach) else reach.reshape(0, 3)


def add_scale(vol: Volume, factor: Sequence[int] | None = None, *, method: str | None = None,
              sparse: bool = False, overwrite: bool = False, progress: bool = False
              ) -> Volume:
    """Make (or remake) the scale ``factor`` times coarser than ``vol`` (default the
    near-isotropic step, :func:`~.factors.near_isotropic_factors`) and fill it from
    ``vol``: the mean for images, the most frequent label for segmentations, or ``method``
    (see :func:`~.downsample.downsample`). Blocks are aligned to multiples of the factor in
    absolute coordinates, the new voxel_offset is ``floor(voxel_offset / factor)``, as
    tensorstore, neuroglancer and igneous have it.

    Only coarse chunks that a present fine chunk reaches are computed, one at a time (memory
    follows the chunk size), and those that come out all zero (the fill value) are not stored
    unless they replace a stored chunk. The chunks are written first and the info last: a
    crash leaves a layer that reads as before, with at most files of the new scale that no
    info names yet (a rerun then needs ``overwrite``). Returns the new scale, committed.

    Raises
    ------
    SpecError
        A bad factor or method.
    ExistsError
        The scale is there with another geometry, chunk size, encoding or sharding than this
        one would have (or its folder holds chunks no info describes), and not
        ``overwrite``. With ``overwrite`` it is taken out of the info, its files removed, and
        it is made anew.
    """
    s = vol.scale
    if factor is None:
        factor = near_isotropic_factors(s.resolution, 1)[0]
    factor = tuple(int(f) for f in factor)
    if len(factor) != 3 or min(factor) < 1:
        raise SpecError(f"factor must be 3 positive integers, got {factor!r}")
    method = check_method(method or ("mode" if vol.info.type == SEGMENTATION else "mean"),
                          sparse)
    scale = coarser_scale(s, factor)
    chunk_bytes = chunk_nbytes(s.chunk_size, vol.info.num_channels, vol.dtype)
    if s.sharding is not None:
        scale = replace(scale, sharding=auto_sharding(scale.size, s.chunk_size, chunk_bytes,
                                                      encoding=s.encoding))
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
    f = np.asarray(factor)
    positions = coarse_positions(vol, f, coarse)
    stored = {tuple(p) for p in coarse.handle.store.list_positions().tolist()}
    starts, stops = coarse.grid.bounds(positions)
    channels = info.num_channels
    fine_off, coarse_off = np.asarray(s.voxel_offset), np.asarray(scale.voxel_offset)
    fine, coarse0 = vol.translate_to[0], coarse.translate_to[0]  # 0-based views
    for pos, lo, hi in progress_bar(zip(positions.tolist(), starts, stops),
                                    total=len(positions), desc=f"scale {scale.key}",
                                    unit="chunk", enabled=progress):
        # the fine voxels of the coarse box, in absolute coordinates, clipped to the scale
        a = np.maximum((lo + coarse_off) * f, fine_off)
        b = np.minimum((hi + coarse_off) * f, fine_off + s.size)
        data = fine.read_box(a - fine_off, b - fine_off)
        small = _in_slabs(lambda d, o: downsample(d, factor, method, origin=o, sparse=sparse),
                          data, a, factor)
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


def _in_slabs(reduce: Callable[[np.ndarray, np.ndarray], np.ndarray], fine: np.ndarray,
              origin: np.ndarray, factor: Sequence[int]) -> np.ndarray:
    """``reduce(fine, origin)`` in slabs along z on threads, cut at block boundaries (a
    multiple of the factor in absolute coordinates, from ``origin``)."""
    step = -(-fine.shape[2] // factor[2] // WORKERS) * factor[2]
    cuts = [0] + list(range((-int(origin[2])) % factor[2] or step, fine.shape[2], step))
    parts = pmap(lambda ab: reduce(fine[:, :, ab[0]:ab[1]],
                                   np.array([origin[0], origin[1], origin[2] + ab[0]])),
                 list(zip(cuts, cuts[1:] + [fine.shape[2]])), min_items=2)
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)
