"""The viewer's state for a served tree (pure JSON), and the viewer started on it."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

import ngshard
from ngshard.server.files import LocalFiles
from ngshard.server.layers import find_layers
from ngshard.server.view import MAX_LAYERS, SELECTED, viewer_state
from ngshard.storage import open_storage


def test_state_of_the_demo(demo_dir):
    with ngshard.serve(demo_dir) as srv:
        state = viewer_state(srv.layers, srv.url, open_storage(demo_dir))
    image, seg, synapses = state["layers"]  # images, segmentations, annotations
    assert synapses == {"type": "annotation", "name": "synapses",
                        "source": f"precomputed://{srv.url}/synapses",
                        "linkedSegmentationLayer": {"pre_synaptic_cell": "segmentation",
                                                    "post_synaptic_cell": "segmentation"},
                        "filterBySegmentation": ["pre_synaptic_cell", "post_synaptic_cell"]}
    assert image == {"type": "image", "name": "image",
                     "source": f"precomputed://{srv.url}/image"}
    assert seg["type"] == "segmentation" and seg["source"] == \
        f"precomputed://{srv.url}/segmentation"
    assert seg["skeletonRendering"]["mode3d"] == "lines"
    # the largest segments of the middle plane of the coarsest scale, as decimal strings
    plane = ngshard.open_volume(demo_dir / "segmentation", 1)[:, :, 64, 0]
    ids, counts = np.unique(plane, return_counts=True)
    assert seg["segments"] == [str(i) for i in ids[np.argsort(-counts, kind="stable")]
                               [:SELECTED].tolist()]
    kv = ngshard.open_kv(demo_dir / "segmentation" / "skeletons")
    assert all(int(s) in kv for s in seg["segments"])  # each has its skeleton
    assert state["dimensions"] == {"x": [8e-9, "m"], "y": [8e-9, "m"], "z": [40e-9, "m"]}
    assert state["position"] == [128.5, 128.5, 64.5]  # the central voxel's centre
    assert 0.5 < state["crossSectionScale"] < 1  # 256 voxels across a panel of ~300 pixels
    assert state["selectedLayer"] == {"layer": "segmentation"}
    json.dumps(state)  # plain JSON


def test_state_of_other_trees(tmp_path):
    """Standalone skeletons join the only segmentation, annotations become annotation
    layers, a bare sharded store none; names stay distinct; the position is the centre of
    all the layers' bounds; hundreds of layers are cut to MAX_LAYERS."""
    with ngshard.create_volume(tmp_path / "a" / "em", dtype="uint8", shape=(100, 60, 10),
                               voxel_offset=(1000, 0, 5), resolution=(4, 4, 30)) as vol:
        vol[:] = 3
    with ngshard.create_volume(tmp_path / "b" / "em", dtype="uint32", shape=(10, 10, 10),
                               encoding="compressed_segmentation") as vol:
        vol[:] = 0  # nothing to select
    (tmp_path / "sk").mkdir()
    (tmp_path / "sk" / "info").write_text('{"@type": "neuroglancer_skeletons"}')
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "info").write_text('{"@type": "neuroglancer_annotations_v1"}')
    ngshard.write_kv(tmp_path / "kv", ngshard.ShardingSpec(), {1: b"x"})
    files = LocalFiles(str(tmp_path))
    state = viewer_state(find_layers(files), "http://h:1", open_storage(tmp_path))
    kinds = [(e["name"], e["type"]) for e in state["layers"]]
    # images, then segmentations, then annotations; the skeletons join the one segmentation
    assert kinds == [("em", "image"), ("em'", "segmentation"), ("ann", "annotation")]
    seg = state["layers"][1]
    assert seg["segments"] == [] and seg["source"] == [
        "precomputed://http://h:1/b/em", "precomputed://http://h:1/sk"]
    # x: [4000, 4400) nm and [0, 10) nm; y: [0, 240) and [0, 10); z: [150, 450) and [0, 10)
    assert state["position"] == [550.5, 30.5, 7.5] and state["dimensions"]["z"] == [30e-9, "m"]
    for i in range(MAX_LAYERS + 5):
        (tmp_path / "many" / f"s{i:02d}").mkdir(parents=True)
        (tmp_path / "many" / f"s{i:02d}" / "info").write_text(
            '{"@type": "neuroglancer_skeletons"}')
    assert len(viewer_state(find_layers(files), "http://h:1")["layers"]) == MAX_LAYERS


def test_open_viewer_serves_the_client_with_the_state(demo_dir):
    pytest.importorskip("neuroglancer", reason="the view extra is not installed")
    from ngshard.server.view import open_viewer

    with open_viewer(demo_dir) as viewing:
        assert viewing.url.startswith("http://127.0.0.1:") and "/v/" in viewing.url
        with urllib.request.urlopen(viewing.url, timeout=10) as page:
            assert page.status == 200 and b"<script" in page.read()
        names = [layer.name for layer in viewing.viewer.state.layers]
        assert names == ["image", "segmentation", "synapses"]
        with urllib.request.urlopen(f"{viewing.server.url}/image/info", timeout=10) as info:
            assert json.loads(info.read())["type"] == "image"
    with pytest.raises(OSError):  # both stopped
        urllib.request.urlopen(viewing.url, timeout=2)


