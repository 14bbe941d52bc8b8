"""Attaching meshes, skeletons and segment properties to a segmentation: ``ngshard.attach``,
``ngshard attach`` and ``write_*(segmentation=)`` record paths relative to the segmentation
in its info (``..`` for a layer beside it), which the server's layer search follows; what
is not a segmentation, a layer of the wrong kind or one on another storage is refused
before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ngshard
from ngshard.cli import main
from ngshard.server.files import LocalFiles
from ngshard.server.layers import find_layers

CUBE = (np.array([[0, 0, 0], [10, 0, 0], [0, 10, 0], [0, 0, 10]], np.float32),
        np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]], np.uint32))


def volume(path, kind: str = "segmentation"):
    dtype, encoding = ("uint32", "compressed_segmentation") if kind == "segmentation" else \
        ("uint8", "raw")
    with ngshard.create_volume(path, dtype=dtype, shape=(16, 16, 8),
                               encoding=encoding) as vol:
        vol[...] = 1
    return path


def info(path) -> dict:
    return json.loads((path / "info").read_text())


def test_writers_attach_what_they_write(tmp_path):
    """Inside the segmentation's folder a layer is named by its folder; beside it by
    ``../``; the info keeps every other member, and the server finds the layers through
    it (not listed on their own)."""
    seg = volume(tmp_path / "data" / "seg")
    ngshard.write_meshes(tmp_path / "data" / "meshes", {1: CUBE}, segmentation=seg)
    ngshard.write_skeletons(seg / "skeletons", {1: (CUBE[0], [[0, 1]])}, segmentation=seg)
    ngshard.write_segment_properties(tmp_path / "data" / "props", [1], labels=["one"],
                                     segmentation=seg)
    doc = info(seg)
    assert {k: doc[k] for k in ("mesh", "skeletons", "segment_properties")} == {
        "mesh": "../meshes", "skeletons": "skeletons", "segment_properties": "../props"}
    assert doc["scales"] and doc["type"] == "segmentation"
    layers = find_layers(LocalFiles(str(tmp_path)))
    assert [(x.path, x.attached) for x in layers] == [("data/seg", {
        "skeletons": "data/seg/skeletons", "mesh": "data/meshes",
        "segment_properties": "data/props"})]


def test_attach_api_and_command(tmp_path, capsys):
    seg = volume(tmp_path / "seg")
    ngshard.write_meshes(tmp_path / "m", {1: CUBE})
    ngshard.write_skeletons(tmp_path / "s", {1: (CUBE[0], [[0, 1]])})
    assert "mesh" not in info(seg)
    new = ngshard.attach(seg, meshes=tmp_path / "m")
    assert new["mesh"] == "../m" and info(seg) == new
    assert main(["attach", str(seg), "--skeletons", str(tmp_path / "s")]) == 0
    assert capsys.readouterr().out.strip() == f"{seg}: info now names skeletons = '../s'"
    assert info(seg)["skeletons"] == "../s" and info(seg)["mesh"] == "../m"
    assert main(["attach", str(seg)]) == 1
    assert "nothing to attach" in capsys.readouterr().err


def test_what_cannot_be_attached_is_refused_before_writing(tmp_path, capsys):
    seg, image = volume(tmp_path / "seg"), volume(tmp_path / "img", "image")
    ngshard.write_meshes(tmp_path / "m", {1: CUBE})
    before = info(seg)
    with pytest.raises(ngshard.SpecError, match="not a segmentation"):
        ngshard.attach(image, meshes=tmp_path / "m")
    with pytest.raises(ngshard.SpecError, match="cannot be attached as skeletons"):
        ngshard.attach(seg, skeletons=tmp_path / "m")
    with pytest.raises(ngshard.NotFoundError, match="no info"):
        ngshard.attach(seg, meshes=tmp_path / "nothing")
    ngshard.write_meshes("memory://elsewhere/m", {1: CUBE})
    with pytest.raises(ngshard.SpecError, match="different storages"):
        ngshard.attach(seg, meshes="memory://elsewhere/m")
    assert info(seg) == before
    with pytest.raises(ngshard.SpecError, match="not a segmentation"):
        ngshard.write_skeletons(tmp_path / "sk", {1: (CUBE[0], [[0, 1]])},
                                segmentation=image)
    assert not (tmp_path / "sk").exists()  # refused before anything was written
    assert main(["attach", str(image), "--mesh", str(tmp_path / "m")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a segmentation" in err
