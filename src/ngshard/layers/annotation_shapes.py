"""Annotation geometry as the spatial index places it: each annotation's bounding box, and
the pieces it is placed by (a line or each segment of a polyline, an ellipsoid, a box, a
point), each tested exactly against grid cells.

The spec stores an annotation in every cell it intersects; a cell is a closed box. For points
and boxes that is every cell their box meets; a line, a polyline or an ellipsoid meets fewer
(a long diagonal line meets a row of cells, its box a cube of them), so their pieces are
tested: segments by clipping against the cell (the slab test), ellipsoids by the distance in
radius units from the centre to the nearest point of the cell. The index tests in grid units
(cell ``c`` spans ``[c, c + 1]``), where the cell a point is binned to by ``floor`` always
contains it; cells on the grid's faces reach to infinity beyond them, as the binning clips
annotations outside the bounds to them. A query tests the same way against its box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

EXACT = ("line", "polyline", "ellipsoid")  # kinds whose bounding box overstates them


@dataclass
class Shapes:
    """Per annotation its bounding box ``lo, hi (n, rank)``; per piece its annotation
    ``owner (p,)`` and two corners ``a, b (p, rank)``: a segment's ends, an ellipsoid's centre
    and radii, or a box's lower and upper corners (a point's both)."""

    kind: str
    lo: np.ndarray
    hi: np.ndarray
    owner: np.ndarray
    a: np.ndarray
    b: np.ndarray

    def in_grid(self, pieces: np.ndarray, lower: np.ndarray, size: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
        """Corners ``a, b`` of ``pieces`` in grid units (radii scaled, not shifted)."""
        a = (self.a[pieces] - lower) / size
        b = self.b[pieces] / size if self.kind == "ellipsoid" else (self.b[pieces] - lower) / size
        return a, b

    def piece_boxes(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounding boxes of pieces given by their corners (in any units)."""
        if self.kind == "ellipsoid":
            return a - b, a + b
        return np.minimum(a, b), np.maximum(a, b)

    def meeting(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per annotation: does its geometry meet the closed box ``[lo, hi]``?"""
        hit = self.meet(self.a, self.b, lo, hi)
        out = np.zeros(len(self.lo), bool)
        out[self.owner[hit]] = True
        return out

    def meet(self, a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray
             ) -> np.ndarray:
        """Per row: does the piece with corners ``a, b`` meet the closed box ``[lo, hi]``?"""
        if self.kind not in EXACT:
            return ((np.minimum(a, b) <= hi) & (np.maximum(a, b) >= lo)).all(axis=1)
        if self.kind == "ellipsoid":
            gap = np.clip(a, lo, hi) - a
            with np.errstate(divide="ignore", invalid="ignore"):
                scaled = np.where(gap == 0, 0.0, gap / b)  # a flat axis: inside or not
            return (np.square(scaled).sum(axis=1) <= 1.0) & np.isfinite(scaled).all(axis=1)
        d = b - a
        with np.errstate(divide="ignore", invalid="ignore"):
            t_lo, t_hi = (lo - a) / d, (hi - a) / d
        flat = d == 0
        inside = (a >= lo) & (a <= hi)
        enter = np.where(flat, np.where(inside, -np.inf, np.inf), np.minimum(t_lo, t_hi))
        leave = np.where(flat, np.where(inside, np.inf, -np.inf), np.maximum(t_lo, t_hi))
        return np.maximum(enter.max(axis=1), 0.0) <= np.minimum(leave.min(axis=1), 1.0)


def shapes(kind: str, rank: int, geometry: Any) -> Shapes:
    """The shapes of ``n`` annotations of one kind (geometry as the writer takes it)."""
    if kind == "polyline":
        counts = np.fromiter(map(len, geometry), np.int64, count=len(geometry))
        flat = np.concatenate([np.asarray(p, np.float64).reshape(-1, rank) for p in geometry]) \
            if len(counts) else np.zeros((0, rank))
        first = np.cumsum(counts) - counts
        lo = np.minimum.reduceat(flat, first) if len(counts) else flat
        hi = np.maximum.reduceat(flat, first) if len(counts) else flat
        # segments: each point to the next within its polyline (a lone point: to itself)
        segments = np.maximum(counts - 1, 1)
        owner = np.repeat(np.arange(len(counts)), segments)
        j = np.arange(len(owner)) - np.repeat(np.cumsum(segments) - segments, segments)
        start = np.repeat(first, segments) + j
        nxt = np.repeat(first, segments) + np.minimum(j + 1, np.repeat(counts - 1, segments))
        return Shapes(kind, lo, hi, owner, flat[start], flat[nxt])
    g = np.asarray(geometry, np.float64).reshape(len(geometry), rank if kind == "point" else
                                                 2 * rank)
    owner = np.arange(len(g))
    if kind == "point":
        return Shapes(kind, g, g, owner, g, g)
    a, b = g[:, :rank], g[:, rank:]
    if kind == "ellipsoid":
        r = np.abs(b)
        return Shapes(kind, a - r, a + r, owner, a, r)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    return Shapes(kind, lo, hi, owner, a if kind == "line" else lo, b if kind == "line" else hi)
