"""Hostile or broken info files: one SpecError naming the file, never a foreign exception, and
never a path outside the layer."""

from __future__ import annotations

import json

import pytest

import ngshard
from ngshard.cli import main

SCALE = {"key": "s0", "size": [8, 8, 8], "voxel_offset": [0, 0, 0], "resolution": [1, 1, 1],
         "chunk_sizes": [[8, 8, 8]], "encoding": "raw"}
INFO = {"type": "image", "data_type": "uint8", "num_channels": 1, "scales": [SCALE]}


@pytest.mark.parametrize("text, message", [
    ("[" * 200_000 + "]" * 200_000, "must be a JSON object, got a list"),
    ('{"scales": [], "n": ' + "9" * 5001 + "}", "not valid JSON"),
    ("[1, 2]", "must be a JSON object, got a list"),
    ("\xff\xfe", "not valid JSON"),
])
def test_hostile_info_is_a_spec_error(tmp_path, capsys, text, message):
    (tmp_path / "info").write_bytes(text.encode("utf-8", "surrogateescape")
                                    if text != "\xff\xfe" else b"\xff\xfe")
    for opener in (ngshard.open_kv, ngshard.open_volume):
        with pytest.raises(ngshard.SpecError, match=message):
            opener(tmp_path)
    for command in ("info", "ls", "verify"):
        assert main([command, str(tmp_path)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("ngshard: error: ") and err.count("\n") == 1 and message in err


def test_an_info_member_nested_deeper_than_python_parses_is_kept(tmp_path):
    """An unused member nested 200,000 deep (past Python's recursion limit): the layer opens,
    and a writer keeps the member as it was read."""
    deep = "[" * 200_000 + "]" * 200_000
    (tmp_path / "info").write_text(json.dumps({**INFO, "x": "HERE"}).replace('"HERE"', deep))
    with ngshard.open_volume(tmp_path, mode="r+") as vol:
        vol[...] = 7
    assert (ngshard.open_volume(tmp_path)[...] == 7).all()
    vol.add_scale((2, 2, 2))  # rewrites the info
    assert (ngshard.open_volume(tmp_path, 1)[...] == 7).all()
    assert deep in "".join((tmp_path / "info").read_text().split())


@pytest.mark.parametrize("key", ["../ESCAPED", "/abs/path", "a/../../b", ".", "a//b", "C:x",
                                 "..\\up"])
def test_scale_keys_stay_inside_the_layer(tmp_path, key):
    layer = tmp_path / "layer"
    layer.mkdir()
    (layer / "info").write_text(json.dumps({**INFO, "scales": [{**SCALE, "key": key}]}))
    with pytest.raises(ngshard.SpecError,
                       match="scale key .* must name something inside the layer"):
        ngshard.open_volume(layer, mode="r+")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["layer"]


@pytest.mark.parametrize("field, value", [("voxel_offset", [2**63, 0, 0]),
                                          ("size", [2**64, 1, 1])])
def test_grid_bounds_must_fit_int64(tmp_path, field, value):
    (tmp_path / "info").write_text(json.dumps({**INFO, "scales": [{**SCALE, field: value}]}))
    with pytest.raises(ngshard.SpecError, match="64-bit"):
        ngshard.open_volume(tmp_path)


def test_grid_end_must_fit_int64(tmp_path):
    scale = {**SCALE, "voxel_offset": [2**63 - 32, 0, 0], "size": [64, 8, 8]}
    (tmp_path / "info").write_text(json.dumps({**INFO, "scales": [scale]}))
    with pytest.raises(ngshard.SpecError, match="64-bit"):
        ngshard.open_volume(tmp_path)


@pytest.mark.parametrize("change", [{"num_channels": 2**62},
                                    {"scales": [{**SCALE, "chunk_sizes": [[2**31, 2**31, 4]]}]}])
def test_a_chunk_past_2_63_bytes_is_a_spec_error(tmp_path, change):
    """Once numpy's ValueError ("Maximum allowed dimension exceeded") at open."""
    (tmp_path / "info").write_text(json.dumps({**INFO, **change}))
    with pytest.raises(ngshard.SpecError, match=r"scales\[0\]: a chunk of .* passes 2\*\*63"):
        ngshard.open_volume(tmp_path)
