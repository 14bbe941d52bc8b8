"""Zarr v3 on ngshard: ``PrecomputedStore`` (a zarr-python Store over a precomputed volume),
imported lazily so that ``import ngshard`` does not import zarr-python."""

from __future__ import annotations

from typing import Any

__all__ = ["PrecomputedStore"]


def __getattr__(name: str) -> Any:
    if name == "PrecomputedStore":
        from .store import PrecomputedStore

        return PrecomputedStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
