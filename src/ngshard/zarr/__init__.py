"""Zarr arrays (v3, sharded with ``sharding_indexed`` or not, and v2): numpy reads, writes
at once, staged changes, and their encoded chunks for conversion.

``import ngshard.zarr`` stays light: zarr-python is imported only by ``PrecomputedStore``.
"""

from __future__ import annotations

from .array import StagedZarrArray, ZarrArray, create_array, open_array

__all__ = ["PrecomputedStore", "StagedZarrArray", "ZarrArray", "create_array", "open_array"]


def __getattr__(name: str):
    # the zarr-python Store over a precomputed volume imports zarr-python: on first use only
    if name == "PrecomputedStore":
        from .store import PrecomputedStore

        return PrecomputedStore
    raise AttributeError(f"module 'ngshard.zarr' has no attribute {name!r}")
