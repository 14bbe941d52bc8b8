"""End to end with the real viewer: headless Chromium (the Debian package, driven by
playwright; no browser is ever downloaded) loads the viewer that ``ngshard view`` serves for
the demo data, and the test asserts what cannot pass by accident:

(a) every ``.shard`` request carried a Range header and got 206;
(b) every layer is ready, no data source has an error, and the chunk statistics show every
    visible chunk on the GPU and none failed (a server that ignores Range still reports
    "ready": readiness alone proves nothing);
(c) with the mouse over the xy panel, ``viewer.layerSelectedValues`` gives the values the demo
    arrays hold at ``viewer.mouseState.position``;
(d) a crop of the data area of the screenshot is not flat;
(e) the skeleton of a selected segment is drawn: with it alone selected and coloured magenta,
    the 3D panel (no slices there, no meshes in the demo) shows magenta pixels, and none when
    no segment is selected.

If Chromium, playwright or neuroglancer is missing, or the browser cannot start, the test is
skipped with the reason (shown by pytest's ``-ra``), never silently. Set NGSHARD_SCREENSHOT to
a path to keep the screenshot.
"""

from __future__ import annotations

import io
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import ngshard

VIEWPORT = {"width": 1024, "height": 700}

# Per chunk source: visible chunks in each state (ChunkState: GPU_MEMORY 0, FAILED 6; the
# statistics are [state][priority tier][numChunks, systemMemory, gpuMemory], VISIBLE tier 0).
STATISTICS_JS = """async () => {
  const map = await window.viewer.chunkQueueManager.getStatistics();
  const rows = [];
  for (const [source, s] of map) {
    let visible = 0;
    for (let state = 0; state < 8; ++state) visible += s[state * 9];
    const url = (source.key && source.key.parameters && source.key.parameters.url) || '';
    rows.push({type: source.RPC_TYPE_ID, url, visible, gpu: s[0], failed: s[6 * 9]});
  }
  return rows;
}"""
LAYERS_JS = """() => window.viewer.layerManager.managedLayers.map(l => ({
  name: l.name, ready: !!l.isReady(),
  errors: l.layer.dataSources.map(d => d.loadState === undefined ? 'not loaded' :
                                        (d.loadState.error === undefined ? null :
                                         String(d.loadState.error)))}))"""
PANELS_JS = """() => Array.from(window.viewer.display.panels).map(p => {
  const r = p.element.getBoundingClientRect();
  return {slice: 'sliceView' in p, box: [r.x, r.y, r.width, r.height]};
})"""
MOUSE_JS = """() => ({
  active: window.viewer.mouseState.active,
  position: Array.from(window.viewer.mouseState.position),
  values: JSON.parse(JSON.stringify(window.viewer.layerSelectedValues,
                                    (k, v) => typeof v === 'bigint' ? v.toString() : v))})"""
# Show only ``segments`` of the segmentation layer, in the colour 0xRRGGBB.
SELECT_JS = """([segments, color]) => {
  const display = window.viewer.layerManager.getLayerByName('segmentation').layer.displayState;
  const visible = display.segmentationGroupState.value.visibleSegments;
  const colors = display.segmentationColorGroupState.value.segmentStatedColors;
  visible.clear();
  colors.clear();
  for (const s of segments) {
    visible.add(BigInt(s));
    colors.set(BigInt(s), BigInt(color));
  }
}"""


class ViewCommand:
    """``ngshard view DIR --no-browser`` running: its data URL and viewer URL."""

    def __init__(self, path) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "ngshard.cli", "view", str(path),
                                      "--no-browser"], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout],
                         daemon=True).start()
        self.data = self._wait(r"^serving .* at (http://127\.0\.0\.1:\d+) ")
        self.viewer = self._wait(r"^viewer: (http://127\.0\.0\.1:\d+/v/\w+/)$")

    def _wait(self, pattern: str, timeout: float = 120) -> str:
        deadline, seen = time.monotonic() + timeout, []
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            seen.append(line)
            if match := re.search(pattern, line):
                return match.group(1)
        self.proc.kill()
        raise AssertionError(f"ngshard view printed {''.join(seen)!r}, "
                             f"stderr {self.proc.stderr.read()!r}")

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGINT)
        try:
            err = self.proc.stderr.read()
            return self.proc.wait(20), err
        finally:
            self.proc.kill()


def poll(page, script: str, done, timeout: float = 90, arg=None):
    """Evaluate ``script`` until ``done(result)``; the last result either way."""
    deadline = time.monotonic() + timeout
    while True:
        result = page.evaluate(script, arg) if arg is not None else page.evaluate(script)
        if done(result) or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def settled(rows) -> bool:
    """Every visible chunk of every source on the GPU (or failed: reported, not waited for)."""
    return bool(rows) and all(r["gpu"] + r["failed"] == r["visible"] for r in rows) and \
        sum(r["visible"] for r in rows) > 0


