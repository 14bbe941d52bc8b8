"""Names that come from data stay inside their layer: a legacy mesh manifest's fragment names,
an OME group's dataset paths, a volume's scale keys, an annotation collection's index keys.
Each is refused with our error naming the file that gives it, and the message says nothing of
what lies outside (neither whether a file there exists nor its size)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ngshard
import ngshard.zarr
from ngshard.layers.mesh_codec import encode_legacy

OUTSIDE = ["../private/secret.bin", "/etc/hostname", "../../../../../../etc/hostname",
           "sub/../../private/secret.bin", "file:///etc/hostname", "a\\..\\..\\x"]


@pytest.fixture
def legacy(tmp_path):
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "secret.bin").write_bytes(
        encode_legacy(np.ones((3, 3)), np.array([[0, 1, 2]])))
    layer = tmp_path / "layer"
    layer.mkdir()
    (layer / "info").write_text(json.dumps({"@type": "neuroglancer_legacy_mesh"}))
    (layer / "1:0:inside").write_bytes(encode_legacy(np.zeros((3, 3)), np.array([[0, 1, 2]])))
    return layer


@pytest.mark.parametrize("name", OUTSIDE)
def test_legacy_fragments_outside_the_layer_are_refused(legacy, name):
    (legacy / "5:0").write_text(json.dumps({"fragments": ["1:0:inside", name]}))
    with pytest.raises(ngshard.CorruptDataError, match=r"5:0: fragment name .* inside the layer"):
        ngshard.open(legacy).get(5)


def test_the_message_does_not_tell_what_lies_outside(legacy):
    """A file outside that exists and one that does not give the same message."""
    messages = []
    for name in ("/etc/hostname", "/etc/no-such-file-ngshard"):
        (legacy / "5:0").write_text(json.dumps({"fragments": [name]}))
        with pytest.raises(ngshard.CorruptDataError) as e:
            ngshard.open(legacy).get(5)
        messages.append(str(e.value).replace(name, "NAME"))
    assert messages[0] == messages[1]
    assert "bytes" not in messages[0] and "missing" not in messages[0]


def test_fragments_inside_still_read(legacy):
    (legacy / "5:0").write_text(json.dumps({"fragments": ["1:0:inside"]}))
    assert len(ngshard.open(legacy).get(5).vertices) == 3


@pytest.mark.parametrize("path", ["../private.zarr", "/tmp/private.zarr", "a/../../private.zarr",
                                  "gs://bucket/private.zarr"])
def test_an_ome_dataset_outside_the_group_is_not_converted(tmp_path, path):
    outside = ngshard.zarr.create_array(tmp_path / "private.zarr", shape=(8, 8, 8),
                                        dtype="uint8", chunks=(8, 8, 8))
    outside[:] = 7
    group = tmp_path / "group.zarr"
    group.mkdir()
    axes = [{"name": n, "type": "space"} for n in "zyx"]
    (group / "zarr.json").write_text(json.dumps({
        "zarr_format": 3, "node_type": "group", "attributes": {"ome": {
            "version": "0.5", "multiscales": [{"axes": axes, "datasets": [{
                "path": path, "coordinateTransformations": [
                    {"type": "scale", "scale": [1, 1, 1]}]}]}]}}}))
    with pytest.raises(ngshard.SpecError, match=r"datasets\[0\]: dataset path .* inside"):
        ngshard.convert(group, tmp_path / "out")
    assert not (tmp_path / "out" / "info").exists()


@pytest.mark.parametrize("key", ["../outside", "by_id/../../outside", "/abs", "x:y"])
def test_annotation_index_keys_outside_the_collection_are_refused(tmp_path, key):
    coll = ngshard.write_annotations(tmp_path / "a", "point", np.zeros((2, 3)), sharding=None)
    info = json.loads((tmp_path / "a" / "info").read_text())
    info["by_id"]["key"] = key
    (tmp_path / "a" / "info").write_text(json.dumps(info))
    assert len(coll) == 2
    with pytest.raises(ngshard.SpecError, match=r"info: index key .* inside the layer"):
        ngshard.open(tmp_path / "a")
