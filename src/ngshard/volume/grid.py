"""The chunk grid of one precomputed scale: voxel bounds, unsharded chunk names, Morton chunk IDs
and the box of chunks a shard covers.

Positions are chunk-grid coordinates (x, y, z), 0-based from the volume origin; voxel boxes
here are 0-based too (from voxel_offset) except in chunk names, which the format writes in the
layer's voxel coordinates (``voxel_offset`` added), as ``Volume`` is indexed and
``Volume.chunk_bounds`` gives them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property, reduce
from typing import Any

import numpy as np

from ..errors import SpecError
from ..sharded.spec import ShardingSpec
from .vectors import INT64_MAX, Vec3, vec3, xyz

_NAME = re.compile(r"_".join([r"(-?[0-9]+)-(-?[0-9]+)"] * 3))


def _int_array(values: Any, what: str) -> np.ndarray:
    """An integer array as int64 (floats are refused rather than truncated)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise SpecError(f"{what} must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


@dataclass(frozen=True)
class ChunkGrid:
    """The chunks of a scale: ``size`` voxels cut into ``chunk_size`` blocks, edge ones clipped.

    >>> grid = ChunkGrid((20, 13, 7), (8, 4, 3), voxel_offset=(5, -3, 2))
    >>> grid.shape, grid.bits
    ((3, 4, 3), (2, 2, 2))
    >>> grid.chunk_names([[2, 3, 2]])
    ['21-25_9-10_8-9']
    """

    size: Vec3
    chunk_size: Vec3
    voxel_offset: Vec3 = (0, 0, 0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", vec3(self.size, "size", positive=True))
        object.__setattr__(self, "chunk_size", vec3(self.chunk_size, "chunk_size",
                                                     positive=True))
        object.__setattr__(self, "voxel_offset", vec3(self.voxel_offset, "voxel_offset",
                                                       positive=False))
        # chunk names and positions are computed in int64: every bound must fit
        if any(o + s + c > INT64_MAX or o < -INT64_MAX for o, s, c in
               zip(self.voxel_offset, self.size, self.chunk_size)):
            raise SpecError(f"voxel_offset {self.voxel_offset} + size {self.size} does not "
                            f"fit in a 64-bit signed integer")

    @property
    def shape(self) -> Vec3:
        """Chunks per dimension: ceil(size / chunk_size)."""
        return xyz(-(-s // c) for s, c in zip(self.size, self.chunk_size))

    @property
    def num_chunks(self) -> int:
        x, y, z = self.shape
        return x * y * z

    @property
    def bits(self) -> Vec3:
        """Morton bits per dimension: ceil(log2(shape)), 0 for a dimension of one chunk."""
        return xyz((n - 1).bit_length() for n in self.shape)

    # --- positions and voxels --------------------------------------------------------------

    def _positions(self, positions: Any) -> np.ndarray:
        """Positions as an int64 (..., 3) array, or SpecError for any outside the grid."""
        pos = _int_array(positions, "chunk positions")
        if pos.ndim == 0 or pos.shape[-1] != 3:
            raise SpecError(f"chunk positions must have shape (..., 3), got {pos.shape}")
        bad = ((pos < 0) | (pos >= np.array(self.shape))).any(axis=-1)
        if bad.any():
            first = pos[bad][0].tolist()
            raise SpecError(f"chunk position {tuple(first)} is outside the grid of shape "
                            f"{self.shape}")
        return pos

    def bounds(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """(starts, stops) in voxels from the volume origin (voxel_offset not added), each of
        the positions' shape; stops are clipped to the volume size, as edge chunks are."""
        pos = self._positions(positions)
        starts = pos * np.array(self.chunk_size)
        stops = np.minimum(starts + np.array(self.chunk_size), np.array(self.size))
        return starts, stops

    def positions_in(self, start: Any, stop: Any) -> np.ndarray:
        """The (n, 3) positions of every chunk overlapping the voxel box [start, stop)
        (0-based), in C order over (x, y, z): z varies fastest. Parts of the box outside the
        volume are ignored; an empty box gives no positions."""
        start = np.asarray(vec3(start, "start", positive=False))
        stop = np.asarray(vec3(stop, "stop", positive=False))
        size = np.array(self.size)
        lo, hi = np.clip(start, 0, size), np.clip(stop, 0, size)
        if (hi <= lo).any():
            return np.zeros((0, 3), np.int64)
        chunk = np.array(self.chunk_size)
        ranges = [np.arange(a, b) for a, b in zip(lo // chunk, -(-hi // chunk))]
        return np.stack(np.meshgrid(*ranges, indexing="ij"), axis=-1).reshape(-1, 3)

    # --- unsharded chunk names -------------------------------------------------------------

    def chunk_names(self, positions: Any) -> list[str]:
        """Unsharded chunk file names ``x0-x1_y0-y1_z0-z1``, absolute voxel coordinates (ends
        clipped), one per position of the flattened (n, 3) positions."""
        starts, stops = self.bounds(np.reshape(_int_array(positions, "chunk positions"),
                                               (-1, 3)))
        offset = np.array(self.voxel_offset)
        a, b = (starts + offset).astype(str), (stops + offset).astype(str)
        pieces = [a[:, 0], "-", b[:, 0], "_", a[:, 1], "-", b[:, 1], "_", a[:, 2], "-", b[:, 2]]
        return reduce(np.char.add, pieces).tolist()

    def parse_chunk_name(self, name: str) -> Vec3:
        """The grid position of an unsharded chunk file name (a bare name, not a path);
        SpecError unless it is exactly the name :meth:`chunk_names` gives that chunk."""
        m = _NAME.fullmatch(name) if isinstance(name, str) else None
        if m is None:
            raise SpecError(f"{name!r} is not a chunk name x0-x1_y0-y1_z0-z1")
        rel = np.array([int(g) for g in m.groups()[::2]]) - np.array(self.voxel_offset)
        pos = rel // np.array(self.chunk_size)
        ok = (pos >= 0).all() and (pos < np.array(self.shape)).all()
        if not ok or self.chunk_names(pos)[0] != name:
            raise SpecError(f"chunk name {name!r} is not a chunk of this grid (size "
                            f"{self.size}, chunk_size {self.chunk_size}, voxel_offset "
                            f"{self.voxel_offset})")
        return tuple(pos.tolist())

    # --- Morton codes (sharded chunk IDs) --------------------------------------------------

    def _interleave(self) -> list[tuple[int, int]]:
        """(dimension, source bit) of each Morton output bit, lowest first: bit i of x, y, z
        in turn, a dimension skipped once its bits are used up."""
        bits = self.bits
        return [(d, i) for i in range(max(bits)) for d in range(3) if i < bits[d]]

    def _check_code_bits(self) -> int:
        total = sum(self.bits)
        if total > 64:
            raise SpecError(f"grid shape {self.shape} needs {total} Morton bits: more than the "
                            "64 of a chunk ID")
        return total

    def morton(self, positions: Any) -> np.ndarray:
        """Compressed Morton codes (the sharded chunk IDs) of positions (..., 3), as uint64:
        each byte of each coordinate spread to its code bits by a table lookup."""
        self._check_code_bits()
        pos = self._positions(positions)
        code = np.zeros(pos.shape[:-1], np.uint64)
        for d, tables in enumerate(self._spread_tables):
            for k, table in enumerate(tables):
                code |= table[(pos[..., d] >> (8 * k)) & 255]
        return code

    @cached_property
    def _spread_tables(self) -> list[list[np.ndarray]]:
        """Per dimension and byte of a coordinate: byte value -> its bits at their Morton
        code positions."""
        byte = np.arange(256, dtype=np.uint64)
        tables = [[np.zeros(256, np.uint64) for _ in range(-(-bits // 8))]
                  for bits in self.bits]
        for j, (d, i) in enumerate(self._interleave()):
            k, b = divmod(i, 8)
            tables[d][k] |= ((byte >> np.uint64(b)) & np.uint64(1)) << np.uint64(j)
        return tables

    def unmorton(self, codes: Any) -> np.ndarray:
        """Grid positions (..., 3) of Morton codes; SpecError for a code of no chunk (too many
        bits, or past the grid's end in a dimension whose shape is not a power of 2)."""
        total = self._check_code_bits()
        arr = np.asarray(codes)
        if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
            raise SpecError(f"Morton code {int(arr.min())} is negative")
        if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
            raise SpecError(f"Morton codes must be integers, got dtype {arr.dtype}")
        arr = arr.astype(np.uint64)
        if total < 64 and (arr >> np.uint64(total)).any():
            raise SpecError(f"Morton code {int(arr.max())} has more than the {total} bits of "
                            f"grid shape {self.shape}")
        pos = self._deinterleave(arr)
        bad = (pos >= np.array(self.shape, np.uint64)).any(axis=-1)
        if bad.any():
            raise SpecError(f"Morton code {int(arr[bad][0])} is position "
                            f"{tuple(pos[bad][0].tolist())}, outside grid shape {self.shape}")
        return pos.astype(np.int64)

    def _deinterleave(self, codes: np.ndarray) -> np.ndarray:
        pos = np.zeros((*codes.shape, 3), np.uint64)
        one = np.uint64(1)
        for j, (d, i) in enumerate(self._interleave()):
            pos[..., d] |= ((codes >> np.uint64(j)) & one) << np.uint64(i)
        return pos

    def codes_in_grid(self, codes: np.ndarray) -> np.ndarray:
        """Mask of the uint64 ``codes`` that are Morton codes of chunks of this grid."""
        total = self._check_code_bits()
        codes = np.asarray(codes, np.uint64)
        ok = (codes >> np.uint64(total)) == 0 if total < 64 else np.ones(codes.shape, bool)
        return ok & (self._deinterleave(codes) < np.array(self.shape, np.uint64)).all(axis=-1)

    # --- sharding --------------------------------------------------------------------------

    def shard_shape(self, spec: ShardingSpec) -> Vec3 | None:
        """The box of grid positions each shard covers, or None when shards are not boxes.

        With the identity hash and preshift + minishard + shard bits >= sum(bits), a shard is
        the chunks of equal ``morton >> (preshift_bits + minishard_bits)``: the low P + M
        Morton bits run over a box of 2**(those bits of each dimension) chunks, aligned to
        multiples of it (clipped at the grid's end). Only writes of whole such boxes can skip
        reading the shard. A murmur hash scatters chunks, and too few shard bits wrap distinct
        boxes into one shard: None. One shard (shard_bits 0) is the whole grid.
        """
        if spec.shard_bits == 0:
            return self.shape
        total = sum(self.bits)
        low = spec.preshift_bits + spec.minishard_bits
        if spec.hash != "identity" or low + spec.shard_bits < total:
            return None
        counts = [0, 0, 0]
        for d, _ in self._interleave()[:low]:
            counts[d] += 1
        return xyz(min(1 << c, n) for c, n in zip(counts, self.shape))

    def chunks_per_shard(self, spec: ShardingSpec, codes: np.ndarray) -> np.ndarray | None:
        """How many chunks of the grid the shard of each chunk (uint64 Morton ``codes``)
        holds: its box (:meth:`shard_shape`) clipped at the grid's end; None where shards
        are not boxes."""
        shape = self.shard_shape(spec)
        if shape is None:
            return None
        box = np.array(shape, np.int64)
        origin = self._deinterleave(np.asarray(codes, np.uint64)).astype(np.int64) // box * box
        return np.prod(np.clip(np.array(self.shape) - origin, 0, box), axis=-1)

    def shard_of(self, positions: Any, spec: ShardingSpec) -> tuple[np.ndarray, np.ndarray]:
        """(shard, minishard) numbers, uint64, of the chunks at positions (..., 3)."""
        return spec.locate(self.morton(positions))
