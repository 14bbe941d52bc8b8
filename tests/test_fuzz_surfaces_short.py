"""The short form of tools/fuzz_surfaces.py: damaged zarr v2/v3 arrays, volumes, skeletons,
meshes (multi-resolution and legacy), annotations and segment properties, read by ngshard
in memory-limited children: no foreign exception, hang, crash, escape from the dataset, value
differing from tensorstore or zarr-python, or peak memory past 64 MiB + 4x the input. The long
run is ``python tools/fuzz_surfaces.py --cases 10000``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorstore")

CASES = 15  # per surface


@pytest.fixture(scope="module")
def result():
    tools = Path(__file__).resolve().parent.parent / "tools"
    sys.path.insert(0, str(tools))
    spec = importlib.util.spec_from_file_location("fuzz_surfaces", tools / "fuzz_surfaces.py")
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    return fuzz, fuzz.run(list(fuzz.SURFACES), seed=20261126, cases=CASES, jobs=2)


def test_every_surface_holds(result):
    fuzz, r = result
    assert set(r["counts"]) == set(fuzz.SURFACES)
    assert all(c["cases"] == CASES for c in r["counts"].values()), r["counts"]
    assert sum(c["ngshard errors"] for c in r["counts"].values()) > CASES  # damage was seen
    assert not r["failures"], fuzz.report(r) + "\n" + "\n".join(map(str, r["failures"][:10]))
