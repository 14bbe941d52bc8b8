"""Choosing the sharding of a volume scale: identity-hash box shards over Morton codes."""

from __future__ import annotations

from collections.abc import Sequence

from ..limits import DEFAULT_VOLUME_SHARD_BYTES, MAX_MINISHARD_BITS
from ..sharded.spec import ShardingSpec
from .grid import ChunkGrid
from .vectors import xyz

#: Chunk encodings already entropy-coded: a gzip data encoding would only add its frame.
#: Every other (raw, compressed_segmentation, compresso, crackle) is gzipped in shards, as
#: igneous shards them (cloud-volume's ``create_sharded_image_info``): compressed_segmentation
#: of label fields shrinks several times more.
ENTROPY_CODED = frozenset({"jpeg", "png", "jxl"})


def auto_sharding(size: Sequence[int], chunk_size: Sequence[int], chunk_bytes: int,
                  shard_bytes: int = DEFAULT_VOLUME_SHARD_BYTES, encoding: str = "raw"
                  ) -> ShardingSpec:
    """Sharding for a scale: identity hash over compressed Morton codes, so every shard is a
    box of chunks holding at most ``shard_bytes`` uncompressed (the largest power of two of
    chunks that fits); minishards of 8 consecutive codes (a 2x2x2 block where the grid has
    bits in every axis), so a minishard index is 192 bytes and one index read covers a
    compact group; but at most 2**11 minishards per shard, so the shard index, which readers
    fetch whole, stays at most 32 KiB: past that, minishards grow instead.

    igneous (cloud-volume's rule) picks the same shards for power-of-two chunk sizes (it
    targets 3.5e9 bytes) but puts every chunk of a shard in one minishard up to 4000 chunks,
    so each chunk read fetches a 12-50 KB minishard index (``tools/compare_auto_sharding.py``).
    The data encoding is gzip unless the chunk ``encoding`` is an image codec
    (:data:`ENTROPY_CODED`), as igneous chooses it.
    """
    grid = ChunkGrid(xyz(size), xyz(chunk_size))
    chunks_per_shard = max(1, shard_bytes // max(1, chunk_bytes))
    return _box_spec(grid, min(sum(grid.bits), chunks_per_shard.bit_length() - 1), encoding)


def fitting_sharding(size: Sequence[int], chunk_size: Sequence[int], most: Sequence[int],
                     encoding: str = "raw") -> ShardingSpec:
    """Box sharding as :func:`auto_sharding` lays it out, with the largest shards whose box
    of chunks is at most ``most`` chunks along each axis (a pyramid's task writes whole
    shards of every level it makes: each level's shard must fit in the task's box)."""
    grid = ChunkGrid(xyz(size), xyz(chunk_size))
    for bits in range(sum(grid.bits), -1, -1):
        spec = _box_spec(grid, bits, encoding)
        shape = grid.shard_shape(spec)
        if shape is not None and all(s <= m for s, m in zip(shape, most)):
            return spec
    return _box_spec(grid, 0, encoding)


def _box_spec(grid: ChunkGrid, per_shard: int, encoding: str) -> ShardingSpec:
    """Identity-hash shards of ``2**per_shard`` consecutive Morton codes."""
    total_bits = sum(grid.bits)
    preshift = max(min(3, per_shard), per_shard - MAX_MINISHARD_BITS)
    return ShardingSpec(hash="identity", preshift_bits=preshift,
                        minishard_bits=per_shard - preshift, shard_bits=total_bits - per_shard,
                        minishard_index_encoding="gzip",
                        data_encoding="raw" if encoding in ENTROPY_CODED else "gzip")
