"""The code base stays ruff clean (ruff is part of the test extra)."""

import subprocess
import sys
from pathlib import Path


def test_ruff_clean():
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "tools"],
                            cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
