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
#: cloud-volume's optional codecs too, for every encoding of the fixtures (compresso, png,
#: jxl); a ``.ci/peers`` made before one was added here gets it on its next use (its
#: ``peers.txt`` says what it holds). One named by NGSHARD_PEER_PYTHON is used as it is.
PEERS = ("cloud-volume", "igneous-pipeline", "compresso", "pyspng-seunglab", "imagecodecs")


def peer_python() -> str:
    """:data:`PEER_PYTHON`, made first where it is missing, and given the :data:`PEERS` it
    lacks where it is this checkout's own (``.ci/peers``; one maker at a time)."""
    venv = Path(PEER_PYTHON).parents[1]
    stamp = venv / "peers.txt"
    ours = "NGSHARD_PEER_PYTHON" not in os.environ
    if os.path.exists(PEER_PYTHON) and (not ours or stamp.exists() and
                                        stamp.read_text() == " ".join(PEERS)):
        return PEER_PYTHON  # (one named by NGSHARD_PEER_PYTHON is used as it is)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / ".peers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = venv if os.path.exists(PEER_PYTHON) else Path(f"{venv}.part")
        if made == venv and stamp.exists() and stamp.read_text() == " ".join(PEERS):
            return PEER_PYTHON
        done = subprocess.run(
            f"{'' if made == venv else f'{sys.executable} -m venv {made} && '}"
            f"{made}/bin/python -m pip install -q {' '.join(PEERS)} && "
            f"echo -n '{' '.join(PEERS)}' > {made}/peers.txt"
            f"{'' if made == venv else f' && mv {made} {venv}'}", shell=True,
            capture_output=True, text=True, timeout=900)
        if done.returncode:
            pytest.fail(f"making the peers' venv at {venv} failed:\n{done.stderr[-4000:]}")
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
