"""Conversion between zarr (v2, v3, sharded or not, OME-Zarr groups) and Neuroglancer
precomputed, as independent whole-shard tasks on any ``concurrent.futures.Executor``.

``sources`` (what a task reads), ``plan`` (splitting a job into tasks), ``layout`` (the
destination a source calls for), ``to_precomputed``, ``fastpath`` and ``to_zarr`` (what a
task writes), ``tasks`` (the worker's entry point), ``resume`` (records of finished tasks),
``executors`` (local pool, Dask), ``api`` (:func:`convert`).

``ngshard.convert(src, dst)`` is :func:`convert`. Transfers, pyramids, meshes and skeletons
made from a segmentation join conversion here as they come: whole-shard tasks on any executor.
"""

from __future__ import annotations

from .api import convert
from .downsample import downsample
from .meshing import mesh
from .skeletonizing import skeletonize
from .transfer import transfer

__all__ = ["convert", "downsample", "mesh", "skeletonize", "transfer"]
