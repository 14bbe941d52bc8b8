"""The geometry of a chunked array and of its slabs: shape, chunk shape, chunk grid, and the
axis along which a slab stacks its chunks.

A slab is a numpy array holding whole chunks side by side along one axis, the *stacking axis*:
axis 0 for a C-ordered slab, the last axis for a Fortran-ordered one. Stacking along the
slowest axis of the memory order keeps every chunk on a slab one contiguous block. Slabs take
the array's order (zarr: C; precomputed: Fortran, chunks are x-fastest, so a raw chunk encodes
as a plain copy), except slabs made whole from an assigned value, which take the value's
order, so filling them never transposes. A chunk's offset on a slab counts points along the
stacking axis (a multiple of the chunk's size there), as in seed 003.

Chunks are identified by their *id*, the C-order ravelled grid position; the base slab (the
stored chunks) is virtual, and a stored chunk lies on it at offset ``id * chunk[axis]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .._arrays import fresh
from ..errors import SpecError
from ..limits import SLAB_HUGE_PAGES
from ..types import MemoryOrder

FULL = 0  # the slab of the fill value: one read-only chunk, broadcast
BASE = 1  # the stored chunks, read on demand through the chunk source
FIRST_STAGED = 2  # staged slabs: writable numpy arrays of decoded chunks


@lru_cache(maxsize=256)
def box_indices(sizes: tuple[int, ...]) -> np.ndarray:
    """(prod(sizes), ndim): every index into a box of ``sizes``, in C order; read-only,
    shared by every plan over a box of that shape (a loop of assignments repeats them)."""
    index = np.indices(sizes).reshape(len(sizes), -1).T
    index.flags.writeable = False
    return index


def columns(arrays) -> np.ndarray:
    """1-D arrays of equal length as the int64 columns of one (k, n) C-ordered array (what
    ``np.stack(arrays, axis=1)`` gives, at a fraction of its cost per call on the few rows
    of a small assignment)."""
    return np.ascontiguousarray(np.array(arrays, np.int64).T)


@dataclass(frozen=True)
class Geometry:
    """Shape, chunk shape and memory order of a chunked array (any number of axes)."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    order: MemoryOrder = "C"

    def __post_init__(self) -> None:
        shape = tuple(int(n) for n in self.shape)
        chunks = tuple(int(c) for c in self.chunks)
        if len(shape) != len(chunks) or not shape:
            raise SpecError(f"shape {shape} and chunk shape {chunks} need the same number of "
                            f"axes, at least one")
        if min(shape) < 0 or min(chunks) < 1:
            raise SpecError(f"shape {shape} must be >= 0 and chunk shape {chunks} >= 1")
        if self.order not in ("C", "F"):
            raise SpecError(f"order must be 'C' or 'F', got {self.order!r}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "chunks", chunks)
        # derived once: plans ask for them many times per operation
        object.__setattr__(self, "ndim", len(shape))
        object.__setattr__(self, "axis", 0 if self.order == "C" else len(shape) - 1)
        object.__setattr__(self, "grid", tuple(-(-n // c) for n, c in zip(shape, chunks)))
        object.__setattr__(self, "num_chunks", math.prod(self.grid))

    #: Number of axes.
    ndim: int = field(init=False, repr=False, compare=False)
    #: The stacking axis of slabs: the slowest-varying axis of the memory order.
    axis: int = field(init=False, repr=False, compare=False)
    #: Chunks per axis.
    grid: tuple[int, ...] = field(init=False, repr=False, compare=False)
    num_chunks: int = field(init=False, repr=False, compare=False)

    def resized(self, shape: tuple[int, ...]) -> Geometry:
        return Geometry(tuple(shape), self.chunks, self.order)

    # --- chunk ids and positions -----------------------------------------------------------

    @property
    def addressable(self) -> bool:
        """Whether every chunk has an id and a base slab offset in int64 (a grid too large
        for that can only be read, through a window: ``StagedChangesArray``)."""
        return self.num_chunks * self.chunks[self.axis] < 1 << 63

    def ids(self, positions: np.ndarray) -> np.ndarray:
        """C-order ids of (k, ndim) grid positions, int64."""
        if not self.addressable:  # offsets must fit int64
            raise SpecError(f"a chunk grid of shape {self.grid} has too many chunks to address "
                            f"(their offsets pass 2**63)")
        if not len(positions):
            return np.zeros(0, np.int64)
        return np.ravel_multi_index(tuple(np.asarray(positions).T), self.grid).astype(np.int64)

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """(k, ndim) grid positions of chunk ids."""
        if not len(ids):
            return np.zeros((0, self.ndim), np.int64)
        return columns(np.unravel_index(np.asarray(ids, np.int64), self.grid))

    def extents(self, positions: np.ndarray) -> np.ndarray:
        """(k, ndim) sizes of the chunks at ``positions``, clipped at the array's edge."""
        chunks, shape = np.array(self.chunks), np.array(self.shape)
        return np.minimum(chunks, shape - np.asarray(positions) * chunks)

    def base_offsets(self, ids: np.ndarray) -> np.ndarray:
        """Offsets of stored chunks on the (virtual) base slab."""
        return np.asarray(ids, np.int64) * self.chunks[self.axis]

    # --- slabs -----------------------------------------------------------------------------

    def stack_axis(self, order: MemoryOrder) -> int:
        """The stacking axis of a slab in memory ``order``."""
        return 0 if order == "C" else self.ndim - 1

    def slab_shape(self, n: int, order: MemoryOrder | None = None) -> tuple[int, ...]:
        """Shape of a slab of ``n`` chunks (in the array's order by default)."""
        shape = list(self.chunks)
        shape[self.stack_axis(order or self.order)] *= n
        return tuple(shape)

    def new_slab(self, n: int, dtype: np.dtype, zeros: bool = False,
                 order: MemoryOrder | None = None) -> np.ndarray:
        """A slab of ``n`` chunks, uninitialised or all zeros (which costs nothing more for
        large slabs: the pages come zeroed from the system, see :func:`~ngshard._arrays.fresh`)."""
        order = order or self.order
        return fresh(self.slab_shape(n, order), dtype, order, zeros=zeros, huge=SLAB_HUGE_PAGES)

    def chunk_view(self, slab: np.ndarray, offset: int, extent, axis: int) -> np.ndarray:
        """The part inside the array (``extent``) of the chunk at ``offset`` of ``slab``,
        whose stacking axis is ``axis``."""
        index = [slice(0, int(e)) for e in extent]
        index[axis] = slice(int(offset), int(offset) + int(extent[axis]))
        return slab[tuple(index)]
