"""``convert`` onto a destination that holds a layer, a zarr group or another job's unfinished
run is refused (one line, exit 1); ``--force`` replaces it, leaving no folder of the old
layer; an unfinished run of the same job still resumes without it."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from convert_helpers import (
    Interrupting,
    as_xyzc,
    read_precomputed,
    volume_data,
    zarr_python_array,
)

import ngshard
from ngshard.cli import main


def tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture
def sources(tmp_path):
    """Labels (made a 3-scale segmentation by convert --downsample) and an image."""
    labels = tmp_path / "labels.zarr"
    zarr_python_array(labels, volume_data((32, 32, 32), "uint64"), chunks=(8, 8, 8))
    image = volume_data((16, 24, 32), "uint8", seed=2)
    zarr_python_array(tmp_path / "image.zarr", image, chunks=(8, 8, 8))
    return labels, tmp_path / "image.zarr", image


def convert(src, dst, **kw):
    with ThreadPoolExecutor(2) as pool:
        return ngshard.convert(src, dst, executor=pool, progress=False, **kw)


def files(root) -> dict[str, bytes]:
    return {p: (root / p).read_bytes() for p in tree(root) if (root / p).is_file()}


def test_cli_convert_refuses_a_layer_then_force_replaces_it(tmp_path, sources, capsys):
    labels, image_src, image = sources
    dst = tmp_path / "out"
    convert(labels, dst, downsample=2, chunk_size=(8, 8, 8))
    before = files(dst)
    assert main(["convert", str(image_src), str(dst)]) == 1
    assert capsys.readouterr().err == (
        f"ngshard: error: {dst} holds a precomputed segmentation with scales 1_1_1, 2_2_2, "
        f"4_4_4: pass overwrite=True (--force) to replace it\n")
    assert files(dst) == before
    assert main(["convert", str(image_src), str(dst), "--force", "--workers", "1",
                 "-q"]) == 0
    assert {p.split("/")[0] for p in tree(dst)} == {"1_1_1", "info"}  # no orphan scale
    assert json.loads((dst / "info").read_text())["type"] == "image"
    np.testing.assert_array_equal(read_precomputed(dst)[0], as_xyzc(image, "zyx"))


def test_the_same_job_resumes_another_is_refused(tmp_path, sources):
    _, image_src, image = sources
    dst = tmp_path / "out"
    job = {"chunk_size": (8, 8, 8), "task_bytes": 8**3}
    with ThreadPoolExecutor(2) as pool, pytest.raises(RuntimeError, match="interrupted"):
        ngshard.convert(image_src, dst, executor=Interrupting(pool, 2), progress=False, **job)
    with pytest.raises(ngshard.ExistsError, match="holds a precomputed image"):
        convert(image_src, dst, chunk_size=(16, 16, 16))  # another job
    stats = convert(image_src, dst, **job)  # the same: resumed, no overwrite needed
    assert stats["skipped"] == 2 and stats["run"] == stats["tasks"] - 2
    np.testing.assert_array_equal(read_precomputed(dst)[0], as_xyzc(image, "zyx"))


def test_a_destination_overlapping_the_source_is_refused(tmp_path, sources):
    labels, _, _ = sources
    before = files(labels)
    for dst in (labels, tmp_path):
        with pytest.raises(ngshard.SpecError, match="overlap"):
            convert(labels, dst, overwrite=True)
    assert files(labels) == before


def test_convert_to_zarr_refuses_a_group_then_replaces_it(tmp_path, sources):
    labels, image_src, _ = sources
    convert(labels, tmp_path / "seg", downsample=2, chunk_size=(8, 8, 8))
    convert(image_src, tmp_path / "img", chunk_size=(8, 8, 8))
    convert(tmp_path / "seg", tmp_path / "z")
    assert {p.split("/")[0] for p in tree(tmp_path / "z")} == {"s0", "s1", "s2", "zarr.json"}
    with pytest.raises(ngshard.ExistsError, match="z holds a zarr v3 group"):
        convert(tmp_path / "img", tmp_path / "z")
    convert(tmp_path / "img", tmp_path / "z", overwrite=True)
    assert {p.split("/")[0] for p in tree(tmp_path / "z")} == {"s0", "zarr.json"}
