"""gzip libraries on the chunks of ``tools/bench_pyramid.py``'s image pyramid: zlib, zlib-ng,
ISA-L (``isal``) and libdeflate (``deflate``), compression at several levels and
decompression, each as CPU seconds of this thread (the machine is shared: wall times at load
say little) and bytes written, on the source's 64^3 uint8 chunks and on those of its four
coarser levels (2 x 2 x 1 means, as the pyramid makes them: smoother, so more compressible).

    python tools/bench_gzip.py [--scale 0.5]

A library that is not installed is left out (zlib-ng is in no extra: ``pip install zlib-ng``).
ngshard writes libdeflate at ``ngshard.compression.GZIP_LEVEL``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_pyramid import CHUNK, make_source  # noqa: E402


def codecs() -> dict:
    """name -> (compress, decompress) of each library and level present."""
    import deflate

    def zlib_like(module, level):
        return lambda d: module.compress(d, level, wbits=31), \
            lambda d: module.decompress(d, wbits=31)

    out = {f"zlib {lv}": zlib_like(zlib, lv) for lv in (1, 6, 9)}
    try:
        from zlib_ng import zlib_ng
        out.update({f"zlib-ng {lv}": zlib_like(zlib_ng, lv) for lv in (1, 6)})
    except ImportError:
        print("zlib-ng: not installed, left out")
    try:
        from isal import isal_zlib
        out.update({f"isal {lv}": zlib_like(isal_zlib, lv) for lv in (0, 1, 2, 3)})
    except ImportError:
        print("isal: not installed, left out")
    out.update({f"libdeflate {lv}": ((lambda d, lv=lv: deflate.gzip_compress(d, lv)),
                                     deflate.gzip_decompress) for lv in (1, 6, 9)})
    return out


def chunks(data: np.ndarray) -> list[bytes]:
    return [np.asfortranarray(data[x:x + CHUNK, y:y + CHUNK, z:z + CHUNK]).tobytes("F")
            for x in range(0, data.shape[0], CHUNK) for y in range(0, data.shape[1], CHUNK)
            for z in range(0, data.shape[2], CHUNK)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.5, help="scale the source's x, y")
    args = parser.parse_args()
    import ngshard

    print(f"load average before: {os.getloadavg()}")
    shape = (int(1024 * args.scale), int(1024 * args.scale), 256)
    with tempfile.TemporaryDirectory(prefix="bench-gzip-") as scratch:
        make_source(os.path.join(scratch, "src"), shape, "uint8")
        data = np.asarray(ngshard.open_volume(os.path.join(scratch, "src")))[..., 0]
    source, levels = chunks(data), []
    for _ in range(4):
        wide = data[:data.shape[0] // 2 * 2, :data.shape[1] // 2 * 2].astype(np.uint16)
        data = ((wide[0::2, 0::2] + wide[1::2, 0::2] + wide[0::2, 1::2] + wide[1::2, 1::2]
                 + 2) // 4).astype(np.uint8)
        levels += chunks(data)
    for label, items in (("source", source), ("levels 1-4", levels)):
        raw = sum(map(len, items))
        print(f"{label}: {len(items)} chunks, {raw / 2**20:.1f} MiB")
        for name, (pack, unpack) in codecs().items():
            t = time.thread_time()
            packed = [pack(c) for c in items]
            packing = time.thread_time() - t
            t = time.thread_time()
            back = [unpack(p) for p in packed]
            unpacking = time.thread_time() - t
            assert all(bytes(b) == c for b, c in zip(back, items))
            size = sum(map(len, packed))
            print(f"  {name:13s} compress {packing:6.2f} s cpu  decompress {unpacking:6.2f} s "
                  f"cpu  wrote {size / 2**20:7.2f} MiB ({size / raw:.1%})")
    print(f"ngshard writes with: libdeflate {ngshard.compression.GZIP_LEVEL}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
