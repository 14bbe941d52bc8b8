"""The multi-level spatial index of an annotation collection, as arrays: level grids, the
cells each annotation meets (:mod:`.annotation_shapes`), compressed Morton keys, and which
annotations each level emits.

Levels follow the spec: level 0 is one cell over ``[lower_bound, upper_bound)``; each finer
level halves the chunk size along the axes within a factor sqrt(2) of the longest (the most
isotropic choice). At each level every annotation still remaining is emitted with
probability ``min(1, limit / maxCount)``, ``maxCount`` being the most annotations remaining in
one cell, and it is emitted in every cell it meets at that level, so a query that walks the
levels and drops repeated ids sees each annotation exactly once. Two departures bound the
work: an annotation whose box would meet more than ``MAX_CELLS`` cells of the next level is
emitted now (a large box among small cells), and a level past ``MAX_LEVELS`` (or past 64 key
bits) emits everything left.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..limits import MAX_CELLS, MAX_LEVELS
from .annotation_shapes import EXACT, Shapes


@dataclass(frozen=True)
class Level:
    """One spatial index level: cell size and grid shape, per axis."""

    chunk_size: np.ndarray
    grid_shape: np.ndarray

    @property
    def bits(self) -> np.ndarray:
        return np.array([int(g - 1).bit_length() for g in self.grid_shape], np.int64)

    def finer(self) -> Level:
        halve = self.chunk_size >= self.chunk_size.max() / np.sqrt(2)
        return Level(np.where(halve, self.chunk_size / 2, self.chunk_size),
                     np.where(halve, self.grid_shape * 2, self.grid_shape))

    def cell_ranges(self, lo: np.ndarray, hi: np.ndarray, lower: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """First and last cell (inclusive, clipped to the grid) each box meets."""
        top = self.grid_shape - 1
        first = np.clip(np.floor((lo - lower) / self.chunk_size), 0, top).astype(np.int64)
        last = np.clip(np.floor((hi - lower) / self.chunk_size), 0, top).astype(np.int64)
        return first, np.maximum(first, last)


def expand_cells(first: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (box index, cell) pairs of boxes spanning cell ranges ``[first, last]``: the box
    indices ``(m,)`` and the cells ``(m, rank)``."""
    extent = last - first + 1
    counts = np.prod(extent, axis=1)
    owner = np.repeat(np.arange(len(first)), counts)
    r = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    cells = np.empty((len(owner), first.shape[1]), np.int64)
    for d in range(first.shape[1]):
        ext = extent[owner, d]
        cells[:, d] = first[owner, d] + r % ext
        r //= ext
    return owner, cells


def morton(cells: np.ndarray, grid_shape: np.ndarray) -> np.ndarray:
    """Compressed Morton codes of ``(m, rank)`` cells: bit i of each axis in turn, axes whose
    bits are used up skipped (as for volume chunks)."""
    bits = [int(g - 1).bit_length() for g in grid_shape]
    code = np.zeros(len(cells), np.uint64)
    out = 0
    one = np.uint64(1)
    c = cells.astype(np.uint64)
    for i in range(max(bits, default=0)):
        for d, b in enumerate(bits):
            if i < b:
                code |= ((c[:, d] >> np.uint64(i)) & one) << np.uint64(out)
                out += 1
    return code


def unmorton(codes: np.ndarray, grid_shape: np.ndarray) -> np.ndarray:
    """The cells ``(m, rank)`` of compressed Morton codes (the inverse of :func:`morton`)."""
    bits = [int(g - 1).bit_length() for g in grid_shape]
    codes = np.asarray(codes, np.uint64)
    cells = np.zeros((len(codes), len(bits)), np.uint64)
    out, one = 0, np.uint64(1)
    for i in range(max(bits, default=0)):
        for d, b in enumerate(bits):
            if i < b:
                cells[:, d] |= ((codes >> np.uint64(out)) & one) << np.uint64(i)
                out += 1
    return cells.astype(np.int64)


@dataclass
class Emitted:
    """What one level holds: its grid, and (annotation, cell) pairs grouped by cell, in
    random order within each cell; cell j's annotations are
    ``annotations[bounds[j]:bounds[j + 1]]``."""

    level: Level
    limit: int
    cells: np.ndarray  # (c, rank) the non-empty cells
    annotations: np.ndarray
    bounds: np.ndarray


