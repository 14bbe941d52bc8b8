"""Neuroglancer itself draws what ngshard writes: headless Chromium (the Debian package, driven
by playwright) loads ``ngshard view`` of a small segmentation whose info names a sharded
multi-resolution mesh layer and a sharded skeleton layer, both written by ngshard, and:

- every mesh and skeleton shard request carried a Range and got 206;
- the mesh and skeleton chunk sources have every visible chunk on the GPU, none failed;
- with one segment selected and coloured magenta, the 3D panel shows a magenta surface (far
  more pixels than a skeleton's lines give), and nothing magenta with none selected.

Skipped, with the reason, where Chromium, playwright, neuroglancer or DracoPy is missing.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import ngshard

pytest.importorskip("DracoPy")
from meshdata import sphere  # noqa: E402

SHAPE, RESOLUTION = (64, 64, 32), (8, 8, 40)
CELLS = {5: ((24, 28, 14), (14, 12, 8)), 9: ((44, 40, 18), (10, 12, 7))}  # voxels
STATS_JS = """async () => {
  const rows = [];
  for (const [source, s] of await window.viewer.chunkQueueManager.getStatistics()) {
    let visible = 0;
    for (let state = 0; state < 8; ++state) visible += s[state * 9];
    rows.push({type: source.RPC_TYPE_ID, visible, gpu: s[0], failed: s[6 * 9]});
  }
  return rows;
}"""
SELECT_JS = """([segments]) => {
  const display = window.viewer.layerManager.managedLayers[0].layer.displayState;
  const visible = display.segmentationGroupState.value.visibleSegments;
  const colors = display.segmentationColorGroupState.value.segmentStatedColors;
  visible.clear();
  colors.clear();
  for (const s of segments) { visible.add(BigInt(s)); colors.set(BigInt(s), 0xFF00FFn); }
}"""
PERSPECTIVE_JS = """() => { for (const p of window.viewer.display.panels) if (!('sliceView' in p)) {
  const r = p.element.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; } }"""


def write_tree(root) -> None:
    """A segmentation of two ellipsoid cells with their meshes (3 LODs) and skeletons, in nm."""
    x, y, z = np.meshgrid(*(np.arange(s) + 0.5 for s in SHAPE), indexing="ij")
    labels = np.zeros(SHAPE, np.uint64)
    meshes, skeletons = {}, {}
    res = np.array(RESOLUTION, float)
    for label, (c, r) in CELLS.items():
        inside = sum(((a - ci) / ri) ** 2 for a, ci, ri in zip((x, y, z), c, r)) <= 1
        labels[inside] = label
        meshes[label] = [(v * np.array(r) * res + np.array(c) * res, f)
                         for v, f in (sphere(n, 1.0, (0, 0, 0)) for n in (24, 12, 6))]
        t = np.linspace(-0.8, 0.8, 12)[:, None]
        axis = np.array(c) * res + t * np.array([r[0], 0, 0]) * res
        skeletons[label] = (axis, np.stack([np.arange(11), np.arange(1, 12)], axis=1))
    with ngshard.create_volume(root, dtype="uint64", shape=SHAPE, chunk_size=(32, 32, 32),
                               encoding="compressed_segmentation", resolution=RESOLUTION,
                               sharding="auto") as vol:
        vol[:] = labels
    ngshard.write_meshes(root / "mesh", meshes, durable=False)
    ngshard.write_skeletons(root / "skeletons", skeletons, durable=False)
    info = json.loads((root / "info").read_text())
    (root / "info").write_text(json.dumps({**info, "mesh": "mesh", "skeletons": "skeletons"}))


def start_view(path) -> tuple[subprocess.Popen, str, str]:
    """``ngshard view PATH --no-browser``: the process, its data URL and its viewer URL."""
    proc = subprocess.Popen([sys.executable, "-m", "ngshard.cli", "view", str(path),
                             "--no-browser"], env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    found: dict[str, str] = {}
    deadline = time.monotonic() + 120
    while len(found) < 2 and time.monotonic() < deadline and proc.poll() is None:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        if m := re.search(r"^serving .* at (http://127\.0\.0\.1:\d+) ", line):
            found["data"] = m.group(1)
        if m := re.search(r"^viewer: (http://127\.0\.0\.1:\d+/v/\w+/)$", line):
            found["viewer"] = m.group(1)
    if len(found) < 2:
        proc.kill()
        raise AssertionError(f"ngshard view did not start: {proc.stderr.read()!r}")
    return proc, found["data"], found["viewer"]


def drawn(page) -> list[dict]:
    """Wait until every visible chunk of every source is on the GPU (or failed)."""
    page.wait_for_function("window.viewer !== undefined && window.viewer.isReady()",
                           timeout=90_000)
    deadline = time.monotonic() + 90
    while True:
        rows = page.evaluate(STATS_JS)
        if (rows and all(r["gpu"] + r["failed"] == r["visible"] for r in rows)) or \
                time.monotonic() > deadline:
            break
        time.sleep(0.2)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    return rows


def magenta_pixels(page, box) -> int:
    from io import BytesIO

    from PIL import Image

    x, y, w, h = (int(round(v)) for v in box)
    image = np.asarray(Image.open(BytesIO(page.screenshot())).convert("RGB")).astype(int)
    r, g, b = (image[y + 4:y + h - 4, x + 4:x + w - 4, i] for i in range(3))
    # magenta at any shading: red and blue alike, well above green
    return int(((r > 2 * g + 40) & (b > 2 * g + 40) & (abs(r - b) < 40)).sum())


def test_neuroglancer_draws_ngshard_meshes_and_skeletons(browser, tmp_path):
    write_tree(tmp_path / "cells")
    proc, data, viewer = start_view(tmp_path / "cells")
    page = browser.new_page(viewport={"width": 1024, "height": 700})
    responses = []
    page.on("response", lambda r: responses.append(
        (r.url, r.request.headers.get("range"), r.status)) if r.url.startswith(data) else None)
    try:
        page.goto(viewer)
        drawn(page)
        box = page.wait_for_function(PERSPECTIVE_JS, timeout=30_000).json_value()
        counts = {}
        for selected in ([], [9], [5]):
            page.evaluate(SELECT_JS, [selected])
            rows = drawn(page)
            counts[tuple(selected)] = magenta_pixels(page, box)
        types = {r["type"] for r in rows if r["visible"]}
        assert any("mesh" in t for t in types) and any("keleton" in t for t in types), \
            [r["type"] for r in rows]
        assert all(r["gpu"] == r["visible"] and not r["failed"] for r in rows), rows
        shards = [(u, rng, s) for u, rng, s in responses if u.split("?")[0].endswith(".shard")]
        read = {u.split(data, 1)[1].rsplit("/", 1)[0] for u, _, _ in shards}
        assert {"/mesh", "/skeletons"} <= read, read
        assert all(rng and rng.startswith("bytes=") and s == 206 for _, rng, s in shards), shards
        # surfaces, not just lines (a skeleton of 12 vertices covers about a hundred pixels;
        # these cells cover 1,700 and 2,700 here), and nothing when none is selected
        assert counts[()] == 0 and counts[(5,)] > 1200 and counts[(9,)] > 700, counts
    finally:
        page.close()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        finally:
            proc.kill()
