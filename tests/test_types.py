"""The package type checks clean: mypy over ``src/ngshard`` at the strictness of
``[tool.mypy]`` in pyproject.toml (every body checked, no implicit Optional), so CI keeps it."""

import subprocess
import sys
from pathlib import Path

from peers import PEER_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_error_in_src():
    # the incremental cache makes a rerun about a second; a cold run parses numpy's stubs
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir",
                             str(ROOT / ".mypy_cache")],
                            cwd=ROOT, capture_output=True, text=True, timeout=PEER_TIMEOUT * 2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
