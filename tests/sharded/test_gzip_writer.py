"""Who writes ngshard's gzip: ISA-L where the ``isal`` package is installed (the fastgzip
extra, in the test extra), libdeflate where it is not. Both write streams every reader
decodes to the same bytes: checked on bench-like image chunks, in shards read by tensorstore
and in ``.gz`` files read by Python's gzip."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import tensorstore as ts
from isal import isal_zlib
from peers import PEER_TIMEOUT

import ngshard
from ngshard import compression

#: One 64^3 uint8 image chunk as tools/bench_pyramid.py makes them: a smooth field and noise
_x, _y, _z = np.mgrid[0:64, 0:64, 0:64]
_rng = np.random.default_rng(0)
CHUNK = (96 + 60 * np.sin(_x / 37.0 + _z / 50.0) * np.cos(_y / 23.0)
         + _rng.integers(-8, 8, (64, 64, 64))).clip(0, 255).astype(np.uint8)

#: Writes a sharded gzip layer and an unsharded one of .gz chunk files with ngshard imported
#: as without the isal package (the import of isal fails), and says who wrote the gzip
WITHOUT_ISAL = """
import sys
sys.modules["isal"] = None  # as if not installed: `from isal import ...` raises ImportError
import numpy as np, ngshard
from ngshard import compression
path, data = sys.argv[1], np.load(sys.argv[2])
for name, sharding, compress in (("sharded", "auto", None), ("files", None, "gzip")):
    vol = ngshard.create_volume(f"{path}/{name}", shape=data.shape, dtype="uint8",
                                chunk_size=(64, 64, 64), sharding=sharding, compress=compress)
    vol[:] = data
    vol.commit()
print(compression.GZIP_WRITER)
"""


def _write(path: str, data: np.ndarray) -> None:
    for name, sharding, compress in (("sharded", "auto", None), ("files", None, "gzip")):
        vol = ngshard.create_volume(f"{path}/{name}", shape=data.shape, dtype="uint8",
                                    chunk_size=(64, 64, 64), sharding=sharding,
                                    compress=compress)
        vol[:] = data
        vol.commit()


def _shard_bytes(path: str) -> bytes:
    scale = ngshard.open_volume(path).scale.key
    names = sorted(n for n in os.listdir(os.path.join(path, scale)) if n.endswith(".shard"))
    return b"".join(Path(path, scale, n).read_bytes() for n in names)


def test_the_default_gzip_is_isal_level_2_and_decodes_as_libdeflates():
    data = CHUNK.tobytes()
    fast = compression.gzip_compress(data)
    assert compression.GZIP_WRITER == "isal"
    assert bytes(fast) == isal_zlib.compress(data, 2, wbits=31)
    slow = compression.gzip_compress(data, 6)  # a zlib level: libdeflate writes it
    assert bytes(slow) != bytes(fast)
    for stream in (fast, slow):
        assert zlib.decompress(stream, 31) == data == bytes(compression.gzip_decompress(stream))
        assert compression.decode(stream, "gzip") == data


def test_with_and_without_isal_every_reader_decodes_the_same_bytes(tmp_path):
    data = np.concatenate([CHUNK, CHUNK[::-1], CHUNK.T], axis=0)  # three chunks along x
    np.save(tmp_path / "data.npy", data)
    done = subprocess.run([sys.executable, "-c", WITHOUT_ISAL, str(tmp_path / "without"),
                           str(tmp_path / "data.npy")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "libdeflate"
    _write(str(tmp_path / "with"), data)
    with_, without = (str(tmp_path / side / "sharded") for side in ("with", "without"))
    assert _shard_bytes(with_) != _shard_bytes(without)  # two writers, two streams
    for path in (with_, without):
        spec = ngshard.open_volume(path).scale.sharding
        assert spec.data_encoding == "gzip"
        store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/"}
                        ).result(timeout=PEER_TIMEOUT)
        assert np.array_equal(store.read().result(timeout=PEER_TIMEOUT)[..., 0], data)
        assert np.array_equal(ngshard.open_volume(path)[:][..., 0], data)
    for side in ("with", "without"):
        path = str(tmp_path / side / "files")
        scale = ngshard.open_volume(path).scale.key
        name = os.path.join(path, scale, "0-64_0-64_0-64.gz")
        with gzip.open(name) as f:  # Python's own gzip reads the .gz file
            assert np.array_equal(np.frombuffer(f.read(), np.uint8).reshape(64, 64, 64).T,
                                  data[:64])
        assert np.array_equal(ngshard.open_volume(path)[:][..., 0], data)
