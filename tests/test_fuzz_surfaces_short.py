"""The short form of tools/fuzz_surfaces.py: damaged zarr v2/v3 arrays, volumes, skeletons,
meshes (multi-resolution and legacy), annotations and segment properties, read by ngshard
in memory-limited children: no foreign exception, hang, crash, escape from the dataset, value
differing from tensorstore, zarr-python, cloud-volume (in its long-lived child) or the spec's
decoding of segment properties, or peak memory past 64 MiB + 4x the input. The long run is
``python tools/fuzz_surfaces.py --cases 10000``."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from peers import PEER_TIMEOUT, peer_python

pytest.importorskip("tensorstore")

CASES = 15  # per surface
TOOLS = Path(__file__).resolve().parent.parent / "tools"


def tool(name: str):
    sys.path.insert(0, str(TOOLS))
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def result():
    os.environ["NGSHARD_PEER_PYTHON"] = peer_python()  # the workers' cloud-volume child
    fuzz = tool("fuzz_surfaces")
    return fuzz, fuzz.run(list(fuzz.SURFACES), seed=20261126, cases=CASES, jobs=2)


def test_every_surface_holds(result):
    fuzz, r = result
    assert set(r["counts"]) == set(fuzz.SURFACES)
    assert all(c["cases"] == CASES for c in r["counts"].values()), r["counts"]
    assert sum(c["ngshard errors"] for c in r["counts"].values()) > CASES  # damage was seen
    assert not r["failures"], fuzz.report(r) + "\n" + "\n".join(map(str, r["failures"][:10]))
    compared = {s for s, c in r["counts"].items() if c["compared"]}
    assert {"zarr3", "volume", "skeletons", "meshes", "segment properties"} <= compared, \
        fuzz.report(r)


def honest(root: Path, surface: str, make) -> None:
    """The first dataset of ``surface`` that cloud-volume reads (not sharded legacy meshes;
    of annotations, points: cloud-volume 12.15 raises on the other types)."""
    for group in range(40):
        make(np.random.default_rng([1, 1, group]), root)
        info = (root / "info").read_text()
        if ('"sharding"' not in info or surface != "legacy meshes") and \
                ('"point"' in info or surface != "annotations"):
            return
        shutil.rmtree(root)
        root.mkdir()
    raise AssertionError(f"no {surface} dataset that cloud-volume reads")


def test_cloud_volume_reads_what_ngshard_reads(tmp_path):
    """The oracle itself: one cloud-volume child reads honest layers of each kind as ngshard
    does, and a value that differs is told apart."""
    layers, cloudvolume = tool("fuzz_layers"), tool("fuzz_cloudvolume")
    surfaces = tool("fuzz_surfaces")
    peer = cloudvolume.CloudVolumePeer(peer_python())
    try:
        for surface in ("skeletons", "meshes", "legacy meshes", "annotations"):
            root = tmp_path / surface / "data"
            root.mkdir(parents=True)
            honest(root, surface, layers.SURFACES[surface][0])
            keys = surfaces.honest_keys(root)
            theirs = peer.read(surface, root, keys, PEER_TIMEOUT)
            ours = layers.read_layer(root, keys)
            assert len(ours.keys() & theirs.keys()) >= 2, surface
            assert surfaces.differing(ours, theirs) is None, surface
            name = sorted(ours.keys() & theirs.keys())[-1]
            ours[name] = np.asarray(ours[name]) + 1
            assert surfaces.differing(ours, theirs) == name
    finally:
        peer.close()
