"""A precomputed scale's chunk store (vol.encoded()): (x, y, z) grid, channels inside the chunk, the
encoding token of raw scales, encoded chunks got, put and listed, sharded or not."""

from __future__ import annotations

import numpy as np
import pytest

import ngshard


@pytest.mark.parametrize("sharding", [None, "auto"])
def test_raw_scale(tmp_path, sharding):
    data = np.arange(20 * 12 * 8 * 2, dtype=np.uint16).reshape(20, 12, 8, 2)
    with ngshard.create_volume(tmp_path / "v", dtype="uint16", shape=data.shape,
                               chunk_size=(8, 8, 8), sharding=sharding) as vol:
        vol[...] = data
    chunks = ngshard.open_volume(tmp_path / "v").encoded()
    assert chunks.shape == (20, 12, 8) and chunks.chunks == (8, 8, 8)
    assert chunks.encoding == "raw F <u2" and chunks.clipped_edges
    assert chunks.grid_shape == (3, 2, 1)
    assert "v/1_1_1" in chunks.where((2, 1, 0)) and "(2, 1, 0)" in chunks.where((2, 1, 0)) or \
        chunks.where((2, 1, 0)).endswith("v/1_1_1/16-20_8-12_0-8")  # the chunk or its file
    assert sorted(map(tuple, chunks.list_positions().tolist())) == [
        (x, y, 0) for x in range(3) for y in range(2)]
    edge = chunks.get(np.array([[2, 1, 0]]))[0]  # clipped: 4 x 4 x 8 voxels, 2 channels
    expected = data[16:20, 8:12, 0:8].tobytes(order="F")
    assert bytes(edge) == expected
    # put whole chunks back elsewhere: the volume reads them
    out = ngshard.open_volume(tmp_path / "v", mode="r+").encoded()
    out.put(np.array([[0, 0, 0]]), [data[8:16, 0:8, 0:8].tobytes(order="F")])
    out.commit()
    np.testing.assert_array_equal(ngshard.open_volume(tmp_path / "v")[0:8, 0:8, 0:8],
                                  data[8:16, 0:8, 0:8])


def test_other_encodings_have_no_token(tmp_path):
    ngshard.create_volume(tmp_path / "s", dtype="uint64", shape=(8, 8, 8),
                          encoding="compressed_segmentation")
    assert ngshard.open_volume(tmp_path / "s").encoded().encoding == ""
    with pytest.raises(ngshard.ReadOnlyError):
        ngshard.open_volume(tmp_path / "s").encoded().put(np.zeros((1, 3), int), [b""])
