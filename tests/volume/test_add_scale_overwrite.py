"""add_scale onto a scale that is there with other shards (as ``convert --downsample`` makes
them) refuses, naming the scale and both specs, and leaves the layer as it was, readable by
tensorstore; ``overwrite=True`` removes that scale's files and makes it anew, byte for byte
what add_scale makes where there was none. Files of a scale no info names are refused too."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from scale_helpers import OTHER, add_other_scale, fine_layer, labels, tree, ts_read

import ngshard
from ngshard.volume.downsample import downsample_mode


def with_other_coarse_scale(path, data) -> np.ndarray:
    """``path`` a segmentation whose 2_2_2 scale has the OTHER shards; returns its voxels."""
    fine_layer(path, data)
    coarse = downsample_mode(data[..., None], (2, 2, 2))[..., 0]
    add_other_scale(path, coarse)
    return coarse


def test_a_scale_of_other_shards_is_refused_and_left_readable(tmp_path):
    data = labels()
    coarse = with_other_coarse_scale(tmp_path, data)
    before = tree(tmp_path)
    vol = ngshard.open_volume(tmp_path)
    with pytest.raises(ngshard.ExistsError) as error:
        vol.add_scale((2, 2, 2))
    message = str(error.value)
    assert message.startswith(f"{tmp_path}/2_2_2: scale 2_2_2 is there with sharding "
                              f"{json.dumps(OTHER)} (add_scale would write {{")
    assert message.endswith("}): pass overwrite=True to replace it")
    assert tree(tmp_path) == before  # the info was not touched, nor any shard
    np.testing.assert_array_equal(ts_read(tmp_path, 1), coarse)
    np.testing.assert_array_equal(ngshard.open_volume(tmp_path, 1)[...][..., 0], coarse)


def test_overwrite_remakes_the_scale_as_if_it_had_not_been_there(tmp_path):
    data = labels(seed=1)
    with_other_coarse_scale(tmp_path / "layer", data)
    made = ngshard.open_volume(tmp_path / "layer").add_scale((2, 2, 2), overwrite=True)
    fine_layer(tmp_path / "fresh", data)
    ngshard.open_volume(tmp_path / "fresh").add_scale((2, 2, 2))
    assert tree(tmp_path / "layer") == tree(tmp_path / "fresh")  # not a byte of the old one
    assert made.scale.sharding != ngshard.ShardingSpec.from_json(OTHER)
    np.testing.assert_array_equal(ts_read(tmp_path / "layer", 1),
                                  downsample_mode(data[..., None], (2, 2, 2))[..., 0])


def test_files_of_a_scale_no_info_names_are_refused(tmp_path):
    """What an add_scale killed before its info was written leaves behind."""
    data = labels(seed=2)
    with_other_coarse_scale(tmp_path / "other", data)
    fine_layer(tmp_path / "layer", data)
    shutil.copytree(tmp_path / "other" / "2_2_2", tmp_path / "layer" / "2_2_2")
    (tmp_path / "layer" / "2_2_2" / "notes.txt").write_text("kept")
    vol = ngshard.open_volume(tmp_path / "layer")
    with pytest.raises(ngshard.ExistsError, match=r"layer/2_2_2 holds \d+ shard or chunk "
                                                  r"files that no info describes"):
        vol.add_scale((2, 2, 2))
    vol.add_scale((2, 2, 2), overwrite=True)
    (tmp_path / "layer" / "2_2_2" / "notes.txt").unlink()
    fine_layer(tmp_path / "fresh", data)
    ngshard.open_volume(tmp_path / "fresh").add_scale((2, 2, 2))
    assert tree(tmp_path / "layer") == tree(tmp_path / "fresh")
