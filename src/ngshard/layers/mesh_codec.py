"""Mesh encodings, pure: the multi-resolution manifest, Draco fragments (through DracoPy, the
``meshes`` extra) and the legacy single-resolution fragment.

Manifest (``neuroglancer_multilod_draco``): ``chunk_shape`` and ``grid_origin`` (3 float32le
each), ``num_lods`` (uint32le), ``lod_scales`` (num_lods float32le), ``vertex_offsets``
(``[num_lods, 3]`` float32le), ``num_fragments_per_lod`` (num_lods uint32le), then per LOD the
fragment positions (``[3, n]`` uint32le, Z-curve order) and fragment sizes (n uint32le). The
fragments' bytes lie back to back, LOD 0 first, in manifest order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..bounded import take
from ..errors import CorruptDataError
from ..types import Blob
from .draco_guard import decoder, draco, heads, in_bounds

_HEAD = 28  # chunk_shape, grid_origin, num_lods


@dataclass
class Manifest:
    """One segment's octree: per LOD the fragment positions ``(n, 3)`` and sizes ``(n,)``."""

    chunk_shape: np.ndarray
    grid_origin: np.ndarray
    lod_scales: np.ndarray
    vertex_offsets: np.ndarray
    fragment_positions: list[np.ndarray]
    fragment_sizes: list[np.ndarray]

    @property
    def num_lods(self) -> int:
        return len(self.lod_scales)

    @property
    def total_size(self) -> int:
        """Bytes of all fragments."""
        return int(sum(int(s.sum()) for s in self.fragment_sizes))

    def lod_range(self, lod: int) -> tuple[int, int]:
        """[begin, end) of one LOD's fragments within the fragment data."""
        before = sum(int(s.sum()) for s in self.fragment_sizes[:lod])
        return before, before + int(self.fragment_sizes[lod].sum())

    def to_bytes(self) -> bytes:
        parts = [np.asarray(self.chunk_shape, "<f4").tobytes(),
                 np.asarray(self.grid_origin, "<f4").tobytes(),
                 np.array([self.num_lods], "<u4").tobytes(),
                 np.asarray(self.lod_scales, "<f4").tobytes(),
                 np.asarray(self.vertex_offsets, "<f4").reshape(-1, 3).tobytes(),
                 np.array([len(p) for p in self.fragment_positions], "<u4").tobytes()]
        for pos, sizes in zip(self.fragment_positions, self.fragment_sizes):
            parts.append(np.ascontiguousarray(np.asarray(pos, "<u4").reshape(-1, 3).T).tobytes())
            parts.append(np.asarray(sizes, "<u4").tobytes())
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, buf: Blob, where: str) -> Manifest:
        """Decode a manifest; every count is checked against the value's length before
        anything is allocated (CorruptDataError naming ``where``)."""
        size = len(buf)
        if size < _HEAD:
            raise CorruptDataError(f"{where}: manifest of {size} bytes is shorter than its "
                                   f"{_HEAD}-byte header")
        head = take(buf, "<f4", 6, where=where, what="header")
        lods = int(take(buf, "<u4", 1, 24, where=where, what="levels of detail")[0])
        fixed = _HEAD + 20 * lods
        if fixed > size:
            raise CorruptDataError(f"{where}: manifest claims {lods} levels of detail, more "
                                   f"than its {size} bytes hold")
        scales = take(buf, "<f4", lods, _HEAD, where=where, what="lod scales")
        offsets = take(buf, "<f4", 3 * lods, _HEAD + 4 * lods, where=where,
                       what="vertex offsets").reshape(lods, 3)
        counts = take(buf, "<u4", lods, _HEAD + 16 * lods, where=where,
                      what="fragment counts").astype(np.int64)
        if fixed + 16 * int(counts.sum()) != size:
            raise CorruptDataError(f"{where}: manifest claims {int(counts.sum())} fragments "
                                   f"({fixed + 16 * int(counts.sum())} bytes) but holds "
                                   f"{size} bytes")
        positions, sizes, at = [], [], fixed
        for n in counts.tolist():
            positions.append(take(buf, "<u4", 3 * n, at, where=where,
                                  what="fragment positions").reshape(3, n).T)
            sizes.append(take(buf, "<u4", n, at + 12 * n, where=where, what="fragment sizes"))
            at += 16 * n
        return cls(head[:3], head[3:], scales, offsets, positions, sizes)


def unindexed_sizes(keys: np.ndarray, values: list) -> np.ndarray:
    """The fragment bytes before each manifest of a sharded mesh layer: the unindexed entries
    of its store (``open_kv(..., unindexed=)``)."""
    return np.array([Manifest.from_bytes(v, f"segment {k}").total_size
                     for k, v in zip(np.asarray(keys).tolist(), values)], np.uint64)


def encode_fragment(points: np.ndarray, faces: np.ndarray, bits: int,
                    compression_level: int = 7) -> bytes:
    """A Draco fragment of integer positions in ``[0, 2**bits)``: Draco's quantization is
    given the grid itself (origin 0, range ``2**bits - 1``, ``bits`` bits), so every position
    decodes exactly, whichever way a reader interprets it."""
    if not len(faces):
        return b""
    top = (1 << bits) - 1
    return draco().encode(np.asarray(points, np.float32), np.asarray(faces, np.uint32),
                        quantization_bits=bits, quantization_range=top,
                        quantization_origin=[0.0, 0.0, 0.0],
                        compression_level=compression_level)


def decode_fragment(buf: Blob, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(positions ``(n, 3)`` float32, faces ``(m, 3)`` uint32) of a Draco fragment, its
    declared counts vetted against its size first (:mod:`.draco_guard`); an empty fragment (a
    node without triangles of its own) is an empty mesh."""
    size = np.array([len(buf)])
    out = decoder([buf], in_bounds(heads(buf, np.zeros(1, np.int64), size), size))(0)
    if isinstance(out, str):
        raise CorruptDataError(f"{where}: Draco fragment does not decode ({out})")
    points, faces = out
    if len(faces) and int(faces.max()) >= len(points):
        raise CorruptDataError(f"{where}: Draco fragment has faces past its "
                               f"{len(points)} vertices")
    return points, faces


def encode_legacy(vertices: np.ndarray, faces: np.ndarray) -> bytes:
    """A legacy single-resolution fragment: uint32le vertex count, float32le positions,
    uint32le triangle indices."""
    v = np.asarray(vertices, "<f4").reshape(-1, 3)
    return (np.array([len(v)], "<u4").tobytes() + v.tobytes()
            + np.asarray(faces, "<u4").reshape(-1, 3).tobytes())


def decode_legacy(buf: Blob, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(vertices, faces) of a legacy fragment, its counts checked against its length."""
    size = len(buf)
    if size < 4:
        raise CorruptDataError(f"{where}: mesh fragment of {size} bytes has no vertex count")
    n = int(take(buf, "<u4", 1, where=where, what="vertex count")[0])
    rest = size - 4 - 12 * n
    if rest < 0 or rest % 12:
        raise CorruptDataError(f"{where}: mesh fragment claims {n} vertices; its {size} bytes "
                               f"do not hold them and whole triangles")
    vertices = take(buf, "<f4", 3 * n, 4, where=where, what="vertices").reshape(n, 3)
    faces = take(buf, "<u4", rest // 4, 4 + 12 * n, where=where,
                 what="triangles").reshape(-1, 3)
    if len(faces) and int(faces.max()) >= n:
        raise CorruptDataError(f"{where}: mesh fragment has a triangle naming vertex "
                               f"{int(faces.max())} of {n}")
    return vertices, faces
