"""precomputed -> zarr: an OME-Zarr 0.5 group of sharded Zarr v3 arrays, one per scale, that
zarr-python reads equal to the precomputed source (axes c?, z, y, x)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import zarr
from convert_helpers import volume_data

import ngshard


@pytest.mark.parametrize("channels, dtype, sharding, encoding", [
    (1, "uint8", "auto", None),
    (2, "uint16", None, "gzip"),
    (1, "uint64", "auto", "raw"),
])
def test_every_scale_reads_back_through_zarr_python(tmp_path, channels, dtype, sharding,
                                                     encoding):
    src = tmp_path / "layer"
    data = volume_data((70, 50, 40, channels), dtype)  # x, y, z, c
    kind = "compressed_segmentation" if dtype == "uint64" else "raw"
    with ngshard.create_volume(src, dtype=dtype, shape=data.shape, chunk_size=(32, 16, 16),
                               sharding=sharding, encoding=kind, resolution=(4, 4, 40),
                               voxel_offset=(3, 0, 5)) as vol:
        vol[...] = data
    vol = ngshard.open_volume(src)
    vol.add_scale((2, 2, 1))
    with ThreadPoolExecutor(2) as pool:
        stats = ngshard.convert(src, tmp_path / "out.zarr", executor=pool, progress=False,
                                encoding=encoding)
    assert stats["run"] == stats["tasks"] >= 2
    group = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")
    ms = group.attrs["ome"]["multiscales"][0]
    assert [a["name"] for a in ms["axes"]] == (["c"] if channels > 1 else []) + ["z", "y", "x"]
    for i, dataset in enumerate(ms["datasets"]):
        arr = group[dataset["path"]]
        assert arr.shards is not None
        expected = ngshard.open_volume(src, i)[...].transpose(3, 2, 1, 0)
        expected = expected if channels > 1 else expected[0]
        np.testing.assert_array_equal(arr[...], expected)
        scale = dataset["coordinateTransformations"][0]["scale"][-3:]
        assert scale == list(map(float, ngshard.open_volume(src, i).resolution[::-1]))
    translation = ms["datasets"][0]["coordinateTransformations"][1]["translation"][-3:]
    assert translation == [200.0, 0.0, 12.0]  # voxel_offset x resolution, z y x


def test_round_trip(tmp_path):
    """precomputed -> zarr -> precomputed keeps the voxels, resolution and offset."""
    src = tmp_path / "layer"
    data = volume_data((40, 30, 20, 1), "uint8", seed=7)
    with ngshard.create_volume(src, dtype="uint8", shape=data.shape, chunk_size=(16, 16, 16),
                               sharding="auto", resolution=(8, 8, 30),
                               voxel_offset=(10, 20, 30)) as vol:
        vol[...] = data
    with ThreadPoolExecutor(2) as pool:
        ngshard.convert(src, tmp_path / "z.zarr", executor=pool, progress=False)
        ngshard.convert(tmp_path / "z.zarr", tmp_path / "back", executor=pool, progress=False)
    back = ngshard.open_volume(tmp_path / "back")
    assert back.resolution == (8, 8, 30) and back.voxel_offset == (10, 20, 30)
    np.testing.assert_array_equal(back[...], data)


def test_precomputed_only_options_are_refused(tmp_path):
    src = tmp_path / "layer"
    ngshard.create_volume(src, dtype="uint8", shape=(8, 8, 8))
    with pytest.raises(ngshard.SpecError, match="axes"):
        ngshard.convert(src, tmp_path / "z.zarr", axes="zyx", progress=False)
