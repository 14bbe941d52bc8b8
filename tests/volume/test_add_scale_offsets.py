"""add_scale with a voxel_offset that is not a multiple of the factor: the coarse scale's
offset is floor(offset / factor) and its voxels are the blocks at multiples of the factor in
absolute coordinates, as tensorstore's downsample driver (and neuroglancer, igneous) have
them; the default factor is the near-isotropic step."""

from __future__ import annotations

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard


@pytest.mark.parametrize("sharding", [None, "auto"])
def test_odd_offset_equals_tensorstore(tmp_path, sharding):
    data = np.random.default_rng(0).integers(0, 256, (37, 29, 11), np.uint8)
    vol = ngshard.create_volume(tmp_path / "img", shape=data.shape, dtype="uint8",
                                chunk_size=(8, 8, 4), voxel_offset=(5, 3, 1),
                                resolution=(4, 4, 40), sharding=sharding)
    vol[...] = data
    vol.commit()
    coarse = vol.add_scale()  # 4x4x40: the near-isotropic step is 2x2x1
    assert coarse.scale.key == "8_8_40" and coarse.scale.voxel_offset == (2, 1, 1)

    def scale(i):
        return ts.open({"driver": "neuroglancer_precomputed", "scale_index": i,
                        "kvstore": f"file://{tmp_path}/img/"}).result(timeout=PEER_TIMEOUT)

    want = ts.downsample(scale(0), [2, 2, 1, 1], "mean")
    assert scale(1).domain == want.domain
    np.testing.assert_array_equal(scale(1).read().result(timeout=PEER_TIMEOUT),
                                  want.read().result(timeout=PEER_TIMEOUT))
    np.testing.assert_array_equal(coarse[...], want.read().result(timeout=PEER_TIMEOUT))
