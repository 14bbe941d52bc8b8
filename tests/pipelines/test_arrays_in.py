"""``ngshard convert`` of HDF5 datasets (files written by h5py) and N5 datasets (written by
tensorstore's ``n5`` driver, every compression it writes): the precomputed layer holds the
source's values, value for value, in tasks that each read their box; damaged N5 blocks are
CorruptDataErrors naming the block."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard

h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(2) as pool:
        yield pool


def test_hdf5_dataset_zyx_with_resolution(tmp_path, pool):
    data = np.random.default_rng(0).integers(0, 2**16, (20, 50, 70), np.uint16)  # z, y, x
    with h5py.File(tmp_path / "cremi.h5", "w") as f:
        d = f.create_dataset("volumes/raw", data=data, chunks=(4, 16, 16),
                             compression="gzip")
        d.attrs["resolution"] = [40.0, 4.0, 4.0]  # z, y, x as CREMI stores it
        f.create_dataset("volumes/other", data=np.zeros((2, 2, 2)))
    stats = ngshard.convert(tmp_path / "cremi.h5" / "volumes" / "raw", tmp_path / "out",
                            chunk_size=(16, 16, 8), executor=pool, progress=False,
                            task_bytes=32 * 32 * 8 * 2, downsample=1)
    assert stats["tasks"] > 4
    out = ngshard.open_volume(tmp_path / "out")
    assert out.scale.sharding is not None and out.scale.resolution == (4, 4, 40)
    np.testing.assert_array_equal(out[..., 0], data.T)
    with pytest.raises(ngshard.SpecError, match="2 datasets"):
        ngshard.convert(tmp_path / "cremi.h5", tmp_path / "x", progress=False)


def test_hdf5_channels_and_axes(tmp_path, pool):
    data = np.random.default_rng(1).integers(0, 256, (30, 20, 10, 3), np.uint8)  # x, y, z, c
    with h5py.File(tmp_path / "one.hdf5", "w") as f:
        f.create_dataset("img", data=data, chunks=(8, 8, 8, 3))
    ngshard.convert(tmp_path / "one.hdf5", tmp_path / "out", axes="xyzc",
                    chunk_size=(8, 8, 8), executor=pool, progress=False)
    np.testing.assert_array_equal(ngshard.open_volume(tmp_path / "out")[...], data)
    with pytest.raises(ngshard.SpecError, match="axes"):
        ngshard.convert(tmp_path / "one.hdf5", tmp_path / "y", axes="zyx", progress=False)


def _n5(path, data, compression):
    spec = {"driver": "n5", "kvstore": f"file://{path}/",
            "metadata": {"dimensions": list(data.shape), "blockSize": [16, 16, 8],
                         "dataType": str(data.dtype), "compression": compression},
            "create": True, "delete_existing": True}
    arr = ts.open(spec).result(timeout=PEER_TIMEOUT)
    arr[...].write(data).result(timeout=PEER_TIMEOUT)


@pytest.mark.parametrize("compression", [
    {"type": "raw"}, {"type": "gzip"}, {"type": "bzip2"}, {"type": "xz"},
    {"type": "zstd"}, {"type": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1}])
def test_n5_written_by_tensorstore(tmp_path, pool, compression):
    data = np.random.default_rng(2).integers(0, 2**40, (45, 37, 19), np.uint64)  # x, y, z
    data[:16, :16, :8] = 0  # a block of fill value: tensorstore leaves it out
    _n5(tmp_path / "n5", data, compression)
    ngshard.convert(tmp_path / "n5", tmp_path / "out", chunk_size=(16, 16, 8),
                    executor=pool, progress=False, task_bytes=32 * 32 * 16 * 8)
    out = ngshard.open_volume(tmp_path / "out")
    assert out.info.type == "segmentation"  # uint64 labels: compressed_segmentation
    np.testing.assert_array_equal(out[..., 0], data)


def test_damaged_n5_blocks(tmp_path):
    data = np.arange(32 * 32 * 8, dtype=np.uint16).reshape(32, 32, 8)
    _n5(tmp_path / "n5", data, {"type": "gzip"})
    block = tmp_path / "n5" / "1" / "0" / "0"
    whole = block.read_bytes()
    for damaged, match in ((whole[:3], "no header"), (whole[:-9], "truncated"),
                           (b"\x00\x02" + whole[2:], "mode 2"),
                           (whole[:4] + b"\x00\x00\x01\x00" + whole[8:], "beyond")):
        block.write_bytes(damaged)
        with pytest.raises(ngshard.CorruptDataError, match=match) as e:
            ngshard.convert(tmp_path / "n5", tmp_path / "out", progress=False, workers=1,
                            executor=ThreadPoolExecutor(1), overwrite=True)
        assert "1/0/0" in str(e.value)


def test_command_line(tmp_path):
    from ngshard.cli import main

    data = np.arange(24 * 20 * 10, dtype=np.uint8).reshape(10, 20, 24)  # z, y, x
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("em", data=data)
    assert main(["convert", str(tmp_path / "a.h5"), str(tmp_path / "out"), "--resolution",
                 "4,4,40", "--workers", "1", "-q"]) == 0
    out = ngshard.open_volume(tmp_path / "out")
    assert out.scale.resolution == (4, 4, 40)
    np.testing.assert_array_equal(out[..., 0], data.T)


def test_bad_metadata_names_the_file(tmp_path):
    import json

    _n5(tmp_path / "n5", np.zeros((8, 8, 8), np.uint8), {"type": "raw"})
    attributes = tmp_path / "n5" / "attributes.json"
    good = json.loads(attributes.read_text())
    for change, match in (({"dataType": "complex64"}, "dataType"),
                          ({"compression": {"type": "lz4"}}, "compression"),
                          ({"blockSize": [8, 8]}, "blockSize"),
                          ({"dimensions": [8, -1, 8]}, "dimensions")):
        attributes.write_text(json.dumps({**good, **change}))
        with pytest.raises(ngshard.SpecError, match=match) as e:
            ngshard.convert(tmp_path / "n5", tmp_path / "out", progress=False)
        assert "attributes.json" in str(e.value)
    with h5py.File(tmp_path / "a.h5", "w") as f:
        f.create_dataset("em", data=np.zeros((2, 2, 2)))
    with pytest.raises(ngshard.NotFoundError, match="nope"):
        ngshard.convert(tmp_path / "a.h5" / "nope", tmp_path / "out", progress=False)