def wait_until_drawn(page) -> list[dict]:
    page.wait_for_function("window.viewer !== undefined && window.viewer.isReady()",
                           timeout=90_000)
    rows = poll(page, STATISTICS_JS, settled)
    page.wait_for_function("window.viewer.isReady()", timeout=30_000)
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    return rows


def crop(png: bytes, box) -> np.ndarray:
    from PIL import Image

    x, y, w, h = (int(round(v)) for v in box)
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    return image[y + 4:y + h - 4, x + 4:x + w - 4]


def magenta(pixels: np.ndarray) -> int:
    r, g, b = (pixels[..., i].astype(int) for i in range(3))
    return int(((r > 180) & (g < 90) & (b > 180)).sum())


def test_the_viewer_shows_the_demo(browser, demo_dir, tmp_path):
    started = time.monotonic()
    view = ViewCommand(demo_dir)
    page = browser.new_page(viewport=VIEWPORT)
    responses, failed = [], []
    page.on("response", lambda r: responses.append(
        (r.url, r.request.headers.get("range"), r.status)) if r.url.startswith(view.data)
        else None)
    page.on("requestfailed", lambda r: failed.append(r.url) if r.url.startswith(view.data)
            else None)
    try:
        page.goto(view.viewer)
        rows = wait_until_drawn(page)

        # (a) every shard read is a byte range, answered 206; all three stores were read
        shards = [r for r in responses if r[0].split("?")[0].endswith(".shard")]
        assert shards and all(rng and rng.startswith("bytes=") and status == 206
                              for _, rng, status in shards), shards
        read = {url.split(view.data, 1)[1].rsplit("/", 1)[0] for url, _, _ in shards}
        assert {"/image/8_8_40", "/segmentation/8_8_40", "/segmentation/skeletons"} <= read
        assert not failed and all(status < 400 for _, _, status in responses), responses

        # (b) ready, no source error, every visible chunk on the GPU, none failed
        layers = page.evaluate(LAYERS_JS)
        assert [layer["name"] for layer in layers] == ["image", "segmentation", "synapses"]
        assert all(layer["ready"] and layer["errors"] == [None] for layer in layers), layers
        assert settled(rows) and not any(r["failed"] for r in rows), rows
        for store in ("/image/8_8_40/", "/segmentation/8_8_40/", "/segmentation/skeletons/"):
            mine = [r for r in rows if r["url"] == view.data + store]
            assert mine and mine[0]["visible"] > 0 and mine[0]["gpu"] == mine[0]["visible"], \
                (store, rows)

        # (c) the values under the mouse are the demo's at the mouse position
        panels = page.evaluate(PANELS_JS)
        xy = next(p["box"] for p in panels if p["slice"])
        image = ngshard.open_volume(demo_dir / "image")[..., 0]
        labels = ngshard.open_volume(demo_dir / "segmentation")[..., 0]
        checked = 0
        for fx, fy in ((0.5, 0.5), (0.37, 0.43), (0.62, 0.3), (0.45, 0.71)):
            page.mouse.move(xy[0] + fx * xy[2], xy[1] + fy * xy[3])
            state = poll(page, MOUSE_JS, lambda s: s["active"] and
                         {"image", "segmentation"} <= set(s["values"]), timeout=20)
            position = np.array(state["position"])
            voxel = tuple(np.floor(position).astype(int).tolist())
            if np.any(np.abs(position - np.round(position)) < 1e-3) or \
                    not all(0 <= v < n for v, n in zip(voxel, image.shape)):
                continue  # on a voxel boundary, or off the volume: ambiguous
            assert voxel[2] == 64, state  # the xy panel's plane through the centre
            assert state["values"]["image"]["value"] == int(image[voxel]), (voxel, state)
            # the segment's id, with its label and tags from the segment properties
            segment = state["values"]["segmentation"]["value"]
            assert segment["key"] == str(labels[voxel]), (voxel, state)
            assert segment["label"].startswith("cell "), state
            checked += 1
        assert checked >= 2

        # (d) the data area of the screenshot is not flat
        png = page.screenshot()
        (tmp_path / "viewer.png").write_bytes(png)
        if os.environ.get("NGSHARD_SCREENSHOT"):
            shutil.copy(tmp_path / "viewer.png", os.environ["NGSHARD_SCREENSHOT"])
        data = crop(png, xy)
        grey = data.astype(float).mean(axis=2)
        assert grey.std() > 10 and len(np.unique(data.reshape(-1, 3), axis=0)) > 50

        # (e) the skeleton of a selected segment is drawn (in the 3D panel: only skeletons)
        segment = page.evaluate("() => window.viewer.state.toJSON().layers.find("
                                "l => l.type === 'segmentation').segments[0]")
        assert int(segment) in ngshard.open_kv(demo_dir / "segmentation" / "skeletons")
        perspective = next(p["box"] for p in panels if not p["slice"])
        counts = {}
        for selected in ([segment], []):
            page.evaluate(SELECT_JS, [selected, 0xFF00FF])
            wait_until_drawn(page)
            counts[len(selected)] = magenta(crop(page.screenshot(), perspective))
        assert counts[1] >= 20 and counts[0] == 0, counts
    finally:
        page.close()
        code, err = view.stop()
    assert code == 0 and "Traceback" not in err, err
    assert time.monotonic() - started < 120


