"""ngshard's gzip: libdeflate at ``GZIP_LEVEL``, the same bytes for the same values in every
process (reruns and the executors' runs are byte-identical), decoded to those values by every
reader: checked on bench-like image chunks, in shards read by tensorstore and in ``.gz`` files
read by Python's gzip."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import zlib
from pathlib import Path

import deflate
import numpy as np
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard
from ngshard import compression

#: One 64^3 uint8 image chunk as tools/bench_pyramid.py makes them: a smooth field and noise
_x, _y, _z = np.mgrid[0:64, 0:64, 0:64]
_rng = np.random.default_rng(0)
CHUNK = (96 + 60 * np.sin(_x / 37.0 + _z / 50.0) * np.cos(_y / 23.0)
         + _rng.integers(-8, 8, (64, 64, 64))).clip(0, 255).astype(np.uint8)

#: Writes the layers of ``_write`` in a fresh process
IN_A_FRESH_PROCESS = """
import sys
import numpy as np
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/.."]  # this module, and the tests' peers
from test_gzip_writer import _write
_write(sys.argv[1], np.load(sys.argv[2]))
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


def test_the_default_gzip_is_libdeflate_at_its_level_and_decodes_everywhere():
    data = CHUNK.tobytes()
    own = compression.gzip_compress(data)
    assert bytes(own) == bytes(deflate.gzip_compress(data, compression.GZIP_LEVEL))
    named = compression.gzip_compress(data, 6)  # a zlib level, as zarr's gzip codec names one
    assert bytes(named) == bytes(deflate.gzip_compress(data, 6)) != bytes(own)
    for stream in (own, named):
        assert zlib.decompress(stream, 31) == data == bytes(compression.gzip_decompress(stream))
        assert compression.decode(stream, "gzip") == data


def test_two_processes_write_the_same_bytes_and_every_reader_decodes_them(tmp_path):
    data = np.concatenate([CHUNK, CHUNK[::-1], CHUNK.T], axis=0)  # three chunks along x
    np.save(tmp_path / "data.npy", data)
    done = subprocess.run([sys.executable, "-c", IN_A_FRESH_PROCESS, str(tmp_path / "there"),
                           str(tmp_path / "data.npy"), os.path.dirname(__file__)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    _write(str(tmp_path / "here"), data)
    here, there = (str(tmp_path / side / "sharded") for side in ("here", "there"))
    assert _shard_bytes(here) == _shard_bytes(there)
    spec = ngshard.open_volume(here).scale.sharding
    assert spec.data_encoding == "gzip"
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{here}/"}
                    ).result(timeout=PEER_TIMEOUT)
    assert np.array_equal(store.read().result(timeout=PEER_TIMEOUT)[..., 0], data)
    assert np.array_equal(ngshard.open_volume(here)[:][..., 0], data)
    files = [str(tmp_path / side / "files") for side in ("here", "there")]
    scale = ngshard.open_volume(files[0]).scale.key
    names = [os.path.join(path, scale, "0-64_0-64_0-64.gz") for path in files]
    assert Path(names[0]).read_bytes() == Path(names[1]).read_bytes()
    with gzip.open(names[0]) as f:  # Python's own gzip reads the .gz file
        assert np.array_equal(np.frombuffer(f.read(), np.uint8).reshape(64, 64, 64).T,
                              data[:64])
    assert np.array_equal(ngshard.open_volume(files[0])[:][..., 0], data)
