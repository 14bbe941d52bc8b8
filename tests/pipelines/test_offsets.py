"""Offsets cross a conversion both ways: a precomputed voxel_offset becomes the OME-Zarr
translation (voxel_offset x resolution), and a translation of whole voxels becomes the
voxel_offset; the peers (tensorstore on precomputed, zarr-python on zarr) read the same value
at the same global voxel, and so does ngshard's volume, indexed in those coordinates."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tensorstore as ts
import zarr
from convert_helpers import ome_group, volume_data
from peers import PEER_TIMEOUT

import ngshard

POINTS = [(0, 0, 0), (5, 9, 3), (39, 29, 19), (17, 2, 11)]  # 0-based in the finest level


def precomputed(path, scale=0):
    return ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                    "scale_index": scale}).result(timeout=PEER_TIMEOUT)


def test_ome_translation_becomes_the_voxel_offset(tmp_path):
    fine = volume_data((20, 30, 40), "uint16", seed=4)  # z, y, x
    coarse = np.ascontiguousarray(fine[::2, ::2, ::2])
    origins = [(1000, 2000, 30), (500, 1000, 15)]  # x, y, z in voxels of each level
    scales = [[40.0, 8.0, 8.0], [80.0, 16.0, 16.0]]  # z, y, x in nm
    ome_group(tmp_path / "src.zarr", [fine, coarse], axes="zyx", units="nanometer",
              chunks=(8, 16, 16), scales=scales,
              translations=[[o[2] * s[0], o[1] * s[1], o[0] * s[2]]
                            for o, s in zip(origins, scales)])
    with ThreadPoolExecutor(2) as pool:
        ngshard.convert(tmp_path / "src.zarr", tmp_path / "out", executor=pool,
                        progress=False)
    group = zarr.open_group(str(tmp_path / "src.zarr"), mode="r")
    for i, origin in enumerate(origins):
        vol = ngshard.open_volume(tmp_path / "out", i)
        theirs = precomputed(tmp_path / "out", i)
        assert vol.voxel_offset == origin == tuple(theirs.domain.inclusive_min[:3])
        level = group[str(i)]
        for x, y, z in POINTS:
            x, y, z = x >> i, y >> i, z >> i
            at = (origin[0] + x, origin[1] + y, origin[2] + z, 0)
            assert level[z, y, x] == theirs[at].read().result(timeout=PEER_TIMEOUT) == vol[at]


def test_voxel_offset_becomes_the_ome_translation(tmp_path):
    src = tmp_path / "layer"
    offset, resolution = (1000, 2000, 30), (4, 4, 40)
    data = volume_data((40, 30, 20, 1), "uint8", seed=5)
    theirs = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{src}/",
                      "create": True, "scale_metadata": {
                          "size": [40, 30, 20], "chunk_size": [16, 16, 8],
                          "voxel_offset": list(offset), "resolution": list(resolution),
                          "encoding": "raw"},
                      "multiscale_metadata": {"data_type": "uint8", "num_channels": 1,
                                              "type": "image"}}).result(timeout=PEER_TIMEOUT)
    theirs.write(data).result(timeout=PEER_TIMEOUT)
    ngshard.open_volume(src).add_scale((2, 2, 1))
    with ThreadPoolExecutor(2) as pool:
        ngshard.convert(src, tmp_path / "out.zarr", executor=pool, progress=False)
    group = zarr.open_group(str(tmp_path / "out.zarr"), mode="r")
    datasets = group.attrs["ome"]["multiscales"][0]["datasets"]
    for i, dataset in enumerate(datasets):
        vol = ngshard.open_volume(src, i)
        scale, translation = (t[t["type"]] for t in dataset["coordinateTransformations"])
        assert translation == [float(o * r) for o, r in zip(vol.voxel_offset[::-1],
                                                             vol.resolution[::-1])]
        origin = [round(t / s) for t, s in zip(translation, scale)]  # z, y, x voxels
        level, theirs = group[dataset["path"]], precomputed(src, i)
        for z, y, x in [(0, 0, 0), (3, 9, 5), tuple(n - 1 for n in level.shape)]:
            at = (origin[2] + x, origin[1] + y, origin[0] + z, 0)
            assert level[z, y, x] == theirs[at].read().result(timeout=PEER_TIMEOUT) == vol[at]
