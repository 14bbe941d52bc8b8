"""Zarr arrays (v3, sharded with ``sharding_indexed`` or not, and v2): numpy reads, writes
at once, staged changes, and their encoded chunks for conversion; ``PrecomputedStore``, a
zarr-python Store over a precomputed volume.

``import ngshard.zarr`` stays light: zarr-python is imported only by ``PrecomputedStore``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .array import StagedZarrArray, ZarrArray, create_array, open_array
from .handle import ArrayHandle

if TYPE_CHECKING:  # a subclass of zarr-python's Store: defined only once zarr is imported
    from .store import PrecomputedStore

__all__ = ["ArrayHandle", "PrecomputedStore", "StagedZarrArray", "ZarrArray", "create_array",
           "open_array"]


def __getattr__(name: str) -> Any:
    # the zarr-python Store over a precomputed volume imports zarr-python: on first use only
    if name == "PrecomputedStore":
        from .store import PrecomputedStore

        return PrecomputedStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
