"""IndexChunkMapper: the selection along one axis, mapped onto that axis's chunks (seed 003).

For the points an axis selects it gives the *selected* chunks (holding at least one point),
which of them are *wholly* selected (every point of the chunk, clipped at the array's edge),
and per selected chunk its 1-D slice pairs: a start and step inside the chunk, a start in the
selection, and a count. A slice gives one pair per chunk; an array gives one pair per run of
consecutive points. All of it is numpy over the points at once.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .indexing import AxisSelection


def mapper(selection: AxisSelection, size: int, chunk: int) -> IndexChunkMapper:
    """The mapper of one axis; those of slices and integers are remembered (a loop of
    assignments, one z-slice after another, maps the same x and y again and again)."""
    if selection.array is not None:
        return IndexChunkMapper(selection, size, chunk)
    return _progression_mapper(selection.start, selection.step, selection.count, size, chunk)


@lru_cache(maxsize=1024)
def _progression_mapper(start: int, step: int, count: int, size: int, chunk: int
                        ) -> IndexChunkMapper:
    return IndexChunkMapper(AxisSelection(start, step, count), size, chunk)


_ONE_CHUNK = np.array([0, 1], np.int64), np.ones(1, np.int64)  # bounds, pairs per chunk


class IndexChunkMapper:
    """One axis of a selection against chunks of ``chunk`` points on an axis of ``size``.

    Attributes
    ----------
    chunks : (m,) int64
        Selected chunk indices, ascending.
    whole : (m,) bool
        Whether each selected chunk is wholly selected.
    bounds : (m + 1,) int64
        The slice pairs of ``chunks[j]`` are ``bounds[j]:bounds[j + 1]`` of the pair arrays.
    local, step, start, count : (p,) int64
        Per pair: first point inside the chunk, step inside the chunk, first position in the
        selection (where the step is always 1), number of points.
    pairs : (4, p) int64
        ``local``, ``step``, ``start`` and ``count`` as the rows of one array: plans take a
        chunk's pair with one index rather than four.
    heads : (2, m) int64
        ``chunks`` and ``whole`` as the rows of one array, likewise.
    one_pair : bool
        One pair per chunk (a slice or an integer; an array of points may have more).
    """

    chunks: np.ndarray
    whole: np.ndarray
    bounds: np.ndarray
    pairs_per_chunk: np.ndarray
    local: np.ndarray
    step: np.ndarray
    start: np.ndarray
    count: np.ndarray
    pairs: np.ndarray
    heads: np.ndarray
    one_pair: bool

    def __init__(self, selection: AxisSelection, size: int, chunk: int) -> None:
        if selection.step > 0 and selection.count:
            self._progression(selection, size, chunk)
        else:
            self._points(selection, chunk)
            self.pairs_per_chunk = np.diff(self.bounds)
            self.whole = self.pairs_per_chunk == 1
            self.whole &= self.count[self.bounds[:-1]] == np.minimum(
                chunk, size - self.chunks * chunk)
        if not hasattr(self, "pairs"):
            self.pairs = np.array([self.local, self.step, self.start, self.count], np.int64)
            self.heads = np.array([self.chunks, self.whole], np.int64)
        for array in vars(self).values():  # shared by every plan of the same selection
            array.flags.writeable = False
        self.one_pair = len(self.local) == len(self.chunks)

    def _progression(self, selection: AxisSelection, size: int, chunk: int) -> None:
        """Points ``first + step * k``: one pair per chunk, by arithmetic over the chunks."""
        first, step, n = selection.start, selection.step, selection.count
        last = first + step * (n - 1)
        if first // chunk == last // chunk:  # one chunk (an integer, a short slice): one array
            j = first // chunk
            whole = n == min(chunk, size - j * chunk) and (step == 1 or n == 1)
            # the tables first, the rest as views of their rows: fewer arrays to make
            self.pairs = np.array([[first % chunk], [step], [0], [n]], np.int64)
            self.heads = np.array([[j], [whole]], np.int64)
            self.local, self.step, self.start, self.count = self.pairs
            self.chunks, self.whole = self.heads[0], self.heads[1].astype(bool)
            self.bounds, self.pairs_per_chunk = _ONE_CHUNK
            return
        chunks = np.arange(first // chunk, last // chunk + 1, dtype=np.int64)
        edges = chunks * chunk
        extent = np.minimum(chunk, size - edges)
        if step == 1:  # the common case, in fewer steps
            lo, hi = np.maximum(edges, first), np.minimum(edges + chunk, first + n)
            self.chunks, self.local, self.start, self.count = chunks, lo - edges, lo - first, \
                hi - lo
            self.whole = self.count == extent
        else:
            k0 = np.maximum(0, (edges - first + step - 1) // step)  # first k in each chunk
            k1 = np.minimum(n, (edges + chunk - first + step - 1) // step)
            if step > chunk:  # a step longer than a chunk skips chunks
                keep = k1 > k0
                chunks, edges, k0, k1 = chunks[keep], edges[keep], k0[keep], k1[keep]
                extent = extent[keep]
            self.chunks, self.start, self.count = chunks, k0, k1 - k0
            self.local = first + k0 * step - edges
            self.whole = self.count == extent  # only a chunk of one point, with a step
        self.step = np.full(len(self.chunks), step, np.int64)
        self.bounds = np.arange(len(self.chunks) + 1, dtype=np.int64)
        self.pairs_per_chunk = np.ones(len(self.chunks), np.int64)

    def _points(self, selection: AxisSelection, chunk: int) -> None:
        """Any sorted points: one pair per run of consecutive points inside a chunk."""
        points = selection.points
        n = len(points)
        owner = points // chunk
        cut = np.ones(n, bool)
        cut[1:] = owner[1:] != owner[:-1]
        if n > 1:
            cut[1:] |= np.diff(points) != 1
        first = np.flatnonzero(cut)
        self.count = np.diff(np.append(first, n)).astype(np.int64)
        run_chunk = owner[first]
        self.local = points[first] - run_chunk * chunk
        self.start = first.astype(np.int64)
        self.step = np.ones(len(first), np.int64)
        new_chunk = np.ones(len(first), bool)
        new_chunk[1:] = run_chunk[1:] != run_chunk[:-1]
        heads = np.flatnonzero(new_chunk)
        self.chunks = run_chunk[heads]
        self.bounds = np.append(heads, len(first)).astype(np.int64)

    def __len__(self) -> int:
        return len(self.chunks)

    def __repr__(self) -> str:
        return (f"IndexChunkMapper(chunks={self.chunks.tolist()}, "
                f"whole={self.whole.astype(int).tolist()}, pairs={len(self.local)})")
