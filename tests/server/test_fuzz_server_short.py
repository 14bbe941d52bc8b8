"""The short form of tools/fuzz_server.py: hostile requests against ``ngshard serve`` beside
idle and slow clients: no escape, no answer that is not HTTP, no unexpected 5xx, no hang, no
traceback, memory bounded. The long run is ``python tools/fuzz_server.py --cases 20000``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="needs FIFOs")
def test_the_server_survives_hostile_requests():
    path = Path(__file__).resolve().parents[2] / "tools" / "fuzz_server.py"
    spec = importlib.util.spec_from_file_location("ngshard_fuzz_server", path)
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    counts = fuzz.run(cases=300, seed=20260101, jobs=8, slow=40)
    assert counts["cases"] == 300
    assert counts["problems"] == 0, counts["examples"]
    assert counts["tracebacks"] == 0
    assert counts["peak MiB"] < 64 + 4 * counts["largest input MiB"]
