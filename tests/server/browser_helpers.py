"""What the browser tests share: ``ngshard view`` run as a child process, the scripts that
read Neuroglancer's state in the page (layers, chunk statistics, panels, the mouse, the
scale bar, the display dimensions), and the checks every view must pass: the main panel
shows the x-y plane, the scale bar reads within 2x of the data's size, every layer is
ready with no error and has all its visible chunks on the GPU."""

from __future__ import annotations

import io
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

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


# Open the Annotations tab of annotation layer ``name`` in the side panel: whether its list
# is there (ui/annotations.ts: AnnotationLayerView), and the number of rows it shows (one
# .neuroglancer-annotation-list-entry per annotation listed); -1 before the layer is made, -2
# before its list is.
ANNOTATION_ROWS_JS = """(name) => {
  const managed = window.viewer.layerManager.getLayerByName(name);
  if (!managed || !managed.layer) return -1;
  window.viewer.selectedLayer.layer = managed;
  window.viewer.selectedLayer.visible = true;
  managed.layer.panels.panels[0].selectedTab.value = 'annotations';
  if (document.querySelector('.neuroglancer-annotation-layer-view') === null) return -2;
  return document.querySelectorAll('.neuroglancer-annotation-list-entry').length;
}"""
# Replace the layers by a local annotation layer ``name`` holding ``points`` (x, y, z in the
# global space, which it keeps).
LOCAL_POINTS_JS = """([name, points]) => {
  const space = window.viewer.coordinateSpace.value;
  const outputDimensions = Object.fromEntries(space.names.map(
    (n, i) => [n, [space.scales[i], space.units[i]]]));
  window.viewer.layerSpecification.restoreState([
    {type: 'annotation', name,
     source: {url: 'local://annotations', transform: {outputDimensions}},
     annotations: points.map((p, i) => ({type: 'point', id: `p${i}`, point: p}))}]);
}"""


class ViewCommand:
    """``ngshard view DIR --no-browser [options]`` running: its data URL and viewer URL,
    and what it printed until then (``printed``)."""

    def __init__(self, path, *options: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([sys.executable, "-m", "ngshard.cli", "view", str(path),
                                      "--no-browser", *options], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.printed: list[str] = []
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in self.proc.stdout],
                         daemon=True).start()
        self.data = self._wait(r"^serving .* at (http://127\.0\.0\.1:\d+\S*) ")
        self.viewer = self._wait(r"^viewer: (http://127\.0\.0\.1:\d+/v/\w+/)$")

    def _wait(self, pattern: str, timeout: float = 120) -> str:
        deadline, seen = time.monotonic() + timeout, self.printed
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


# The names of the display dimensions, in the order of the xy panel's axes.
DISPLAY_JS = """() => {
  const dd = window.viewer.navigationState.pose.displayDimensions.value;
  const names = window.viewer.coordinateSpace.value.names;
  return Array.from(dd.displayDimensionIndices).slice(0, dd.displayRank).map(i => names[i]);
}"""
# The xy panel's scale bar: metres per screen pixel, and the panel's width in pixels.
SCALE_BAR_JS = """() => {
  const p = Array.from(window.viewer.display.panels).find(p => 'sliceView' in p);
  const bar = p.scaleBars.scaleBars[0].dimensions;
  return {perPixel: bar.physicalSizePerPixel, unit: bar.physicalBaseUnit,
          label: `${bar.physicalLength} ${bar.physicalUnit}`,
          width: p.element.getBoundingClientRect().width};
}"""


def check_view(page, view: ViewCommand, names: list[str], extent_m: float) -> list[dict]:
    """The checks every view passes: layers ``names`` in this order, each ready with no
    error, every visible chunk of every source on the GPU and none failed; the xy panel
    shows x and y; its scale bar says a panel width spans within 2x of ``extent_m``
    (the data's largest x or y extent, in metres: the whole field in view). Returns the
    chunk statistics."""
    rows = wait_until_drawn(page)
    layers = page.evaluate(LAYERS_JS)
    assert [layer["name"] for layer in layers] == names, layers
    assert all(layer["ready"] and not any(layer["errors"]) for layer in layers), layers
    assert settled(rows) and not any(r["failed"] for r in rows), rows
    assert page.evaluate(DISPLAY_JS) == ["x", "y", "z"]
    bar = poll(page, SCALE_BAR_JS, lambda b: b["perPixel"] > 0, timeout=20)
    assert bar["unit"] == "m", bar
    across = bar["perPixel"] * bar["width"]
    assert extent_m / 2 < across < 2 * extent_m, (bar, extent_m)
    return rows


def loaded(rows: list[dict], url: str) -> bool:
    """Whether the chunk source at ``url`` had visible chunks, all on the GPU."""
    mine = [r for r in rows if r["url"] == url]
    return bool(mine) and all(r["visible"] > 0 and r["gpu"] == r["visible"] for r in mine)


def lit(pixels: np.ndarray) -> int:
    """Pixels that are not the 3D panel's black background."""
    return int((pixels.max(axis=2) > 40).sum())


def yellow(pixels: np.ndarray) -> int:
    """Pixels of Neuroglancer's default annotation colour."""
    r, g, b = (pixels[..., i].astype(int) for i in range(3))
    return int(((r > 200) & (g > 200) & (b < 80)).sum())
