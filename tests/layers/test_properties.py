"""Segment properties: written, attached to a layer, read back; bad info rejected."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ngshard


def test_round_trip_and_attach_to_a_volume(tmp_path):
    with ngshard.create_volume(tmp_path / "seg", dtype="uint64", shape=(8, 8, 8),
                               chunk_size=(8, 8, 8), encoding="compressed_segmentation"):
        pass
    ids = [3, 2**64 - 1, 17]
    props = ngshard.write_segment_properties(
        tmp_path / "seg", ids, labels=["axon", "soma", "glia"],
        descriptions=["a", "b", "c"], strings={"note": ["x", "y", "z"]},
        numbers={"volume": np.array([1.5, 2.5, 3.5], np.float32),
                 "count": np.array([1, 2, 3], np.uint16)},
        tags=[["exc", "big"], [], ["inh"]], tag_descriptions={"exc": "excitatory"})
    info = json.loads((tmp_path / "seg" / "info").read_text())
    assert info["segment_properties"] == "segment_properties" and "scales" in info
    again = ngshard.open(tmp_path / "seg" / "segment_properties")
    assert isinstance(again, ngshard.SegmentProperties)
    assert again.ids.tolist() == ids == props.ids.tolist()
    assert again.get(2**64 - 1) == {"label": "soma", "description": "b", "note": "y",
                                     "volume": 2.5, "count": 2, "tags": []}
    assert again.values("tags") == [["big", "exc"], [], ["inh"]]
    assert again.values("count").dtype == np.uint16
    assert 17 in again and 4 not in again
    assert again.get(4) is None and again.get(4, {}) == {}
    with pytest.raises(KeyError):
        again[4]
    assert again[17] == again.get(17) and list(again) == sorted(ids)
    assert again.get_many([4, 17, 2**64 - 1]) == {17: again[17], 2**64 - 1: again[2**64 - 1]}
    tags = next(p for p in again.properties if p["type"] == "tags")
    assert tags["tag_descriptions"] == ["big", "excitatory", "inh"]


def test_standalone_directory(tmp_path):
    ngshard.write_segment_properties(tmp_path / "p", [1, 2], labels=["a", "b"])
    assert ngshard.open(tmp_path / "p").get(1) == {"label": "a"}


@pytest.mark.parametrize("inline, says", [
    ({"ids": [1], "properties": []}, "base-10 strings"),
    ({"ids": ["18446744073709551616"], "properties": []}, "past 2\\*\\*64"),
    ({"ids": ["1"], "properties": [{"id": "l", "type": "label", "values": []}]},
     "list of 1 entries"),
    ({"ids": ["1"], "properties": [{"id": "n", "type": "number", "data_type": "int64",
                                     "values": [1]}]}, "data_type must be one of"),
    ({"ids": ["1"], "properties": [{"id": "n", "type": "number", "data_type": "uint8",
                                     "values": [300]}]}, "outside the range of uint8"),
    ({"ids": ["1"], "properties": [{"id": "t", "type": "tags", "tags": ["a"],
                                     "values": [[0, 1]]}]}, "increasing list of indices"),
    ({"ids": ["1"], "properties": [{"id": "a", "type": "label", "values": ["x"]},
                                    {"id": "b", "type": "label", "values": ["y"]}]},
     "more than one property of type 'label'"),
])
def test_bad_info_is_a_spec_error(tmp_path, inline, says):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "info").write_text(json.dumps(
        {"@type": "neuroglancer_segment_properties", "inline": inline}))
    with pytest.raises(ngshard.SpecError, match=says):
        ngshard.open(tmp_path / "p")


def test_bad_tags_are_refused_before_writing(tmp_path):
    with pytest.raises(ValueError, match="no spaces"):
        ngshard.write_segment_properties(tmp_path / "p", [1], tags=[["two words"]])
    assert not (tmp_path / "p").exists()
