"""The numpy model the staged-array tests check against: orthogonal indexing (each axis's index
on its own axis, as zarr's ``oindex``) written with ``np.ix_``, and index strategies."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st


def axis_points(index, n: int) -> tuple[np.ndarray, bool]:
    """(points in index order, whether the axis is dropped) of one axis's index."""
    if isinstance(index, slice):
        return np.arange(n)[index], False
    if isinstance(index, (int, np.integer)):
        return np.array([index % n]), True
    arr = np.asarray(index)
    if arr.dtype == bool:
        return np.flatnonzero(arr), False
    return np.where(arr < 0, arr + n, arr).astype(np.int64), False


def expand(index, ndim: int) -> tuple:
    if not isinstance(index, tuple):
        index = (index,)
    if any(i is Ellipsis for i in index):
        at = next(k for k, i in enumerate(index) if i is Ellipsis)
        index = index[:at] + (slice(None),) * (ndim - len(index) + 1) + index[at + 1:]
    return index + (slice(None),) * (ndim - len(index))


def oget(model: np.ndarray, index) -> np.ndarray:
    axes = [axis_points(i, n) for i, n in zip(expand(index, model.ndim), model.shape)]
    out = model[np.ix_(*[p for p, _ in axes])]
    return out.reshape([n for n, (_, drop) in zip(out.shape, axes) if not drop])


def oset(model: np.ndarray, index, value) -> None:
    axes = [axis_points(i, n) for i, n in zip(expand(index, model.ndim), model.shape)]
    shape = [len(p) for p, drop in axes if not drop]
    value = np.broadcast_to(np.asarray(value), shape)
    full = value.reshape([len(p) for p, _ in axes])
    model[np.ix_(*[p for p, _ in axes])] = full


@st.composite
def axis_index(draw, n: int, allow_int: bool = True):
    """An index of one axis of size ``n``: integer, slice with any step, int array or mask."""
    kinds = ["slice", "slice", "array", "mask"] + (["int"] if allow_int and n else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "int":
        return draw(st.integers(-n, n - 1))
    if kind == "slice":
        start = draw(st.none() | st.integers(-n - 2, n + 2))
        stop = draw(st.none() | st.integers(-n - 2, n + 2))
        step = draw(st.none() | st.sampled_from([1, 1, 2, 3, 7, -1, -2, -5]))
        return slice(start, stop, step)
    if kind == "array":
        if not n:
            return np.zeros(0, np.int64)
        return np.array(draw(st.lists(st.integers(-n, n - 1), max_size=6)), np.int64)
    return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)


@st.composite
def index(draw, shape: tuple[int, ...]):
    """A whole index: one per axis, sometimes fewer with an Ellipsis or trailing ones left out."""
    parts = tuple(draw(axis_index(n)) for n in shape)
    style = draw(st.sampled_from(["full", "full", "ellipsis", "short"]))
    if style == "ellipsis" and len(parts) > 1:
        at = draw(st.integers(0, len(parts) - 1))
        return parts[:at] + (Ellipsis,) + parts[at + 1:]
    if style == "short":
        return parts[:draw(st.integers(1, len(parts)))]
    return parts


def box_index(draw, shape: tuple[int, ...], chunks: tuple[int, ...]) -> tuple:
    """A box aligned (or nearly) to chunk edges: writes that cover whole chunks."""
    out = []
    for n, c in zip(shape, chunks):
        grid = -(-n // c)
        a = draw(st.integers(0, max(grid - 1, 0))) * c
        b = min(n, a + draw(st.integers(1, 3)) * c)
        out.append(slice(a, b))
    return tuple(out)
