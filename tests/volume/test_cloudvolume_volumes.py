"""Volumes cloud-volume wrote (fixtures/cloudvolume_volumes, made by
tools/make_cloudvolume_volume_fixtures.py): every ``compress=`` twin, compresso, crackle, jxl,
jpeg, png, raw and compressed_segmentation chunks, offsets other than zero, sharded or not.
ngshard reads each value for value as cloud-volume reads it, at the same global coordinates;
tensorstore agrees where it reads the files (plain ones: it reads no twin). The ``ngshard_*``
layers were written by ngshard and read by cloud-volume: ngshard still writes those files."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
from pathlib import Path

import brotli
import numpy as np
import pytest
import zstandard
from peers import PEER_TIMEOUT, run_peer

import ngshard

FIXTURES = Path(__file__).parents[2] / "fixtures" / "cloudvolume_volumes"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
LOSSY_JXL = {"jxl_lossy", "ngshard_jxl"}  # libjxl builds may round a value differently
PLAIN = ["raw_plain", "jpeg_gray", "png_plain", "sharded_raw", "sharded_cseg", "sharded_jpeg"]
DECODE = {".gz": gzip.decompress, ".br": brotli.decompress, ".xz": lzma.decompress,
          ".bz2": bz2.decompress,
          ".zstd": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b)}


def expected(case: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / case / "expected.npz") as npz:
        return dict(npz)


def assert_same(case: str, got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    if case in LOSSY_JXL:
        assert np.abs(got.astype(np.int16) - want).max() <= 1
    else:
        np.testing.assert_array_equal(got, want)


def test_every_kind_is_there():
    """The fixtures hold what the tests below claim to cover."""
    suffixes = {os.path.splitext(n)[1] for case in CASES
                for _, _, names in os.walk(FIXTURES / case) for n in names}
    assert {".gz", ".br", ".zstd", ".xz", ".bz2", ".shard"} <= suffixes
    encodings = {json.loads((FIXTURES / c / "info").read_text())["scales"][0]["encoding"]
                 for c in CASES}
    assert encodings == {"raw", "compressed_segmentation", "compresso", "crackle", "jpeg",
                         "png", "jxl"}


@pytest.mark.parametrize("case", CASES)
def test_ngshard_reads_as_cloudvolume_does(case):
    """Whole volumes and boxes at global coordinates, value for value (brotli, zstd, xz and
    bz2 chunks read as zeros before; compresso read as corrupt, crackle and jxl failed)."""
    want = expected(case)
    vol = ngshard.open_volume(FIXTURES / case)
    assert_same(case, np.asarray(vol), want["whole"])
    for i, (start, stop) in enumerate(want["boxes"].tolist()):
        assert_same(case, vol[tuple(map(slice, start, stop))], want[f"box{i}"])
    assert ngshard.open(FIXTURES / case).info == vol.info


def test_ngshard_reads_them_through_ngshard_serve():
    """Served by ``ngshard serve`` and read back over HTTP, value for value: a twin comes
    with its Content-Encoding (gzip, br, zstd), which the client undoes; an xz or bz2 twin
    comes decoded. (Before, ngshard's own client read the encoded bytes as the chunk.)"""
    with ngshard.serve(FIXTURES) as srv:
        for case in CASES:
            want = expected(case)
            vol = ngshard.open_volume(f"{srv.url}/{case}")
            assert_same(case, np.asarray(vol), want["whole"])


@pytest.mark.parametrize("case", PLAIN)
def test_tensorstore_agrees_at_global_coordinates(case):
    ts = pytest.importorskip("tensorstore")
    want = expected(case)
    store = ts.open({"driver": "neuroglancer_precomputed",
                     "kvstore": f"file://{FIXTURES / case}/"}).result(timeout=PEER_TIMEOUT)
    vol = ngshard.open_volume(FIXTURES / case)
    assert tuple(store.domain.inclusive_min[:3]) == vol.voxel_offset
    np.testing.assert_array_equal(store.read().result(timeout=PEER_TIMEOUT), want["whole"])
    for i, (start, stop) in enumerate(want["boxes"].tolist()):
        box = tuple(slice(a, b) for a, b in zip(start, stop))
        np.testing.assert_array_equal(store[box].read().result(timeout=PEER_TIMEOUT),
                                      want[f"box{i}"])


def _files(root: Path) -> dict[str, bytes]:
    """Chunk file name -> decoded content of a layer's one scale."""
    scale = next(p for p in root.iterdir() if p.is_dir())
    out = {}
    for p in scale.iterdir():
        stem, suffix = os.path.splitext(p.name)
        decode = DECODE.get(suffix)
        out[p.name] = decode(p.read_bytes()) if decode else p.read_bytes()
    return out


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("ngshard_")
                                  and c not in LOSSY_JXL])
def test_ngshard_still_writes_what_cloudvolume_read(tmp_path, case):
    """The committed ngshard_* layers were read by cloud-volume as written (the fixture
    script checks it); ngshard writes the same files today: same names (twin suffixes), same
    decoded bytes."""
    root = FIXTURES / case
    info = json.loads((root / "info").read_text())
    scale = info["scales"][0]
    compress = {".gz": "gzip", ".br": "br", ".zstd": "zstd"}.get(
        os.path.splitext(next(iter(_files(root))))[1])
    out = tmp_path / case
    with ngshard.create_volume(out, dtype=info["data_type"], shape=scale["size"],
                               chunk_size=scale["chunk_sizes"][0], encoding=scale["encoding"],
                               resolution=scale["resolution"],
                               voxel_offset=scale["voxel_offset"], compress=compress) as vol:
        vol[...] = expected(case)["whole"]
    assert _files(out) == _files(root)


_READ = """
import sys
import numpy as np
from cloudvolume import CloudVolume
cv = CloudVolume("file://" + sys.argv[1], fill_missing=False, progress=False)
np.save(sys.argv[2], np.asarray(cv[cv.bounds]))
"""


@pytest.mark.parametrize("compress", ["gzip", "br", "zstd"])
def test_cloudvolume_reads_what_ngshard_writes_now(tmp_path, compress):
    """cloud-volume (the peers' venv, see tests/peers.py) reads what ngshard writes now."""
    data = np.arange(40 * 30 * 20, dtype=np.uint16).reshape(40, 30, 20, 1)
    with ngshard.create_volume(tmp_path / "v", dtype="uint16", shape=(40, 30, 20),
                               chunk_size=(16, 16, 16), voxel_offset=(-5, 7, 1000),
                               compress=compress) as vol:
        vol[...] = data
    run_peer(_READ, tmp_path / "v", tmp_path / "r.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "r.npy"), data)
