"""OME-Zarr multiscales metadata (0.4 and 0.5): axes, units to nm, per-level and
dataset-level transforms, the default axes and the override; bad metadata is a SpecError."""

from __future__ import annotations

import json

import pytest

from ngshard.errors import NotFoundError, SpecError
from ngshard.zarr.ome import (
    Axis,
    axis_roles,
    multiscales_05,
    parse_multiscales,
    read_group,
    to_nm,
)

AXES = [{"name": "c", "type": "channel"},
        {"name": "z", "type": "space", "unit": "micrometer"},
        {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "nanometer"}]


def level(path, scale, translation=None):
    t = [{"type": "scale", "scale": scale}]
    if translation:
        t.append({"type": "translation", "translation": translation})
    return {"path": path, "coordinateTransformations": t}


def test_04_levels_with_dataset_transform():
    attrs = {"multiscales": [{"version": "0.4", "axes": AXES, "datasets": [
        level("0", [1, 0.04, 0.008, 8]), level("1", [1, 0.08, 0.016, 16], [0, 0.02, 0, 4])],
        "coordinateTransformations": [{"type": "scale", "scale": [1, 2, 1, 1]}]}]}
    ms = parse_multiscales(attrs)
    assert ms.version == "0.4" and [a.name for a in ms.axes] == ["c", "z", "y", "x"]
    assert ms.levels[0].scale == (1, 0.08, 0.008, 8)
    assert ms.levels[1].scale == (1, 0.16, 0.016, 16)
    assert ms.levels[1].translation == (0, 0.04, 0, 4)  # scaled by the dataset's scale
    roles = axis_roles(4, ms.axes)
    assert roles == {"c": 0, "z": 1, "y": 2, "x": 3}
    assert to_nm(ms.levels[0].scale[1], ms.axes[1].unit) == pytest.approx(80)


def test_05_under_ome_and_the_writer_round_trips():
    attrs = multiscales_05([("s0", (4, 4, 40), (8, 0, 0)), ("s1", (8, 8, 80), (0, 0, 0))],
                           channels=True, name="em")
    attrs = json.loads(json.dumps(attrs))
    ms = parse_multiscales(attrs)
    assert ms.version == "0.5" and ms.name == "em"
    assert [lv.path for lv in ms.levels] == ["s0", "s1"]
    assert ms.levels[0].scale == (1, 40, 4, 4) and ms.levels[0].translation == (0, 0, 0, 8)
    assert axis_roles(4, ms.axes) == {"c": 0, "z": 1, "y": 2, "x": 3}


def test_units():
    assert to_nm(2, "micrometer") == 2000
    assert to_nm(3, "angstrom") == pytest.approx(0.3)
    assert to_nm(5, None) == 5
    with pytest.raises(SpecError, match="furlong"):
        to_nm(1, "furlong")


def test_default_axes_and_override():
    assert axis_roles(3) == {"z": 0, "y": 1, "x": 2}
    assert axis_roles(4) == {"c": 0, "z": 1, "y": 2, "x": 3}
    assert axis_roles(4, override="xyzc") == {"x": 0, "y": 1, "z": 2, "c": 3}
    assert axis_roles(5, override="TCZYX") == {"t": 0, "c": 1, "z": 2, "y": 3, "x": 4}
    # dimension names win over the default, unknown names fall back to it
    assert axis_roles(3, ["x", "y", "z"]) == {"x": 0, "y": 1, "z": 2}
    assert axis_roles(3, [Axis("a"), Axis("b"), Axis("d")]) == {"z": 0, "y": 1, "x": 2}
    for bad in ("zyx", "zyq", "zzyx", "cyxt"):
        with pytest.raises(SpecError, match="axes"):
            axis_roles(4, override=bad)
    with pytest.raises(SpecError, match="cannot tell"):
        axis_roles(5)


@pytest.mark.parametrize("attrs, match", [
    ({"multiscales": []}, "non-empty"),
    ({"multiscales": [{"axes": AXES}]}, "datasets"),
    ({"multiscales": [{"axes": AXES, "datasets": [level("0", [1, 2])]}]}, "4 finite"),
    ({"multiscales": [{"axes": AXES, "datasets": [{"path": "0", "coordinateTransformations": [
        {"type": "affine"}]}]}]}, "unsupported"),
    ({"multiscales": [{"axes": [{"name": "x"}, {"name": "x"}], "datasets": []}]}, "unique"),
])
def test_bad_metadata(attrs, match):
    with pytest.raises(SpecError, match=match):
        parse_multiscales(attrs)


def test_read_group(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "zarr.json").write_text(json.dumps(
        {"zarr_format": 3, "node_type": "group",
         "attributes": multiscales_05([("0", (1, 1, 1), (0, 0, 0))], False)}))
    assert [lv.path for lv in read_group(tmp_path / "g").levels] == ["0"]
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / ".zgroup").write_text('{"zarr_format": 2}')
    (tmp_path / "v2" / ".zattrs").write_text(json.dumps({"multiscales": [
        {"version": "0.4", "axes": AXES[1:], "datasets": [level("0", [1, 1, 1])]}]}))
    assert read_group(tmp_path / "v2").version == "0.4"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "zarr.json").write_text("{nope")
    with pytest.raises(SpecError, match="zarr.json"):
        read_group(tmp_path / "bad")
    with pytest.raises(NotFoundError, match="not a zarr"):
        read_group(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "group"}')
    with pytest.raises(SpecError, match="without OME multiscales"):
        read_group(tmp_path / "plain")
    (tmp_path / "arr").mkdir()
    (tmp_path / "arr" / ".zarray").write_text("{}")
    (tmp_path / "arr" / ".zattrs").write_text("{}")
    assert read_group(tmp_path / "arr") is None
