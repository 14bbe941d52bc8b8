"""A batch of multi-resolution mesh LODs decoded at once: every Draco fragment of the batch on
the cores (its declared counts vetted first, :mod:`.draco_guard`), then one numpy pass over
all their vertices (grid positions to model coordinates, the info's transform) and faces
(renumbered within each LOD's mesh), split into one (vertices, faces) pair per LOD."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from .._arrays import unique
from ..errors import CorruptDataError
from ..limits import MESH_ROWS
from ..threads import WORKERS, pmap
from .draco_guard import decoder, heads, in_bounds
from .mesh_codec import Manifest


class Piece(NamedTuple):
    """One segment's LOD to decode: its fragments lie in ``data`` from fragment byte
    ``start`` of the segment's fragment data."""

    key: int
    lod: int
    manifest: Manifest
    data: Any  # bytes-like
    start: int


def decode_pieces(pieces: list[Piece], bits: int, transform: np.ndarray,
                  where: Callable[[int], str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(vertices ``(n, 3)`` float32 in model coordinates, faces ``(m, 3)`` uint32) of each
    piece, as views into arrays of the batch. ``where(key)`` names a segment's file for
    messages; a fragment that does not decode, or whose faces name missing vertices, raises
    CorruptDataError naming the segment, LOD and fragment.

    The pieces go to the cores in groups of about equal bytes, each group decoded and
    assembled by one worker: numpy releases the GIL as DracoPy does, so the assembly (and
    its page faults) runs on every core too."""
    counts = np.array([len(p.manifest.fragment_sizes[p.lod]) for p in pieces], np.int64)
    firsts = np.concatenate([[0], np.cumsum(counts)])

    def label(i: int) -> str:
        j = int(np.searchsorted(firsts, i, "right")) - 1
        p = pieces[j]
        return f"{where(p.key)}: segment {p.key} LOD {p.lod} fragment {i - firsts[j]}"

    bufs, head_rows, size_rows = [], [], []
    for p in pieces:
        sizes = p.manifest.fragment_sizes[p.lod].astype(np.int64)
        ends = p.manifest.lod_range(p.lod)[0] - p.start + np.cumsum(sizes)
        begins = ends - sizes
        view = memoryview(p.data)
        bufs += [view[a:b] for a, b in zip(begins.tolist(), ends.tolist())]
        head_rows.append(heads(p.data, begins, ends))
        size_rows.append(sizes)
    sizes = np.concatenate(size_rows) if pieces else np.zeros(0, np.int64)
    vetted = in_bounds(np.concatenate(head_rows), sizes) if pieces else sizes.astype(bool)
    decode = decoder(bufs, vetted)

    def group(span: tuple[int, int]) -> list[tuple[np.ndarray, np.ndarray]]:
        a, b = span
        results = []
        for i in range(firsts[a], firsts[b]):
            r = decode(i)
            if isinstance(r, str):
                raise CorruptDataError(f"{label(i)}: Draco fragment does not decode ({r})")
            results.append(r)
        return _assemble(pieces[a:b], counts[a:b], results, bits, transform,
                         lambda i: label(firsts[a] + i))

    # group bounds: where the running byte count crosses a multiple of total / groups
    weight = np.concatenate([[0], np.cumsum(sizes)])[firsts[1:]]  # bytes up to each piece
    cuts = np.searchsorted(weight, np.linspace(0, weight[-1] if len(weight) else 0,
                                               _GROUPS + 1)[1:-1], "right")
    bounds = unique(np.concatenate([[0], cuts, [len(pieces)]])).tolist()
    spans = list(zip(bounds[:-1], bounds[1:]))
    return [r for g in pmap(group, spans, min_items=2) for r in g]


_GROUPS = 4 * WORKERS


def _rows(values: np.ndarray, ends: np.ndarray, s: int, e: int) -> np.ndarray:
    """Rows ``s:e`` of ``np.repeat(values, counts, axis=0)`` (``ends = cumsum(counts)``),
    without building the whole repeat."""
    j0, j1 = np.searchsorted(ends, [s, e - 1], "right")
    ends = ends[j0:j1 + 1]
    starts = np.concatenate([[s], ends[:-1]])
    return np.repeat(values[j0:j1 + 1], np.minimum(ends, e) - np.maximum(starts, s), axis=0)


def _assemble(pieces: list[Piece], counts: np.ndarray, results: list, bits: int,
              transform: np.ndarray, label: Callable[[int], str]
              ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every fragment's points and faces concatenated, then mapped in place a slice at a
    time: fresh memory costs a page fault per 4 KiB, so the only large arrays made are the
    two results (whole-array temporaries took most of the time)."""
    n = len(results)
    vcounts = np.fromiter((len(p) for p, _ in results), np.int64, n)
    fcounts = np.fromiter((len(f) for _, f in results), np.int64, n)
    vends, fends = np.cumsum(vcounts), np.cumsum(fcounts)
    points = np.concatenate([p for p, _ in results]) if n else np.zeros((0, 3), np.float32)
    faces = np.concatenate([f for _, f in results]) if n else np.zeros((0, 3), np.uint32)
    # Each fragment's grid cell: model = corner + size * (position + points / top), and the
    # transform folded in (out = A @ model + t): a scale and a base per fragment when A is
    # diagonal (the usual voxel size), else a matrix product per slice.
    top = float((1 << bits) - 1)
    corner = np.array([p.manifest.grid_origin + p.manifest.vertex_offsets[p.lod]
                       for p in pieces], np.float64).reshape(-1, 3)
    size = np.array([p.manifest.chunk_shape * float(1 << p.lod) for p in pieces],
                    np.float64).reshape(-1, 3)
    position = np.concatenate([p.manifest.fragment_positions[p.lod] for p in pieces]) \
        if pieces else np.zeros((0, 3), np.uint32)
    size_f = np.repeat(size, counts, axis=0)
    base_f = np.repeat(corner, counts, axis=0) + size_f * position
    scale_f = size_f / top
    a, t = transform[:, :3], transform[:, 3]
    diagonal = not np.count_nonzero(a - np.diag(np.diag(a)))
    if diagonal:
        scale_f, base_f = scale_f * np.diag(a), base_f * np.diag(a) + t
    for s in range(0, len(points), MESH_ROWS):
        e = min(s + MESH_ROWS, len(points))
        model = points[s:e].astype(np.float64)
        model *= _rows(scale_f, vends, s, e)
        model += _rows(base_f, vends, s, e)
        points[s:e] = model if diagonal else model @ a.T + t
    # faces: checked against their fragment's vertices, then renumbered to their LOD mesh's
    vstart = vends - vcounts
    firsts = np.cumsum(counts) - counts
    shift = (vstart - np.repeat(np.append(vstart, len(points))[firsts], counts)
             ).astype(np.uint32)
    limit = vcounts.astype(np.uint32)
    for s in range(0, len(faces), MESH_ROWS):
        e = min(s + MESH_ROWS, len(faces))
        part = faces[s:e]
        largest = np.maximum(np.maximum(part[:, 0], part[:, 1]), part[:, 2])
        bad = largest >= _rows(limit, fends, s, e)
        if bad.any():
            i = int(np.searchsorted(fends, s + np.argmax(bad), "right"))
            raise CorruptDataError(f"{label(i)}: Draco fragment has faces past its "
                                   f"{vcounts[i]} vertices")
        part += _rows(shift, fends, s, e)[:, None]
    vb = np.concatenate([[0], vends])[np.append(firsts, n)]
    fb = np.concatenate([[0], fends])[np.append(firsts, n)]
    return [(points[vb[j]:vb[j + 1]], faces[fb[j]:fb[j + 1]]) for j in range(len(pieces))]
