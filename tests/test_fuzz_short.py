"""The short form of tools/fuzz.py: a few thousand damaged shards and chunks read by ngshard and
tensorstore must agree (or differ only in the classified, deliberate ways), with no foreign
exception and memory within the bound. The long run is ``python tools/fuzz.py --cases 100000``."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

import pytest
from peers import PEER_TIMEOUT

pytest.importorskip("tensorstore")

CASES = 2000

# The run is one fixture of a few minutes on a shared 2-core machine: the suite's 300 s per
# test would cut it short (a hang still ends: every tensorstore wait has PEER_TIMEOUT, and a
# piece whose tensorstore deadlocks past that is run again in a fresh process).
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def fuzz():
    # importable by name (tools/ on the path): the run's spawned processes import it again
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    fuzz = importlib.import_module("fuzz")
    fuzz.fuzz_reads.PEER_TIMEOUT = PEER_TIMEOUT
    return fuzz


@pytest.fixture(scope="module")
def summary(fuzz):
    return fuzz.run_parallel(seed=20240607, cases=CASES, start=0, jobs=2)


def hangs(seed: int, cases: int, start: int, beat, marker: str, times: int, workdir: str):
    """A piece whose first case hangs, without beating, in the first ``times`` processes to
    run it (counted in ``marker``), leaving a file in its ``workdir``."""
    fuzz = importlib.import_module("fuzz")
    Path(workdir, "store").write_bytes(b"x")
    if start == 0:
        with open(marker, "a+") as f:
            f.seek(0)
            tried = len(f.read())
            f.write("x")
        if tried < times:
            time.sleep(3600)
    for _ in range(cases):
        beat()
    return fuzz.Summary(cases=cases)


def test_a_piece_that_stops_beating_is_run_again_in_a_fresh_process(fuzz, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setattr(fuzz, "STALL", 3)
    cases = 2 * 20 * fuzz.GROUP  # two pieces, the first of them hangs once
    marker, work = tmp_path / "tries", tmp_path / "work"
    work.mkdir()
    s = fuzz.run_parallel(seed=1, cases=cases, start=0, jobs=2, runner=hangs,
                          marker=str(marker), times=1, workdir=str(work))
    assert s.cases == cases and marker.read_text() == "xx"
    assert not list(work.iterdir())  # every piece's folder removed, the killed one's too
    marker.unlink()
    with pytest.raises(RuntimeError, match="fuzz piece 0..1000 of seed 1 stalled twice"):
        fuzz.run_parallel(seed=1, cases=cases, start=0, jobs=2, runner=hangs,
                          marker=str(marker), times=2, workdir=str(work))
    assert not list(work.iterdir())


def test_ngshard_agrees_with_tensorstore_on_damaged_stores(summary):
    assert summary.cases == CASES
    kinds = " ".join(summary.by_kind)
    assert "kv" in kinds and "sharded" in kinds and "png" in kinds, summary.by_kind
    assert summary.reads["both error"] > CASES and summary.reads["equal"] > CASES
    assert not summary.mismatches, "\n".join(summary.mismatches[:20])
    assert not any(v.startswith(("foreign", "memory")) for v in summary.case_outcomes)
