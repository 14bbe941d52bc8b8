"""User indices -> selections: per axis, the sorted points selected, and how the result (or the
assigned value) maps onto them.

Basic indexing (integers, slices with any step, ``...``) and orthogonal advanced indexing (one
1-D integer array or boolean mask per axis, each acting on its own axis, as zarr's ``oindex``)
are supported. Every axis is reduced to sorted unique points, the form the chunk mappers work
on; what that loses (a negative step's direction, an array's order and repeats, an integer's
dropped axis) is kept beside it and undone on the result, or applied to the value first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np


@dataclass(slots=True)
class AxisSelection:
    """The points one axis selects, sorted and unique.

    ``step`` > 0: the ``count`` points ``start + step * k`` (a slice or an integer); 0: the
    sorted points of ``array``. ``drop``: an integer index (the axis leaves the result).
    ``flip``: a negative step (the result runs backwards). ``inverse`` (arrays): result
    position -> point, for reads; ``last`` (arrays): point -> position of its last occurrence
    in the index, for writes (the last assignment wins, as in numpy).
    """

    start: int = 0
    step: int = 1
    count: int = 0
    array: np.ndarray | None = None
    drop: bool = False
    flip: bool = False
    inverse: np.ndarray | None = None
    last: np.ndarray | None = None

    @classmethod
    def of_points(cls, points: np.ndarray, **kw: Any) -> AxisSelection:
        return cls(0, 0, len(points), points, **kw)

    @property
    def points(self) -> np.ndarray:
        if self.array is not None:
            return self.array
        return np.arange(self.start, self.start + self.step * self.count, self.step,
                         dtype=np.int64)

    def __len__(self) -> int:
        return self.count

    def part(self, lo: int, hi: int) -> AxisSelection:
        """The points at positions [lo, hi) of this selection (for planning only)."""
        if self.array is not None:
            return AxisSelection.of_points(self.array[lo:hi])
        return AxisSelection(self.start + lo * self.step, self.step, max(0, hi - lo))

    @property
    def result_len(self) -> int:
        return len(self.inverse) if self.inverse is not None else self.count

    def view(self) -> str:
        """How this axis of the value maps onto the points, for printing plans."""
        if self.drop:
            return "None"
        if self.last is not None:
            return "[...]" if len(self.last) != self.count or \
                (self.last != np.arange(len(self.last))).any() else ":"
        return "::-1" if self.flip else ":"


def _axis(index: Any, n: int, axis: int) -> AxisSelection:
    """One axis of an index."""
    if type(index) is slice and index.step is None:  # the common case, first
        start, stop, _ = index.indices(n)
        return AxisSelection(start, 1, max(0, stop - start))
    if isinstance(index, slice):
        r = range(*index.indices(n))
        flip = r.step < 0 and len(r) > 1
        if r.step < 0:
            r = r[::-1]
        return AxisSelection(r.start, r.step, len(r), flip=flip)
    if isinstance(index, (bool, np.bool_)):
        raise IndexError(f"a boolean cannot index axis {axis}: use a mask as long as the axis")
    if isinstance(index, (int, np.integer)) or \
            (isinstance(index, np.ndarray) and index.ndim == 0 and index.dtype.kind in "iu"):
        i = int(index)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
        return AxisSelection(i % n, 1, 1, drop=True)
    if index is None:
        raise IndexError("np.newaxis (None) is not supported in an index")
    try:
        arr = np.asarray(index)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 1 or not (arr.dtype.kind in "iub" or arr.size == 0):
        raise IndexError(f"only integers, slices, ..., and 1-D integer arrays or boolean masks "
                         f"index an axis, got {index!r} for axis {axis}")
    if arr.dtype.kind == "b":
        if len(arr) != n:
            raise IndexError(f"boolean mask of length {len(arr)} for axis {axis} of size {n}")
        return AxisSelection.of_points(np.flatnonzero(arr).astype(np.int64))
    arr = arr.astype(np.int64)
    if len(arr) and (arr.min() < -n or arr.max() >= n):
        bad = arr[(arr < -n) | (arr >= n)][0]
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}")
    arr = np.where(arr < 0, arr + n, arr)
    points, inverse = np.unique(arr, return_inverse=True)
    # last occurrence of each point: unique over the reversed array gives first-from-the-end
    last = len(arr) - 1 - np.unique(arr[::-1], return_index=True)[1]
    return AxisSelection.of_points(points, inverse=inverse.reshape(-1), last=last)


@dataclass(frozen=True)
class Selection:
    """A normalized index: one :class:`AxisSelection` per axis of the array."""

    axes: tuple[AxisSelection, ...]

    @cached_property
    def shape(self) -> tuple[int, ...]:
        """The selection's shape: points per axis (an integer index counts 1)."""
        return tuple(a.count for a in self.axes)

    @cached_property
    def result_shape(self) -> tuple[int, ...]:
        """The shape numpy gives the result: dropped axes gone, arrays as long as they are."""
        return tuple(a.result_len for a in self.axes if not a.drop)

    def view(self) -> str:
        return "[" + ", ".join(a.view() for a in self.axes) + "]"

    def finish(self, out: np.ndarray) -> np.ndarray:
        """The result of a read from ``out`` (of :attr:`shape`): reverse flipped axes, order
        and repeat array axes, drop integer axes."""
        for i, a in enumerate(self.axes):
            if a.flip:
                out = np.flip(out, i)
            elif a.inverse is not None and (len(a.inverse) != a.count or
                                            (a.inverse != np.arange(a.count)).any()):
                out = out.take(a.inverse, axis=i)
        drop = tuple(i for i, a in enumerate(self.axes) if a.drop)
        return out.reshape([n for i, n in enumerate(out.shape) if i not in drop]) if drop \
            else out

    def value(self, value: np.ndarray) -> np.ndarray:
        """The assigned ``value`` (broadcast to :attr:`result_shape` as numpy does) laid over
        :attr:`shape`: the points' order, last occurrence of repeated points. A read-only
        view where it can be (a scalar stays a broadcast scalar)."""
        target = self.result_shape
        while value.ndim > len(target) and value.shape[0] == 1:
            value = value[0]  # numpy drops leading unit axes of a value
        try:
            if value.shape != target:
                value = np.broadcast_to(value, target)
        except ValueError:
            raise ValueError(f"value of shape {value.shape} does not fit the selection of "
                             f"shape {target}") from None
        if len(target) != len(self.axes):  # integer axes back in, as length 1
            value = value.reshape([1 if a.drop else a.result_len for a in self.axes])
        for i, a in enumerate(self.axes):
            if a.flip:
                value = np.flip(value, i)
            elif a.last is not None and value.strides[i] != 0:
                value = value.take(a.last, axis=i)
            elif a.last is not None:  # a broadcast axis: every point gets the same
                value = np.broadcast_to(value.take(a.last[:1], axis=i), (
                    *value.shape[:i], a.count, *value.shape[i + 1:]))
        return value


