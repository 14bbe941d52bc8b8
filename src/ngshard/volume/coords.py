"""A volume's voxel coordinates: its box (:class:`Bounds`), and the one translation of an index
in those coordinates to the 0-based index the staged array takes.

A volume is indexed over [x, y, z, channel] as cloud-volume, tensorstore and Neuroglancer
mean it: x, y, z in the layer's own voxel coordinates, ``[voxel_offset, voxel_offset + size)``
per axis (or a view's origin instead of voxel_offset, see ``Volume.translate_to``), the
channel from 0. As in tensorstore, a negative number is a coordinate, not a count from the
end, and an index reaching outside the box is an IndexError naming the box: never a clipped
or shifted read.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

import numpy as np

from ..staged.indexing import expand
from .vectors import Vec3, vec3, xyz

AXES = "xyz"
T = TypeVar("T")


class Bounds(NamedTuple):
    """The box of voxel coordinates a volume covers: ``[start, stop)`` along x, y and z.

    >>> b = Bounds((1000, 2000, 30), (1512, 2512, 94))
    >>> b.shape
    (512, 512, 64)
    >>> print(b)
    [1000, 1512) x [2000, 2512) x [30, 94)
    """

    start: Vec3
    stop: Vec3

    @property
    def shape(self) -> Vec3:
        """The box's size along x, y, z."""
        return xyz(b - a for a, b in zip(self.start, self.stop))

    def __str__(self) -> str:
        return " x ".join(f"[{a}, {b})" for a, b in zip(self.start, self.stop))


class TranslateTo(Generic[T]):
    """``vol.translate_to[origin]``: a view of the volume indexed from ``origin`` (an integer
    for every axis, or (x, y, z)), as tensorstore's ``translate_to``."""

    def __init__(self, view: Callable[[Vec3], T]) -> None:
        self._view = view

    def __getitem__(self, origin: int | Any) -> T:
        if isinstance(origin, (int, np.integer)) and not isinstance(origin, (bool, np.bool_)):
            origin = (origin,) * 3
        return self._view(vec3(origin, "translate_to origin", positive=False))


def _outside(axis: int, what: str, bounds: Bounds, note: str) -> IndexError:
    return IndexError(f"{AXES[axis]} index {what} is outside the volume's bounds {bounds} "
                      f"({note})")


def _slice_text(s: slice) -> str:
    text = f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"
    return text if s.step is None else f"{text}:{s.step}"


def _slice(s: slice, axis: int, bounds: Bounds, note: str) -> slice:
    """A slice in coordinates as a 0-based one; open ends are the ends of the domain."""
    lo, hi = bounds.start[axis], bounds.stop[axis]
    start, stop, step = (None if v is None else operator.index(v)
                         for v in (s.start, s.stop, s.step))
    step = 1 if step is None else step
    if step == 0:
        raise ValueError("slice step cannot be zero")
    if step > 0:  # [first, end) within [lo, hi]
        first, end = (lo if start is None else start), (hi if stop is None else stop)
        if not (lo <= first <= hi and lo <= end <= hi):
            raise _outside(axis, _slice_text(s), bounds, note)
        return slice(first - lo, max(first, end) - lo, step)
    # a negative step runs from first down to end (exclusive): (end, first] within [lo, hi)
    first, end = (hi - 1 if start is None else start), (lo - 1 if stop is None else stop)
    if not (lo - 1 <= first < hi and lo - 1 <= end < hi):
        raise _outside(axis, _slice_text(s), bounds, note)
    if end >= first:
        return slice(0, 0)
    # 0-based, the end before the first voxel is -1, which a Python slice reads as the last
    return slice(first - lo, None if end < lo else end - lo, step)


def _axis(index: Any, axis: int, bounds: Bounds, note: str) -> Any:
    """One spatial axis of an index, translated; what is not a coordinate (a mask, which
    covers the domain, or something invalid) is handed on for the staged array to judge."""
    if isinstance(index, slice):
        return _slice(index, axis, bounds, note)
    if isinstance(index, (bool, np.bool_)) or index is None:
        return index
    lo, hi = bounds.start[axis], bounds.stop[axis]
    if isinstance(index, (int, np.integer)) or \
            (isinstance(index, np.ndarray) and index.ndim == 0 and index.dtype.kind in "iu"):
        i = int(index)
        if not lo <= i < hi:
            raise _outside(axis, str(i), bounds, note)
        return i - lo
    try:
        arr = np.asarray(index)
    except (TypeError, ValueError):
        return index
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or not arr.size:
        return index
    if arr.min() < lo or arr.max() >= hi:
        bad = arr[(arr < lo) | (arr >= hi)][0]
        raise _outside(axis, f"{int(bad)} (of an index array)", bounds, note)
    return arr.astype(np.int64) - lo


def array_index(index: Any, bounds: Bounds, note: str) -> tuple:
    """The 0-based index, over [x, y, z, channel], of ``index`` in the coordinates of
    ``bounds``: integers, slice bounds and integer arrays along x, y, z are coordinates
    (``None`` bounds: the ends of the domain; any step), a boolean mask has the axis's size;
    the channel axis is already 0-based.

    Parameters
    ----------
    index
        A numpy-style index: basic, or orthogonal (an integer array or mask per axis).
    bounds
        The volume's box.
    note
        What the coordinates are, for the IndexError's message.

    Raises
    ------
    IndexError
        A coordinate or slice outside ``bounds`` (naming them), too many indices, two
        ellipses.
    ValueError
        A slice step of zero.
    """
    index = expand(index, 4)
    return (*(_axis(i, axis, bounds, note) for axis, i in enumerate(index[:3])), index[3])
