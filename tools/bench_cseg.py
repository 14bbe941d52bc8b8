"""Benchmark of the compressed_segmentation kernel per core: ngshard's encode and decode beside
the C++ ``compressed-segmentation`` package (``pip install compressed-segmentation``; the tests'
reference), same chunks, one thread, one process.

    python tools/bench_cseg.py [--size 64] [--chunk 64] [--repeat 5]

Chunks of 64^3 (``--chunk``) in 8^3 blocks, uint32 and uint64: labels in slabs of 16 voxels
along x (few labels a block) and random labels from a pool of 300 (many a block: 8-bit and
16-bit indices). Each library encodes and decodes 32 chunks a turn; the libraries take turns
(tools/benchlib.py); ratios are ngshard's time over the package's.
"""

from __future__ import annotations

import compressed_segmentation as reference
import numpy as np
from benchlib import report, summary, take_turns, volume_args

from ngshard.volume.encodings import decode_chunk, encode_chunk

CS, BLOCK, COUNT = "compressed_segmentation", (8, 8, 8), 32


def samples(c: int, dtype: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    top = np.iinfo(dtype).max
    return {
        "slabs": np.asfortranarray(np.repeat(rng.integers(0, top, (c // 16, c, c), dtype),
                                             16, axis=0)),
        "300 labels": np.asfortranarray(rng.integers(0, top, 300, dtype)[
            rng.integers(0, 300, (c, c, c))]),
    }


def main() -> None:
    args = volume_args("bench_cseg", __doc__, size=64)
    c = args.chunk
    rng = np.random.default_rng(0)
    for dtype in ("uint32", "uint64"):
        for name, a in samples(c, dtype, rng).items():
            ours = encode_chunk(a[..., None], CS, block_size=BLOCK)
            theirs = reference.compress(a, block_size=BLOCK, order="F")
            assert len(ours) == len(theirs)
            assert np.array_equal(decode_chunk(theirs, CS, (c, c, c, 1), dtype,
                                               block_size=BLOCK)[..., 0], a)
            report(f"{c}^3 {dtype} {name}: encode x{COUNT}", take_turns({
                "ngshard": lambda a=a: [encode_chunk(a[..., None], CS, block_size=BLOCK)
                                        for _ in range(COUNT)],
                "compressed-segmentation": lambda a=a: [
                    reference.compress(a, block_size=BLOCK, order="F") for _ in range(COUNT)]},
                args.repeat, warmup=True))
            report(f"{c}^3 {dtype} {name}: decode x{COUNT}", take_turns({
                "ngshard": lambda data=ours, dtype=dtype: [
                    decode_chunk(data, CS, (c, c, c, 1), dtype, block_size=BLOCK)
                    for _ in range(COUNT)],
                "compressed-segmentation": lambda data=theirs, dtype=dtype: [
                    reference.decompress(data, (c, c, c), dtype, BLOCK, order="F")
                    for _ in range(COUNT)]}, args.repeat, warmup=True))
    summary("tools/bench_cseg.py")


if __name__ == "__main__":
    main()
