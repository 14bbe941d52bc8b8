"""add_scale writes the data first and the info last: a process SIGKILLed at any moment of it
leaves a layer that tensorstore and ngshard read without error, every scale its info names
whole (the old coarse scale untouched, or the new one complete), and a rerun with
``overwrite=True`` finishes the job.

The killed processes are forked from a "zygote" that imported ngshard once (see
tests/sharded/test_crash.py), so each starts in milliseconds."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from scale_helpers import OTHER, add_other_scale, fine_layer, labels, tree, ts_read

import ngshard
from ngshard.volume.downsample import downsample_mode

KILLS = 8  # per case
ZYGOTE = r"""
import os, sys, traceback
import ngshard
def say(line):  # one write of a whole line: parent and child share the pipe (and print()
    sys.stdout.write(line + "\n")  # makes several writes when PYTHONUNBUFFERED is set)
    sys.stdout.flush()
for line in sys.stdin:
    path, overwrite = line.split()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            vol = ngshard.open_volume(path)
            say("go")
            vol.add_scale((2, 2, 2), **({"overwrite": True} if overwrite == "1" else {}))
            say("done")
            code = 0
        except BaseException:
            traceback.print_exc()
        os._exit(code)
    say(f"pid {pid}")
    say(f"exit {os.waitpid(pid, 0)[1]}")
"""


class Zygote:
    def __init__(self, err) -> None:
        self.stderr = open(err, "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr)

    def run(self, path, overwrite: bool, kill_after: float | None) -> tuple[int, float]:
        """add_scale at ``path`` in a fresh child, SIGKILLed ``kill_after`` seconds after it
        begins (None: never); its exit status and how long it ran."""
        self.proc.stdin.write(f"{path} {int(overwrite)}\n")
        self.proc.stdin.flush()
        pid, began = None, None
        while pid is None or began is None:
            line = self.proc.stdout.readline().split() or ["gone"]
            if line[0] == "pid":
                pid = int(line[1])
            elif line[0] == "go":
                began = time.perf_counter()
            elif line[0] in ("exit", "gone"):  # failed before it began
                return int(line[1]) if len(line) > 1 else -1, 0.0
        if kill_after is not None:
            time.sleep(max(0.0, kill_after - (time.perf_counter() - began)))
            with contextlib.suppress(ProcessLookupError):  # done already
                os.kill(pid, signal.SIGKILL)
        while (line := self.proc.stdout.readline().split() or ["exit", "-1"])[0] != "exit":
            pass
        return int(line[1]), time.perf_counter() - began

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.stderr.close()


def check(path, data, old_coarse, new_coarse) -> str:
    """Every scale the info names reads whole with tensorstore and ngshard; which state."""
    info = json.loads((path / "info").read_text())
    np.testing.assert_array_equal(ts_read(path, 0), data)
    keys = [s["key"] for s in info["scales"]]
    if keys == ["1_1_1"]:
        return "without"
    assert keys == ["1_1_1", "2_2_2"], keys
    expected = old_coarse if info["scales"][1]["sharding"] == OTHER else new_coarse
    np.testing.assert_array_equal(ts_read(path, 1), expected)
    np.testing.assert_array_equal(ngshard.open_volume(path, 1)[...][..., 0], expected)
    return "old" if expected is old_coarse else "new"


@pytest.mark.parametrize("case", ["replace other shards", "new scale"])
def test_add_scale_killed_anywhere_leaves_a_readable_layer(tmp_path, case):
    data = labels((64, 64, 64), seed=3)
    new_coarse = downsample_mode(data[..., None], (2, 2, 2))[..., 0]
    old_coarse = new_coarse[::-1].copy()  # what the replaced scale held: told apart
    template = tmp_path / "template"
    fine_layer(template, data)
    if case == "replace other shards":
        add_other_scale(template, old_coarse)
    overwrite = case == "replace other shards"
    zygote = Zygote(tmp_path / "zygote.err")
    rng = random.Random(7)
    try:
        shutil.copytree(template, tmp_path / "whole")
        status, duration = zygote.run(tmp_path / "whole", overwrite, None)
        assert status == 0, (tmp_path / "zygote.err").read_text()
        assert check(tmp_path / "whole", data, old_coarse, new_coarse) == "new"
        for i in range(KILLS):
            path = tmp_path / f"killed{i}"
            shutil.copytree(template, path)
            status, _ = zygote.run(path, overwrite, rng.uniform(0, 1.2 * duration))
            assert status in (0, signal.SIGKILL), (tmp_path / "zygote.err").read_text()
            check(path, data, old_coarse, new_coarse)
    finally:
        zygote.close()
    # whatever a kill left, a rerun told to overwrite makes the scale as a whole run did: byte
    # for byte where the kill stopped the run, the same voxels where the run had finished
    # (its info names the scale; the rerun updates that scale in place)
    finished = check(path, data, old_coarse, new_coarse) == "new"
    ngshard.open_volume(path).add_scale((2, 2, 2), overwrite=True)
    if finished:
        assert check(path, data, old_coarse, new_coarse) == "new"
    else:
        assert tree(path) == tree(tmp_path / "whole")
