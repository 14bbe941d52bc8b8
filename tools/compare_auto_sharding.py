"""Compare ngshard's ``auto_sharding`` with igneous' sharding choice for image scales.

Run from the repo root, with a venv holding cloud-volume and ngshard (``pip install -e .``):

    /path/to/venv-with-cloud-volume/bin/python tools/compare_auto_sharding.py

igneous' rule is ``igneous.task_creation.image.create_sharded_image_info`` with
``uncompressed_shard_bytesize=MEMORY_TARGET`` (3.5e9), the value every igneous image-shard task
creator passes. igneous imports many optional packages (zmesh, ...), so when it does not import,
the identical rule in cloud-volume (``compute_shard_params_for_image``) is called with 3.5e9.

Every number is measured, not predicted: all chunk keys of the grid (compressed Morton codes)
are mapped to (shard, minishard) as Neuroglancer does, so spare or missing bits show up.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ngshard.volume import auto_sharding
from ngshard.volume.grid import ChunkGrid

IGNEOUS_MEMORY_TARGET = int(3.5e9)

Vec3 = tuple[int, int, int]


@dataclass(frozen=True)
class Case:
    """One image scale: voxel size, chunk size, dtype and encoding."""

    name: str
    size: Vec3
    chunk: Vec3
    dtype: str
    encoding: str = "raw"

    @property
    def chunk_bytes(self) -> int:
        """Uncompressed bytes of one full chunk (one channel)."""
        return math.prod(self.chunk) * np.dtype(self.dtype).itemsize


CASES = [
    Case("512^3 u8, 64^3", (512, 512, 512), (64, 64, 64), "uint8"),
    Case("2048^3 u8, 128^3", (2048, 2048, 2048), (128, 128, 128), "uint8"),
    Case("EM 40k x 40k x 7k u8, 128x128x64", (40000, 40000, 7000), (128, 128, 64), "uint8"),
    Case("seg 10k^3 u64 cseg, 64^3", (10000, 10000, 10000), (64, 64, 64), "uint64",
         "compressed_segmentation"),
    Case("small 100^3 u8, 64^3", (100, 100, 100), (64, 64, 64), "uint8"),
    Case("flat 100k x 100k x 50 u8, 64^3", (100000, 100000, 50), (64, 64, 64), "uint8"),
    Case("flat 100k x 100k x 50 u8, 128x128x50", (100000, 100000, 50), (128, 128, 50),
         "uint8"),
    Case("4096^3 u8, 32^3 (small chunks)", (4096, 4096, 4096), (32, 32, 32), "uint8"),
]


def igneous_rule() -> tuple[str, Callable[[Case], dict]]:
    """(label, function of a case giving igneous' spec as a dict)."""
    try:
        from igneous.task_creation.image import MEMORY_TARGET, create_sharded_image_info

        def rule(c: Case) -> dict:
            return create_sharded_image_info(c.size, c.chunk, c.encoding, c.dtype,
                                             uncompressed_shard_bytesize=MEMORY_TARGET)
        return "igneous", rule  # pragma: no cover - needs igneous' optional deps
    except ImportError:
        from cloudvolume.datasource.precomputed.sharding import compute_shard_params_for_image

        def rule(c: Case) -> dict:
            return compute_shard_params_for_image(
                c.size, c.chunk, c.encoding, c.dtype,
                uncompressed_shard_bytesize=IGNEOUS_MEMORY_TARGET).to_dict()
        return "cloudvol", rule


def morton_codes(shape: Vec3) -> np.ndarray:
    """Compressed Morton code of every chunk position of a grid of ``shape`` (any order):
    bit i of x, y, z interleaved in that order, a dimension dropping out once its
    ceil(log2(n)) bits are used up."""
    bits = [(n - 1).bit_length() for n in shape]
    spread = [np.zeros(n, np.uint64) for n in shape]
    out = 0
    for i in range(max(bits, default=0)):
        for d in range(3):
            if i < bits[d]:
                values = np.arange(shape[d], dtype=np.uint64)
                spread[d] |= ((values >> np.uint64(i)) & np.uint64(1)) << np.uint64(out)
                out += 1
    x, y, z = spread
    return (x[:, None, None] | y[None, :, None] | z[None, None, :]).ravel()


def measure(codes: np.ndarray, pre: int, mini: int, shard: int) -> tuple[int, int, int]:
    """(non-empty shards, max chunks in a shard, max chunks in a minishard) for an identity
    hash, with Neuroglancer's masking of the hashed key."""
    def field(shift: int, nbits: int) -> np.ndarray:
        if shift >= 64 or nbits == 0:
            return np.zeros(len(codes), np.uint64)
        mask = np.uint64((1 << min(nbits, 64)) - 1)
        return (codes >> np.uint64(shift)) & mask
    _, per_shard = np.unique(field(pre + mini, shard), return_counts=True)
    _, per_mini = np.unique(field(pre, mini + shard), return_counts=True)
    return len(per_shard), int(per_shard.max()), int(per_mini.max())


def row(case: Case, who: str, codes: np.ndarray, spec: dict, total_bits: int) -> str:
    """One table line for a spec given as {"preshift_bits", "minishard_bits", "shard_bits"}."""
    pre, mini, shard = (int(spec[k]) for k in ("preshift_bits", "minishard_bits", "shard_bits"))
    used, per_shard, per_mini = measure(codes, pre, mini, shard)
    notes = []
    if pre + mini + shard > 64 or min(pre, mini, shard) < 0:
        notes.append("INVALID")
    if pre + mini + shard < total_bits:
        notes.append(f"aliased ({pre + mini + shard}<{total_bits} bits)")
    if pre + mini + shard > total_bits:
        notes.append(f"spare bits ({pre + mini + shard}>{total_bits})")
    return (f"{case.name:<38} {who:<8} {pre:>3} {mini:>4} {shard:>5} {used:>6}/{2**shard:<6}"
            f" {per_shard:>7} {per_shard * case.chunk_bytes / 2**20:>9.0f} {per_mini:>6}"
            f" {16 * 2**mini:>9} {24 * per_mini:>8}  {' '.join(notes)}")


def main() -> None:
    """Print ngshard's and igneous' specs side by side for every case."""
    who, rule = igneous_rule()
    print(f"'{who}' rows: igneous' image sharding rule, {IGNEOUS_MEMORY_TARGET:.2g} B target"
          " per uncompressed shard; ngshard rows: auto_sharding defaults (2 GiB)")
    check = ChunkGrid((300, 200, 100), (8, 8, 8))  # own Morton code == ngshard's
    assert sorted(morton_codes(check.shape).tolist()) == sorted(
        check.morton(np.argwhere(np.ones(check.shape, bool))).tolist())
    print(f"{'case':<38} {'by':<8} {'pre':>3} {'mini':>4} {'shard':>5} {'shards/files':>13}"
          f" {'ch/shd':>7} {'MiB/shd':>9} {'ch/min':>6} {'shdidx B':>9} {'minidx B':>8}  notes")
    for case in CASES:
        grid = ChunkGrid(case.size, case.chunk)
        codes = morton_codes(grid.shape)
        total = sum(grid.bits)
        print(f"-- grid {grid.shape}, {grid.num_chunks} chunks, {total} Morton bits, "
              f"{case.chunk_bytes / 2**10:g} KiB/chunk uncompressed")
        spec = auto_sharding(case.size, case.chunk, case.chunk_bytes, encoding=case.encoding)
        print(row(case, "ngshard", codes, spec.to_json(), total))
        try:
            print(row(case, who, codes, rule(case), total))
        except ValueError as e:
            print(f"{case.name:<38} {who:<8} raised ValueError: {e}")


if __name__ == "__main__":
    main()
