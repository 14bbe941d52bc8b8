"""A process pool the user made (forked after ngshard's thread pools ran in this process)
runs conversion tasks: each forked worker gets thread pools of its own (the inherited ones
have no threads and would hang every task)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from peers import PEER_TIMEOUT

import ngshard

SRC = str(Path(ngshard.__file__).resolve().parent.parent)
SCRIPT = """
import multiprocessing, sys
from concurrent.futures import ProcessPoolExecutor
import numpy as np, zarr
import ngshard
from ngshard.threads import pmap

src, dst = sys.argv[1:]
zarr.create_array(store=src, shape=(32, 32, 64), chunks=(16, 16, 16), dtype="uint8")[...] = 7
pmap(abs, range(100))  # this process's thread pools have threads now
with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
    stats = ngshard.convert(src, dst, executor=pool, progress=False)
assert (ngshard.open_volume(dst)[...] == 7).all() and stats["run"] == stats["tasks"]
"""


def test_forked_user_pool(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "src.zarr"),
                          str(tmp_path / "out")], capture_output=True, text=True,
                         timeout=PEER_TIMEOUT, env=dict(os.environ, PYTHONPATH=SRC))
    assert out.returncode == 0, out.stderr
