"""The meshes and skeletons ngshard makes from a segmentation, drawn by the real viewer: a
segmentation made here (a sphere and a tube) is meshed and skeletonized by ``ngshard.mesh``
and ``ngshard.skeletonize``, served by ``ngshard view``; with each segment alone selected and
coloured magenta, its mesh fragments and its skeleton are on the GPU (none failed) and the 3D
panel shows magenta pixels, and none with no segment selected. Every mesh and skeleton shard
read is a byte range answered 206.

Skipped, with the reason, where Chromium, playwright or neuroglancer is missing."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from browser_helpers import (
    PANELS_JS,
    SELECT_JS,
    STATISTICS_JS,
    VIEWPORT,
    ViewCommand,
    crop,
    magenta,
    poll,
    settled,
    wait_until_drawn,
)

import ngshard

sys.path.insert(0, str(Path(__file__).parent.parent / "pipelines"))
from segment_helpers import SPHERE, TUBE, blobs, write_segmentation  # noqa: E402

pytest.importorskip("zmesh")
pytest.importorskip("kimimaro")


def test_the_viewer_draws_made_meshes_and_skeletons(browser, tmp_path):
    root = tmp_path / "served"
    labels = blobs((64, 48, 40))
    labels[(labels != SPHERE) & (labels != TUBE)] = 0
    seg = write_segmentation(root / "segmentation", labels, chunk=(32, 32, 32))
    with ThreadPoolExecutor(2) as pool:
        ngshard.mesh(seg, box=32, executor=pool, progress=False)
        ngshard.skeletonize(seg, box=32, executor=pool, progress=False)
    view = ViewCommand(root)
    page = browser.new_page(viewport=VIEWPORT)
    responses = []
    page.on("response", lambda r: responses.append(
        (r.url, r.request.headers.get("range"), r.status)) if r.url.startswith(view.data)
        else None)
    try:
        page.goto(view.viewer)
        wait_until_drawn(page)
        perspective = next(p["box"] for p in page.evaluate(PANELS_JS) if not p["slice"])
        counts = {}
        for name, selected in (("sphere", [str(SPHERE)]), ("tube", [str(TUBE)]),
                               ("none", [])):
            page.evaluate(SELECT_JS, [selected, 0xFF00FF])
            wait_until_drawn(page)
            rows = poll(page, STATISTICS_JS, settled)
            assert not any(r["failed"] for r in rows), rows
            if selected:
                for kind in ("mesh/MultiscaleFragmentSource", "precomputed/SkeletonSource"):
                    mine = [r for r in rows if r["type"] == kind]
                    assert mine and 0 < mine[0]["visible"] == mine[0]["gpu"], (name, rows)
            counts[name] = magenta(crop(page.screenshot(), perspective))
        assert counts["sphere"] >= 200 and counts["tube"] >= 50 and counts["none"] == 0, \
            counts
        shards = [r for r in responses if r[0].split("?")[0].endswith(".shard")]
        read = {url.split(view.data, 1)[1].rsplit("/", 1)[0] for url, _, _ in shards}
        assert {"/segmentation/mesh", "/segmentation/skeletons"} <= read, read
        assert all(rng and rng.startswith("bytes=") and status == 206
                   for _, rng, status in shards), shards
    finally:
        page.close()
        code, err = view.stop()
    assert code == 0 and "Traceback" not in err, err