def test_the_viewer_shows_zarr_arrays(browser, tmp_path):
    """Zarr arrays under the served root (a v3 array with sharding_indexed, written by
    ngshard, and a v2 array with its dot-named metadata) are found, put in the viewer's
    state as zarr sources, and drawn by Neuroglancer's own zarr reader through the server:
    inner chunks read as byte ranges of the shards (206), every layer ready, every visible
    chunk on the GPU, and the value under the mouse the array's."""
    import ngshard.zarr

    rng = np.random.default_rng(5)
    image = rng.integers(0, 255, (40, 96, 128), dtype=np.uint8)  # (z, y, x)
    v3 = ngshard.zarr.create_array(tmp_path / "em.zarr", image.shape, "uint8", (20, 32, 32),
                                   shards=(40, 64, 64), dimension_names=("z", "y", "x"))
    v3[...] = image
    zarr = __import__("zarr")
    v2 = zarr.create_array(tmp_path / "labels_v2.zarr", shape=image.shape, chunks=(20, 48, 64),
                           dtype="uint64", zarr_format=2, compressors=None,
                           attributes={"_ARRAY_DIMENSIONS": ["z", "y", "x"]})  # xarray's names
    v2[...] = image.astype(np.uint64) // 16
    view = ViewCommand(tmp_path)
    page = browser.new_page(viewport=VIEWPORT)
    responses = []
    page.on("response", lambda r: responses.append(
        (r.url, r.request.headers.get("range"), r.status, r.request.method))
        if r.url.startswith(view.data) else None)
    try:
        page.goto(view.viewer)
        rows = wait_until_drawn(page)
        # Neuroglancer asks a shard's size (HEAD), then reads its index and inner chunks
        shards = [r for r in responses if "/em.zarr/c/" in r[0] and r[3] == "GET"]
        assert shards and all(rng and rng.startswith("bytes=") and status == 206
                              for _, rng, status, _ in shards), responses
        assert any(url.endswith("/labels_v2.zarr/.zarray") and status == 200
                   for url, _, status, _ in responses), responses
        layers = page.evaluate(LAYERS_JS)
        assert sorted(layer["name"] for layer in layers) == ["em.zarr", "labels_v2.zarr"]
        assert all(layer["ready"] and layer["errors"] == [None] for layer in layers), layers
        assert settled(rows) and not any(r["failed"] for r in rows), rows

        xy = next(p["box"] for p in page.evaluate(PANELS_JS) if p["slice"])
        names = list(page.evaluate("() => window.viewer.state.toJSON().dimensions"))
        assert sorted(names) == ["x", "y", "z"], names  # both arrays on the same axes
        # a voxel many pixels wide, so the mouse lands inside one
        page.evaluate("() => { window.viewer.crossSectionScale.value = 0.05; }")
        checked = 0
        for i, centre in enumerate(((10, 20, 30), (33, 70, 100), (5, 90, 7), (25, 40, 60),
                                    (15, 60, 90), (30, 10, 120))):
            # centre the view on a voxel's centre, the mouse near the panel's centre
            page.evaluate("p => { window.viewer.position.value = Float32Array.from(p); }",
                          [centre["zyx".index(a)] + 0.5 for a in names])
            page.mouse.move(xy[0] + xy[2] / 2 + 3 * (i % 3), xy[1] + xy[3] / 2 + 2 * (i % 2))
            state = poll(page, MOUSE_JS, lambda s: s["active"] and
                         all("value" in s["values"].get(n, {})
                             for n in ("em.zarr", "labels_v2.zarr")), timeout=20)
            position = np.array([state["position"][names.index(a)] for a in "zyx"])
            voxel = tuple(np.floor(position).astype(int).tolist())
            if np.any(np.abs(position - np.round(position)) < 1e-3) or \
                    not all(0 <= v < n for v, n in zip(voxel, image.shape)):
                continue  # on a voxel boundary, or off the arrays: ambiguous
            assert state["values"]["em.zarr"]["value"] == int(image[voxel]), (voxel, state)
            assert state["values"]["labels_v2.zarr"]["value"] == str(image[voxel] // 16)
            checked += 1
        assert checked >= 2, state
    finally:
        page.close()
        code, err = view.stop()
    assert code == 0 and "Traceback" not in err, err
