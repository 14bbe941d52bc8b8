"""The short form of tools/fuzz.py: a few thousand damaged shards and chunks read by ngshard and
tensorstore must agree (or differ only in the classified, deliberate ways), with no foreign
exception and memory within the bound. The long run is ``python tools/fuzz.py --cases 100000``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from peers import PEER_TIMEOUT

pytest.importorskip("tensorstore")

CASES = 2000

# The run is one fixture of a few minutes on a shared 2-core machine: the suite's 300 s per
# test would cut it short (a hang still ends: every tensorstore wait has PEER_TIMEOUT).
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def summary():
    # importable by name (tools/ on the path): the run's spawned processes import it again
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
    fuzz = importlib.import_module("fuzz")
    fuzz.fuzz_reads.PEER_TIMEOUT = PEER_TIMEOUT
    return fuzz.run_parallel(seed=20240607, cases=CASES, start=0, jobs=2)


def test_ngshard_agrees_with_tensorstore_on_damaged_stores(summary):
    assert summary.cases == CASES
    kinds = " ".join(summary.by_kind)
    assert "kv" in kinds and "sharded" in kinds and "png" in kinds, summary.by_kind
    assert summary.reads["both error"] > CASES and summary.reads["equal"] > CASES
    assert not summary.mismatches, "\n".join(summary.mismatches[:20])
    assert not any(v.startswith(("foreign", "memory")) for v in summary.case_outcomes)