def spatial_levels(shapes: Shapes, lower: np.ndarray, upper: np.ndarray, limit: int,
                   seed: int = 0) -> Iterator[Emitted]:
    """The levels of the index of ``shapes``, coarse to fine, until every annotation is
    emitted."""
    rng = np.random.default_rng(seed)
    lo, hi = shapes.lo, shapes.hi
    level = Level(np.asarray(upper, np.float64) - lower, np.ones(len(lower), np.int64))
    remaining = np.arange(len(lo))
    depth = 0
    while len(remaining):
        owner, cells = cells_met(shapes, remaining, level, lower)
        keys = morton(cells, level.grid_shape)
        _, per_cell = np.unique(keys, return_counts=True)
        most = int(per_cell.max())
        draw = rng.random(len(remaining))
        emit = draw < min(1.0, limit / most)
        finer = level.finer()
        final = depth + 1 >= MAX_LEVELS or int(finer.bits.sum()) > 64
        if final:
            emit[:] = True
        else:
            f2, l2 = finer.cell_ranges(lo[remaining], hi[remaining], lower)
            emit |= np.prod(l2 - f2 + 1, axis=1) > MAX_CELLS
        take = emit[owner]
        owner, cells, keys = owner[take], cells[take], keys[take]
        order = np.lexsort((draw[owner], keys))
        owner, cells, keys = owner[order], cells[order], keys[order]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else \
            np.zeros(0, np.int64)
        yield Emitted(level, limit, cells[starts], remaining[owner],
                      np.r_[starts, len(keys)].astype(np.int64))
        remaining = remaining[~emit]
        level, depth = finer, depth + 1


def cells_met(shapes: Shapes, remaining: np.ndarray, level: Level, lower: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The (position in ``remaining``, cell) pairs of the cells each remaining annotation
    meets at ``level``, each pair once: the cells of each piece's box, kept where the piece
    meets the cell (lines, polylines and ellipsoids; :mod:`.annotation_shapes`).

    Parameters
    ----------
    shapes
        The annotations' pieces.
    remaining
        The indices of the annotations to place.
    level
        The spatial index level: its cell size and grid shape.
    lower
        The index's lower bound (the grid's origin).

    Returns
    -------
    tuple of numpy.ndarray
        Positions in ``remaining`` (int64, n) and the cells (int64, n x 3).
    """
    position = np.full(len(shapes.lo), -1, np.int64)
    position[remaining] = np.arange(len(remaining))
    pieces = np.flatnonzero(position[shapes.owner] >= 0)
    a, b = shapes.in_grid(pieces, lower, level.chunk_size)
    plo, phi = shapes.piece_boxes(a, b)
    top = level.grid_shape - 1
    first = np.clip(np.floor(plo), 0, top).astype(np.int64)
    last = np.maximum(first, np.clip(np.floor(phi), 0, top).astype(np.int64))
    row, cells = expand_cells(first, last)
    if shapes.kind in EXACT:
        meets = shapes.meet(a[row], b[row], np.where(cells > 0, cells, -np.inf),
                            np.where(cells < top, cells + 1.0, np.inf))
        row, cells = row[meets], cells[meets]
    owner = position[shapes.owner[pieces[row]]]
    if len(pieces) > len(remaining):  # several segments of a polyline in one cell: once
        keys = morton(cells, level.grid_shape)
        order = np.lexsort((keys, owner))
        keep = np.r_[True, (np.diff(owner[order]) != 0) | (np.diff(keys[order]) != 0)] \
            if len(order) else np.zeros(0, bool)
        owner, cells = owner[order][keep], cells[order][keep]
    return owner, cells


def cells_meeting(level: Level, lower_bound: np.ndarray, lo: np.ndarray, hi: np.ndarray
                  ) -> np.ndarray:
    """The cells ``(m, rank)`` of a level that the box ``[lo, hi]`` meets."""
    first, last = level.cell_ranges(lo[None], hi[None], lower_bound)
    return expand_cells(first, last)[1]
