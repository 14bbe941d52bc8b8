"""``ngshard demo``: the sample layers are readable by tensorstore, the skeletons lie inside
their segments, the meshes wrap them, the synapses lie between the cells they relate, the
segment properties label every segment, the image is smooth, a rerun replaces the demo (or an
earlier version's) byte for byte, a folder of other things is left alone, the output is a few
lines (``--verbose``: more), what it needs is installed or named in one line. (Viewing it:
tests/server/test_view.py and test_browser.py.)"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard
from ngshard.cli import main
from ngshard.volume import create_volume


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo written by the console script: (its folder, what it printed)."""
    path = tmp_path_factory.mktemp("demo") / "demo"
    out = subprocess.run([sys.executable, "-m", "ngshard.cli", "demo", str(path), "--no-view"],
                         capture_output=True, text=True, check=True, timeout=PEER_TIMEOUT).stdout
    return path, out


def files(path) -> dict[str, tuple[int, str]]:
    """Each file's size and digest: a failed comparison names the files that differ
    instead of diffing their bytes."""
    return {str(p.relative_to(path)): (p.stat().st_size,
                                       hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(path.rglob("*")) if p.is_file()}


def skeleton(value: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(vertices, edges) of Neuroglancer's precomputed skeleton encoding."""
    n_vertices, n_edges = np.frombuffer(value[:8], "<u4").tolist()
    assert len(value) == 8 + 12 * n_vertices + 8 * n_edges
    vertices = np.frombuffer(value[8:8 + 12 * n_vertices], "<f4").reshape(-1, 3)
    return vertices, np.frombuffer(value[8 + 12 * n_vertices:], "<u4").reshape(-1, 2)


def test_console_script_demo(demo):
    """A two-scale segmentation that tensorstore reads as ngshard does, whose every segment
    has a skeleton, and a two-scale image beside it."""
    path, out = demo
    lines = out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"wrote the demo to {path}: ")
    assert lines[-1] == f"look at it:  ngshard view {path}"
    kv = ngshard.open_kv(path / "segmentation" / "skeletons")
    assert len(kv) == 5000
    info = json.loads((path / "segmentation" / "info").read_text())
    assert {k: info[k] for k in ("skeletons", "mesh", "segment_properties")} == {
        "skeletons": "skeletons", "mesh": "mesh", "segment_properties": "segment_properties"}
    assert len(info["scales"]) == 2
    assert info["type"] == "segmentation" and "sharding" in info["scales"][1]
    for scale in (0, 1):
        labels = ngshard.open_volume(path / "segmentation", scale)[:]
        theirs = ts.open({"driver": "neuroglancer_precomputed", "scale_index": scale,
                          "kvstore": {"driver": "file", "path": str(path / "segmentation")}}
                         ).result(timeout=PEER_TIMEOUT)
        np.testing.assert_array_equal(theirs.read().result(timeout=PEER_TIMEOUT), labels)
        assert set(np.unique(labels).tolist()) <= set(kv.keys_array().tolist())


def test_the_image_is_smooth_sharded_and_two_scales(demo):
    """The image layer: uint8, sharded at both scales, read alike by tensorstore; smooth (a
    step to the next voxel is small on average, never a jump across the whole range) but not
    flat, darker at the cells' membranes than inside them."""
    path, _ = demo
    info = json.loads((path / "image" / "info").read_text())
    assert info["type"] == "image" and info["data_type"] == "uint8"
    assert len(info["scales"]) == 2 and all("sharding" in s for s in info["scales"])
    for scale in (0, 1):
        image = ngshard.open_volume(path / "image", scale)[:]
        theirs = ts.open({"driver": "neuroglancer_precomputed", "scale_index": scale,
                          "kvstore": {"driver": "file", "path": str(path / "image")}}
                         ).result(timeout=PEER_TIMEOUT)
        np.testing.assert_array_equal(theirs.read().result(timeout=PEER_TIMEOUT), image)
    image = ngshard.open_volume(path / "image")[..., 0].astype(int)
    assert image.std() > 15 and len(np.unique(image)) > 100
    steps = np.abs(np.diff(image, axis=0))
    assert steps.mean() < 8 and steps.max() < 80
    labels = ngshard.open_volume(path / "segmentation")[..., 0]
    membrane = np.zeros(labels.shape, bool)
    membrane[:-1] |= labels[:-1] != labels[1:]
    assert image[membrane].mean() < image[~membrane].mean() - 30


def test_skeletons_run_through_their_own_segments(demo):
    """Every vertex of a segment's skeleton is a voxel of that segment (the vertices are
    voxel centres chosen among its voxels, so all of them, not most), and the skeleton spans
    most of the segment; the skeletons of IDs not in the volume stay inside its bounds. All
    are chains."""
    path, _ = demo
    vol = ngshard.open_volume(path / "segmentation")
    labels, res = vol[:][..., 0], np.array(vol.resolution)
    segments = np.unique(labels)
    assert len(segments) >= 290  # of 300 cells, nearly all have voxels
    keys, vertices = [], []
    for key, value in ngshard.open_kv(path / "segmentation" / "skeletons").items():
        v, edges = skeleton(value)
        assert len(v) >= 2 and len(edges) == len(v) - 1, key
        assert (edges[:, 0] == np.arange(len(edges))).all() and \
            (edges[:, 1] == edges[:, 0] + 1).all(), key
        keys.append(key)
        vertices.append(v)
    owner = np.repeat(np.array(keys, np.uint64), [len(v) for v in vertices])
    voxels = np.floor(np.concatenate(vertices) / res).astype(np.int64)
    assert len(set(keys)) == 5000 and np.isin(segments, owner).all()
    assert ((voxels >= 0) & (voxels < labels.shape)).all()
    inside = np.isin(owner, segments)
    np.testing.assert_array_equal(labels[tuple(voxels[inside].T)], owner[inside])

    # along the cell, not bunched in one spot: a chain across its long axis spans most of
    # its bounding box's diagonal (74% to 96% in this data)
    which = np.searchsorted(segments, labels).ravel()
    size = np.zeros((len(segments), 3))
    for d, n in enumerate(labels.shape):
        coord = np.broadcast_to(np.arange(n).reshape([-1 if i == d else 1 for i in range(3)]),
                                labels.shape).ravel()
        lo, hi = np.full(len(segments), n), np.full(len(segments), -1)
        np.minimum.at(lo, which, coord)
        np.maximum.at(hi, which, coord)
        size[:, d] = hi - lo + 1
    diagonal = dict(zip(segments.tolist(), np.linalg.norm(size * res, axis=1)))
    for key, v in zip(keys, vertices):
        if key in diagonal:
            assert np.linalg.norm(np.ptp(v, axis=0)) > 0.5 * diagonal[key], key

def test_verbose_describes_every_layer(demo, tmp_path, capsys):
    """--verbose: each layer's description too (the store figures the quiet run omits)."""
    path = tmp_path / "demo"
    shutil.copytree(demo[0], path)
    assert main(["demo", str(path), "--no-view", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "keys         5000" in out and "2 scale(s)" in out and len(out.splitlines()) > 40
    for name in ("image", "segmentation", "skeletons", "mesh", "segment_properties",
                 "synapses"):
        assert f"\n{name} (" in out, name


def test_meshes_wrap_their_segments(demo):
    """Every segment has a sharded multi-resolution mesh made by ngshard.mesh from the
    segmentation's second scale: it spans the segment's voxels exactly (the cells are
    constant over 4 x 4 x 4 voxel blocks, which that scale keeps)."""
    path, _ = demo
    meshes = ngshard.open(path / "segmentation" / "mesh")
    assert meshes.info["sharding"]["data_encoding"] == "raw"
    vol = ngshard.open_volume(path / "segmentation")
    labels, res = vol[:][..., 0], np.array(vol.resolution)
    segments = np.unique(labels)
    assert set(segments.tolist()) == set(meshes.keys_array().tolist())
    for segment in segments[:: len(segments) // 8].tolist():
        voxels = np.argwhere(labels == segment)
        lo, hi = voxels.min(axis=0) * res, (voxels.max(axis=0) + 1) * res
        fine = meshes.get(segment, lod=0)
        np.testing.assert_allclose(fine.vertices.min(axis=0), lo, atol=0.1)
        np.testing.assert_allclose(fine.vertices.max(axis=0), hi, atol=0.1)


def test_synapses_lie_between_the_cells_they_relate(demo):
    """Point annotations on a membrane along x: the voxels either side of the point belong
    to its two related cells (one presynaptic, one postsynaptic); each has a score in [0, 1)
    and a kind; the segment properties label every segment, tag the connected ones, and
    the segmentation's info attaches them."""
    path, _ = demo
    synapses = ngshard.open(path / "synapses")
    labels = ngshard.open_volume(path / "segmentation")[:][..., 0]
    ids = synapses.keys_array()
    assert len(ids) >= 500
    connected = set()
    for i in ids[::17].tolist():
        a = synapses[i]
        point = np.asarray(a.geometry, float)
        sides = {int(labels[tuple(np.floor(point + [dx, 0, 0]).astype(int))])
                 for dx in (-0.5, 0.5)}
        pre, post = (a.relationships[r] for r in ("pre_synaptic_cell", "post_synaptic_cell"))
        assert sides == {pre[0], post[0]} and pre[0] != post[0], (i, a)
        assert 0 <= a.properties["score"] < 1 and a.properties["kind"] in (0, 1)
        connected |= sides
    props = ngshard.open(path / "segmentation" / "segment_properties")
    segments = set(np.unique(labels).tolist())
    assert set(props.ids.tolist()) == segments
    for segment in connected:
        entry = props[segment]
        assert entry["label"].startswith("cell ") and "connected" in entry["tags"]


def test_rerun_replaces_the_demo_byte_for_byte(demo, tmp_path, capsys):
    """A rerun into a demo's folder replaces it: the same files, byte for byte, and no
    garbage in any shard; so does a rerun into one that a killed run left half written."""
    first, _ = demo
    path = tmp_path / "demo"
    shutil.copytree(first, path)
    assert main(["demo", str(path), "--no-view"]) == 0
    assert files(path) == files(first)
    capsys.readouterr()
    stores = []
    for layer in ("image", "segmentation"):
        assert main(["info", str(path / layer), "--json"]) == 0
        stores += json.loads(capsys.readouterr().out)["stores"].values()
    assert main(["info", str(path / "segmentation" / "skeletons"), "--json"]) == 0
    stores.append(json.loads(capsys.readouterr().out))
    assert len(stores) == 5 and all(s["garbage_bytes"] == 0 for s in stores)
    assert main(["info", str(path / "segmentation")]) == 0
    garbage = [line for line in capsys.readouterr().out.splitlines() if "garbage" in line]
    assert len(garbage) == 2 and all("garbage      0.0%" in line for line in garbage)

    (path / "segmentation" / "skeletons" / "3.shard").unlink()
    (path / "segmentation" / "skeletons" / ".3.shard~1@host~0f.tmp").write_bytes(b"partial")
    (path / "image" / "8_8_40" / ".0.shard~1@host~0f.tmp").write_bytes(b"partial")
    assert main(["demo", str(path), "--no-view"]) == 0
    assert files(path) == files(first)


def test_rerun_replaces_an_earlier_versions_demo(demo, tmp_path):
    """Earlier versions wrote the segmentation at the top of the folder (a marked info, its
    scales and skeletons there): a rerun replaces that too, leaving only today's layout."""
    first, _ = demo
    path = tmp_path / "old"
    shutil.copytree(first / "segmentation", path,
                    ignore=shutil.ignore_patterns("mesh", "segment_properties"))  # not then
    assert json.loads((path / "info").read_text())["ngshard_demo"]
    assert main(["demo", str(path), "--no-view"]) == 0
    assert files(path) == files(first)


def test_a_folder_of_other_things_is_refused_without_force(demo, tmp_path, capsys):
    """Another layer (here in the demo's own scale folder) and other files: refused, with
    nothing written; with --force, the demo's files replace that layer's, the rest stays."""
    path = tmp_path / "mine"
    with create_volume(path, dtype="uint8", shape=(64, 64, 64), resolution=(8, 8, 40),
                       sharding="auto") as vol:  # another layer in the demo's scale folder
        vol[:] = 7
    (path / "notes.txt").write_text("mine")
    before = files(path)
    assert main(["demo", str(path), "--no-view"]) == 1
    captured = capsys.readouterr()
    assert not captured.out and captured.err.count("\n") == 1
    assert captured.err.startswith("ngshard: error: ") and str(path) in captured.err
    assert "--force" in captured.err
    assert files(path) == before  # nothing written, nothing removed

    assert main(["demo", str(path), "--force", "--no-view"]) == 0
    after = files(path)
    # only the demo's own files are replaced
    assert after.pop("notes.txt") == (4, hashlib.sha256(b"mine").hexdigest())
    assert after == files(demo[0])


def test_without_the_viewer_it_says_how_to_get_it(demo, tmp_path, capsys, monkeypatch):
    """A fresh machine with nothing but Python: the demo is written, one line says what to
    install for the viewer, and the exit status is 0. (The data is the fixture's, copied:
    writing it is tested above.)"""
    import ngshard.demo

    def copy_demo(path, force=False):
        shutil.copytree(demo[0], path)
        return {"image": f"{path}/image", "segmentation": f"{path}/segmentation",
                "skeletons": f"{path}/segmentation/skeletons"}

    monkeypatch.setattr(ngshard.demo, "make_demo", copy_demo)
    monkeypatch.setitem(sys.modules, "neuroglancer", None)  # import neuroglancer fails
    assert main(["demo", str(tmp_path / "d"), "--no-install"]) == 0
    captured = capsys.readouterr()
    last = captured.out.strip().splitlines()[-1]
    assert "pip install 'ngshard[demo]'" in last and str(tmp_path / "d") in last
    assert not captured.err
    assert (tmp_path / "d" / "image" / "info").exists()
    assert main(["view", str(tmp_path / "d")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'ngshard[view]'" in err


def test_what_the_demo_needs_is_installed_by_one_command(tmp_path, capsys, monkeypatch):
    """The demo's needs are the ``demo`` extra, which the README's demo command installs;
    what is missing is named (``missing``), installed by the demo unless --no-install, and
    without the meshing packages the demo refuses in one line before writing anything."""
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python 3.11

    from ngshard.cli.demo import NEEDS, missing

    root = Path(__file__).parents[2]
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert set(NEEDS.values()) == set(extras["demo"]) and set(extras["demo"]) <= \
        set(extras["test"])
    readme = (root / "README.md").read_text()
    assert "pip install -e '.[demo]' && .venv/bin/ngshard demo" in readme
    assert missing() == []
    monkeypatch.setitem(sys.modules, "zmesh", None)
    monkeypatch.setitem(sys.modules, "neuroglancer", None)
    assert missing() == ["zmesh>=1.7", "neuroglancer>=2.40"]
    assert missing(view=False) == ["zmesh>=1.7"]
    assert main(["demo", str(tmp_path / "d"), "--no-install", "--no-view"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "zmesh" in err and "pip install 'ngshard[demo]'" in err
    assert not (tmp_path / "d").exists()
