"""Conversion between zarr (v2, v3, sharded or not, OME-Zarr groups) and Neuroglancer
precomputed, as independent whole-shard tasks on any ``concurrent.futures.Executor``.

``sources`` (what a task reads), ``plan`` (splitting a job into tasks), ``layout`` (the
destination a source calls for), ``to_precomputed``, ``fastpath`` and ``to_zarr`` (what a
task writes), ``tasks`` (the worker's entry point), ``resume`` (records of finished tasks),
``executors`` (local pool, Dask), ``api`` (:func:`convert`).

The module itself is callable: ``ngshard.convert(src, dst)`` is :func:`convert`, whichever
of the package and the function the name ``ngshard.convert`` was bound to last.
"""

from __future__ import annotations

import sys
import types

from .api import convert


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs) -> dict[str, int]:
        return convert(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["convert"]
