"""How long a test waits on a peer (tensorstore, zarr-python, a child process) before it calls
the peer hung: every tensorstore future is waited on with ``.result(timeout=PEER_TIMEOUT)``,
every child process with ``timeout=PEER_TIMEOUT`` (tests/test_style.py checks both), and
zarr-python's synchronous calls with its ``async.timeout`` set to it (tests/conftest.py). A
peer that never answers then fails its own test with TimeoutError and the run goes on;
pytest-timeout's per-test limit (pyproject.toml) is the last resort.

A peer call of the tests takes well under a second; 120 s is a hang even on a loaded machine.
"""

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

PEER_TIMEOUT = 120

#: The Python of a venv holding the heavy peers, cloud-volume and igneous-pipeline (with
#: tinybrain, zmesh, kimimaro as igneous pins them): too heavy and too pinned for the test
#: extra, so tests run them as child processes. The first test that needs it makes it at
#: `.ci/peers` (about a minute); ``NGSHARD_PEER_PYTHON`` names another.
PEER_PYTHON = os.environ.get("NGSHARD_PEER_PYTHON",
                             str(Path(__file__).resolve().parents[1] / ".ci/peers/bin/python"))
PEERS = ("cloud-volume", "igneous-pipeline")


def peer_python() -> str:
    """:data:`PEER_PYTHON`, made first where it is missing (one maker at a time)."""
    if not os.path.exists(PEER_PYTHON):
        venv = Path(PEER_PYTHON).parents[1]
        venv.parent.mkdir(parents=True, exist_ok=True)
        with open(venv.parent / ".peers.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(PEER_PYTHON):
                made = subprocess.run(
                    f"{sys.executable} -m venv {venv}.part && {venv}.part/bin/pip install -q "
                    f"{' '.join(PEERS)} && mv {venv}.part {venv}", shell=True,
                    capture_output=True, text=True, timeout=900)
                if made.returncode:
                    pytest.fail(f"making the peers' venv at {venv} failed:\n"
                                f"{made.stderr[-4000:]}")
    return PEER_PYTHON


def run_peer(code: str, *args: object) -> subprocess.CompletedProcess:
    """Run ``code`` (``python -c``) with ``args`` in the peers' venv; its output as text. A
    failing peer fails the test with the peer's stderr."""
    done = subprocess.run([peer_python(), "-c", code, *map(str, args)], capture_output=True,
                          text=True, timeout=PEER_TIMEOUT,
                          env={**os.environ, "PYTHONPATH": ""})  # not the tests' modules
    if done.returncode:
        pytest.fail(f"the peer failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return done