def expand(index: Any, ndim: int) -> tuple:
    """A numpy-style ``index`` as one item per axis of an ``ndim``-dimensional array: the
    ellipsis expanded and the axes after the last item whole (``slice(None)``).

    Raises
    ------
    IndexError
        Too many indices or two ellipses.
    """
    if not isinstance(index, tuple):
        index = (index,)
    ellipses = sum(i is Ellipsis for i in index)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if ellipses:
        at = next(k for k, i in enumerate(index) if i is Ellipsis)
        index = index[:at] + (slice(None),) * (ndim - len(index) + 1) + index[at + 1:]
    if len(index) > ndim:
        raise IndexError(f"too many indices: {len(index)} for an array of {ndim} axes")
    return index + (slice(None),) * (ndim - len(index))


def normalize(index: Any, shape: Sequence[int]) -> Selection:
    """A :class:`Selection` from a numpy-style ``index`` over an array of ``shape``.

    Raises
    ------
    IndexError
        An index out of bounds, too many indices, two ellipses, a newaxis, a boolean scalar,
        a mask of the wrong length, or an array that is not 1-D integers or booleans.
    """
    index = expand(index, len(shape))
    return Selection(tuple(_axis(i, int(n), axis) for axis, (i, n) in
                           enumerate(zip(index, shape))))