def test_a_segmentation_naming_folders_beside_it(tmp_path):
    """``view SEG`` where SEG's info names ``../meshes`` (attached with ngshard.attach): the
    folder above is served under /data/ with SEG and meshes alone, so that Neuroglancer
    resolves the ``..``; the other folders there are not served."""
    pytest.importorskip("neuroglancer", reason="the view extra is not installed")
    from ngshard.server.view import open_viewer

    labels = np.zeros((32, 32, 8), np.uint32)
    labels[4:20, 4:20, 2:6] = 7
    with ngshard.create_volume(tmp_path / "seg", dtype="uint32", shape=labels.shape,
                               resolution=(4, 4, 40), layer_type="segmentation") as vol:
        vol[...] = labels
    box = np.array([[4, 4, 2], [20, 20, 6]], np.float32) * (4, 4, 40)
    corners = np.array([[box[i // 4 % 2][0], box[i // 2 % 2][1], box[i % 2][2]]
                        for i in range(8)], np.float32)
    ngshard.write_meshes(tmp_path / "meshes", {7: (corners, [[0, 1, 3], [0, 3, 2]])})
    ngshard.attach(tmp_path / "seg", meshes=tmp_path / "meshes")
    assert json.loads((tmp_path / "seg" / "info").read_text())["mesh"] == "../meshes"
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "info").write_text("{}")
    with open_viewer(tmp_path / "seg") as viewing:
        url = viewing.server.url
        assert url.endswith("/data"), url
        layers = viewing.state["layers"]
        assert [layer["source"] for layer in layers] == [f"precomputed://{url}/seg"]
        assert viewing.notices and "meshes" in viewing.notices[0]
        for name, status in (("seg/info", 200), ("meshes/info", 200), ("private/info", 404)):
            try:
                with urllib.request.urlopen(f"{url}/{name}", timeout=10) as answer:
                    got = answer.status
            except urllib.error.HTTPError as e:
                got = e.code
            assert got == status, name


def test_without_neuroglancer_one_line_says_what_to_install(demo_dir, monkeypatch):
    from ngshard.server.view import open_viewer

    monkeypatch.setitem(sys.modules, "neuroglancer", None)
    with pytest.raises(ngshard.MissingDependencyError, match=r"pip install 'ngshard\[view\]'"):
        open_viewer(demo_dir)


def test_zarr_arrays_and_groups_are_layers(tmp_path):
    """A zarr v3 array, a v2 array, OME-Zarr groups (their levels not listed on their own)
    and an OME label image become zarr sources, label-like integers (of a group: its first
    level's) and label images segmentation; a plain group is searched further; the viewer
    frames none of them itself (Neuroglancer does)."""
    zarr = pytest.importorskip("zarr")
    import ngshard.zarr

    ngshard.zarr.create_array(tmp_path / "em.zarr", (8, 16, 16), "uint8", (8, 8, 8))
    zarr.create_array(tmp_path / "v2.zarr", shape=(4, 4), chunks=(2, 2), dtype="uint64",
                      zarr_format=2)
    group = zarr.open_group(tmp_path / "ome.zarr", mode="w")
    group.attrs["ome"] = {"version": "0.5", "multiscales": [
        {"axes": [{"name": a, "type": "space"} for a in "zyx"],
         "datasets": [{"path": "0"}, {"path": "1"}]}]}
    group.create_array("0", shape=(8, 8, 8), chunks=(4, 4, 4), dtype="uint16")
    group.create_array("1", shape=(4, 4, 4), chunks=(4, 4, 4), dtype="uint16")
    labels = zarr.open_group(tmp_path / "ome.zarr" / "labels" / "cells", mode="w")
    labels.attrs["ome"] = {"version": "0.5", "image-label": {}, "multiscales": [
        {"axes": [{"name": a, "type": "space"} for a in "zyx"], "datasets": [{"path": "0"}]}]}
    labels.create_array("0", shape=(8, 8, 8), chunks=(4, 4, 4), dtype="uint16")
    ids = zarr.open_group(tmp_path / "ids.zarr", mode="w", zarr_format=2)  # OME 0.4
    ids.attrs["multiscales"] = [{"version": "0.4", "datasets": [{"path": "0"}],
                                 "axes": [{"name": a, "type": "space"} for a in "zyx"]}]
    ids.create_array("0", shape=(4, 4, 4), chunks=(4, 4, 4), dtype="uint64")
    plain = zarr.open_group(tmp_path / "plain", mode="w")
    plain.create_array("inner", shape=(2,), chunks=(2,), dtype="float32")
    found = {layer.path: (layer.kind, layer.source("http://h:1"))
             for layer in find_layers(LocalFiles(str(tmp_path)))}
    assert found == {
        "em.zarr": ("image", "zarr://http://h:1/em.zarr"),
        "v2.zarr": ("segmentation", "zarr://http://h:1/v2.zarr"),
        "ome.zarr": ("image", "zarr://http://h:1/ome.zarr"),
        "ids.zarr": ("segmentation", "zarr://http://h:1/ids.zarr"),
        "plain/inner": ("image", "zarr://http://h:1/plain/inner")}
    # the labels group lies inside a layer, which the search does not enter; on its own:
    assert [(x.path, x.kind) for x in find_layers(LocalFiles(str(tmp_path / "ome.zarr")))] \
        == [("", "image")]
    inside = find_layers(LocalFiles(str(tmp_path / "ome.zarr" / "labels")))
    assert [(x.path, x.kind) for x in inside] == [("cells", "segmentation")]
    state = viewer_state(find_layers(LocalFiles(str(tmp_path))), "http://h:1",
                         open_storage(tmp_path))
    assert {e["name"]: e["type"] for e in state["layers"]} == {
        "em.zarr": "image", "v2.zarr": "segmentation", "ome.zarr": "image",
        "ids.zarr": "segmentation", "inner": "image"}
    # one space x, y, z: arrays without units at 1 nm per voxel (axes by name or position)
    assert state["dimensions"] == {a: [1e-9, "m"] for a in "xyz"}
    layers = {e["name"]: e for e in state["layers"]}
    zyx = {a: [1e-9, "m"] for a in "zyx"}
    assert layers["em.zarr"]["source"] == {"url": "zarr://http://h:1/em.zarr", "transform": {
        "inputDimensions": zyx, "outputDimensions": zyx}}
    assert layers["ome.zarr"]["source"]["transform"]["outputDimensions"] == zyx  # no units
    assert layers["inner"]["source"] == "zarr://http://h:1/plain/inner"  # 1-D: as it is
    assert "segments" not in layers["v2.zarr"]
    assert [e["type"] for e in state["layers"]] == ["image"] * 3 + ["segmentation"] * 2


def test_every_source_shares_one_space(tmp_path):
    """A precomputed volume, zarr arrays named in any order (v3 dimension_names, v2
    _ARRAY_DIMENSIONS, channels first) and an OME-Zarr group with units: one space of x, y,
    z; each zarr array named and scaled by its source transform (at --resolution, else 1 nm
    with a one-line notice), the OME group placed by its own metadata; the position is the
    centre of all of them."""
    zarr = pytest.importorskip("zarr")
    from concurrent.futures import ThreadPoolExecutor

    import ngshard.zarr

    with ngshard.create_volume(tmp_path / "em", dtype="uint8", shape=(64, 32, 8),
                               resolution=(8, 8, 40), voxel_offset=(64, 0, 0)) as vol:
        vol[...] = 1
    ngshard.zarr.create_array(tmp_path / "zyx.zarr", (8, 32, 64), "uint8", (8, 8, 8),
                              dimension_names=("z", "y", "x"))
    zarr.create_array(tmp_path / "xyz.zarr", shape=(64, 32, 8), chunks=(8, 8, 8),
                      dtype="uint8", zarr_format=2,
                      attributes={"_ARRAY_DIMENSIONS": ["x", "y", "z"]})
    ngshard.zarr.create_array(tmp_path / "czyx.zarr", (2, 8, 32, 64), "uint8", (1, 8, 8, 8))
    with ThreadPoolExecutor(1) as pool:
        ngshard.convert(tmp_path / "em", tmp_path / "ome.zarr", executor=pool,
                        progress=False)
    layers = find_layers(LocalFiles(str(tmp_path)))
    notices: list[str] = []
    state = viewer_state(layers, "http://h:1", open_storage(tmp_path),
                         resolution=(8, 8, 40), notices=notices)
    by_name = {e["name"]: e for e in state["layers"]}
    nm = {"x": [8e-9, "m"], "y": [8e-9, "m"], "z": [40e-9, "m"]}

    def dims(name):
        return by_name[name]["source"]["transform"]["outputDimensions"]

    assert list(dims("zyx.zarr").items()) == [(a, nm[a]) for a in "zyx"]
    assert list(dims("xyz.zarr").items()) == [(a, nm[a]) for a in "xyz"]
    assert list(dims("czyx.zarr").items()) == [("c^", [1, ""])] + [(a, nm[a]) for a in "zyx"]
    assert by_name["ome.zarr"]["source"] == "zarr://http://h:1/ome.zarr"  # units of its own
    assert state["dimensions"] == nm
    assert state["position"] == [64.5, 16.5, 4.5]  # x: [0, 128) voxels of them all
    assert notices == ["no units in the metadata of czyx.zarr, xyz.zarr, zyx.zarr: shown at "
                       "8,8,40 nm per voxel (x,y,z)"]
    notices.clear()
    viewer_state(layers, "http://h:1", open_storage(tmp_path), notices=notices)
    assert len(notices) == 1 and "1,1,1 nm" in notices[0] and "--resolution" in notices[0]
