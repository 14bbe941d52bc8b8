"""``ngshard convert`` of TIFF stacks: a folder or glob of 2-D sections (natural order of
their names), a multi-page OME-TIFF (its voxel size), samples as channels, with the pyramid;
read back by tensorstore; a damaged section is a SpecError naming it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard

tifffile = pytest.importorskip("tifffile")


def _ts(path, i=0):
    return ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                    "scale_index": i}).result(timeout=PEER_TIMEOUT)


@pytest.fixture()
def sections(tmp_path):
    """12 sections of 70 x 50 (x, y), files z0.tif .. z11.tif (z10 after z9)."""
    data = np.random.default_rng(0).integers(0, 256, (12, 50, 70), np.uint8)  # z, y, x
    folder = tmp_path / "stack"
    folder.mkdir()
    for z, image in enumerate(data):
        tifffile.imwrite(folder / f"z{z}.tif", image)
    return folder, data


def test_folder_of_sections_with_pyramid(tmp_path, sections):
    folder, data = sections
    with ThreadPoolExecutor(2) as pool:
        stats = ngshard.convert(folder, tmp_path / "out", chunk_size=(16, 16, 4),
                                resolution=(4, 4, 40), downsample=2, executor=pool,
                                progress=False, task_bytes=32 * 32 * 8)
    assert stats["tasks"] > 2
    vol = ngshard.open_volume(tmp_path / "out")
    assert vol.scale.key == "4_4_40" and vol.scale.sharding is not None
    want = data.transpose(2, 1, 0)[..., None]
    np.testing.assert_array_equal(_ts(tmp_path / "out").read().result(timeout=PEER_TIMEOUT), want)
    assert [s.key for s in vol.info.scales] == ["4_4_40", "8_8_40", "16_16_40"]
    down = ts.downsample(_ts(tmp_path / "out"), [2, 2, 1, 1], "mean")
    np.testing.assert_array_equal(_ts(tmp_path / "out", 1).read().result(timeout=PEER_TIMEOUT),
                                  down.read().result(timeout=PEER_TIMEOUT))


def test_glob_and_command_line(tmp_path, sections):
    from ngshard.cli import main

    folder, data = sections
    assert main(["convert", str(folder / "z*.tif"), str(tmp_path / "out"), "--workers", "1",
                 "--chunk-size", "32,32,8", "--sharding", "none", "-q"]) == 0
    np.testing.assert_array_equal(ngshard.open_volume(tmp_path / "out")[..., 0],
                                  data.transpose(2, 1, 0))


def test_multipage_ome_tiff_with_samples(tmp_path):
    data = np.random.default_rng(1).integers(0, 4000, (9, 30, 20, 3), np.uint16)  # z y x s
    path = tmp_path / "stack.ome.tif"
    tifffile.imwrite(path, data, photometric="rgb", metadata={
        "axes": "ZYXS", "PhysicalSizeX": 0.25, "PhysicalSizeY": 0.25, "PhysicalSizeZ": 1.0})
    ngshard.convert(path, tmp_path / "out", executor=ThreadPoolExecutor(2), progress=False)
    vol = ngshard.open_volume(tmp_path / "out")
    assert vol.scale.resolution == (250, 250, 1000) and vol.info.num_channels == 3
    np.testing.assert_array_equal(vol[...], data.transpose(2, 1, 0, 3))


def test_damaged_section_and_bad_options(tmp_path, sections):
    folder, _ = sections
    (folder / "z5.tif").write_bytes(b"II*\x00 not a tiff")
    with pytest.raises(ngshard.SpecError, match="z5.tif"):
        ngshard.convert(folder, tmp_path / "out", executor=ThreadPoolExecutor(1),
                        progress=False)
    with pytest.raises(ngshard.SpecError, match="axes"):
        ngshard.convert(folder, tmp_path / "out2", axes="zyx")
    with pytest.raises(ngshard.NotFoundError):
        ngshard.convert(tmp_path / "none*.tif", tmp_path / "out3")
