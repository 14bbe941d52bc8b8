"""``ngshard.open`` picks the layer kind from the info; ``ngshard info`` describes each kind
and ``ngshard get --as`` decodes segments."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ngshard
from ngshard.cli import main

SKELETON = (np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 0, 2]], np.float32),
            np.array([[0, 1], [1, 2], [3, 0]]),
            {"radius": np.array([1, 2, 3, 4], np.float32)})


@pytest.fixture
def layer(tmp_path):
    ngshard.write_skeletons(tmp_path / "sk", {5: SKELETON, 2**64 - 1: SKELETON[:2] + (
        {"radius": np.zeros(4, np.float32)},)})
    return str(tmp_path / "sk")


def test_open_by_kind(tmp_path, layer):
    assert isinstance(ngshard.open(layer), ngshard.Skeletons)
    ngshard.write_kv(tmp_path / "kv", ngshard.ShardingSpec(), {1: b"x"})
    assert isinstance(ngshard.open(tmp_path / "kv"), ngshard.ShardedKV)
    vol = ngshard.create_volume(tmp_path / "v", dtype="uint8", shape=(4, 4, 4))
    assert isinstance(ngshard.open(tmp_path / "v"), ngshard.Volume) and vol.shape[0] == 4
    with pytest.raises(ngshard.NotFoundError):
        ngshard.open(tmp_path / "nothing")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "info").write_text('{"@type": "something_else"}')
    with pytest.raises(ngshard.SpecError, match="not a layer ngshard knows"):
        ngshard.open(tmp_path / "odd")


def test_info_describes_a_skeleton_layer_and_its_store(layer, capsys):
    assert main(["info", layer]) == 0
    out = capsys.readouterr().out
    assert "neuroglancer_skeletons" in out and "radius (float32 x1)" in out
    assert "keys         2" in out
    assert main(["info", layer, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["keys"] == 2 and doc["layer"]["kind"] == "neuroglancer_skeletons"


def test_get_as_swc_json_and_raw(layer, tmp_path, capsysbinary):
    assert main(["get", layer, "5", "--as", "swc"]) == 0
    rows = [r.split() for r in capsysbinary.readouterr().out.decode().splitlines()
            if not r.startswith("#")]
    # breadth first from vertex 0: 0 (root), then 1 and 3, then 2; parents come first
    assert [r[0] for r in rows] == ["1", "2", "3", "4"]
    assert [(r[2], r[3], r[4], r[5], r[6]) for r in rows] == [
        ("0", "0", "0", "1", "-1"), ("1", "0", "0", "2", "1"), ("0", "0", "2", "4", "1"),
        ("1", "1", "0", "3", "2")]
    assert main(["get", layer, "5", "--as", "json"]) == 0
    doc = json.loads(capsysbinary.readouterr().out)
    assert doc["id"] == 5 and doc["edges"] == SKELETON[1].tolist()
    assert doc["attributes"]["radius"] == [1, 2, 3, 4]
    assert main(["get", layer, "5"]) == 0
    raw = capsysbinary.readouterr().out
    assert raw[:8] == np.array([4, 3], "<u4").tobytes()
    assert main(["get", layer, "6", "--as", "json"]) == 3
    assert main(["get", layer, "5", "--as", "obj"]) == 1
    assert "--as obj is not for a skeleton layer" in capsysbinary.readouterr().err.decode()


def test_get_as_on_a_bare_store_is_refused(tmp_path, capsys):
    ngshard.write_kv(tmp_path / "kv", ngshard.ShardingSpec(), {1: b"x"})
    assert main(["get", str(tmp_path / "kv"), "1", "--as", "json"]) == 1
    assert "--as decodes" in capsys.readouterr().err


def test_segment_properties_info_and_get(tmp_path, capsys):
    ngshard.write_segment_properties(tmp_path / "p", [1, 2], labels=["a", "b"],
                                     numbers={"n": np.array([3, 4], np.uint8)})
    assert main(["info", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert "segments     2" in out and "n (number, uint8)" in out
    assert main(["get", str(tmp_path / "p"), "2"]) == 0
    assert json.loads(capsys.readouterr().out) == {"id": 2, "label": "b", "n": 4}


def test_annotation_info_and_get(tmp_path, capsys):
    ngshard.write_annotations(tmp_path / "a", "point", np.arange(30.0).reshape(10, 3),
                              properties={"size": np.arange(10, dtype=np.uint8)},
                              relationships={"syn": np.arange(10) + 100}, durable=False)
    assert main(["info", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "type         point" in out and "size (uint8)" in out and "spatial 0" in out
    assert main(["get", str(tmp_path / "a"), "4", "--as", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc == {"id": 4, "type": "point", "geometry": [12.0, 13.0, 14.0],
                   "properties": {"size": 4}, "relationships": {"syn": [104]}}


def test_mesh_info_get_and_compact(tmp_path, capsysbinary):
    pytest.importorskip("DracoPy")
    from meshdata import lods

    path = str(tmp_path / "m")
    ngshard.write_meshes(path, {9: lods(1), 10: lods(2)}, durable=False)
    assert main(["info", path]) == 0
    out = capsysbinary.readouterr().out.decode()
    assert "neuroglancer_multilod_draco" in out and "16 bits" in out and "keys         2" in out
    assert main(["get", path, "9", "--as", "obj", "--lod", "2"]) == 0
    obj = capsysbinary.readouterr().out.decode().splitlines()
    mesh = ngshard.open(path).get(9, lod=2)
    assert sum(r.startswith("v ") for r in obj) == len(mesh.vertices)
    assert sum(r.startswith("f ") for r in obj) == len(mesh.faces)
    assert main(["get", path, "9", "--as", "ply"]) == 0
    ply = capsysbinary.readouterr().out
    assert ply.startswith(b"ply\nformat binary_little_endian 1.0\n") and b"end_header\n" in ply
    assert main(["rm", path, "10"]) == 0  # through the CLI the fragments are known too
    assert main(["compact", path, "-q"]) == 0
    capsysbinary.readouterr()
    again = ngshard.open(path)
    assert again.keys_array().tolist() == [9]
    np.testing.assert_array_equal(again.get(9, lod=2).faces, mesh.faces)
