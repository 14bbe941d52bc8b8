"""``ngshard demo``, run as the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import tensorstore as ts

import ngshard


def test_console_script_demo(tmp_path):
    """The demo layer: a two-scale segmentation that tensorstore reads as ngshard does, whose
    every segment has a skeleton."""
    out = subprocess.run([sys.executable, "-m", "ngshard.cli", "demo", str(tmp_path / "demo")],
                         capture_output=True, text=True, check=True).stdout
    assert "keys         5000" in out and "2 scale(s)" in out
    kv = ngshard.open_kv(tmp_path / "demo" / "skeletons")
    assert len(kv) == 5000
    value = kv[int(kv.keys_array()[0])]
    n_vertices, n_edges = (int.from_bytes(value[i:i + 4], "little") for i in (0, 4))
    assert len(value) == 8 + 12 * n_vertices + 8 * n_edges and n_edges == n_vertices - 1
    info = json.loads((tmp_path / "demo" / "info").read_text())
    assert info["skeletons"] == "skeletons" and len(info["scales"]) == 2
    for scale in (0, 1):
        labels = ngshard.open_volume(tmp_path / "demo", scale)[:]
        theirs = ts.open({"driver": "neuroglancer_precomputed", "scale_index": scale,
                          "kvstore": {"driver": "file", "path": str(tmp_path / "demo")}}).result()
        np.testing.assert_array_equal(theirs.read().result(), labels)
        assert set(np.unique(labels).tolist()) <= set(kv.keys_array().tolist())
