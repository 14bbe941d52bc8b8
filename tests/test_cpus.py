"""The CPUs a process may use: its affinity, capped by its cgroup's quota (v2 ``cpu.max``,
v1 ``cfs_quota_us``), or ``NGSHARD_CPUS``; every pool of the package is sized from it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from peers import PEER_TIMEOUT

from ngshard.cpus import available_cpus, cgroup_quota

AFFINITY = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
    os.cpu_count()


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    monkeypatch.delenv("NGSHARD_CPUS", raising=False)


def test_cgroup_v2_quota_caps_the_affinity(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_quota(str(tmp_path)) == 1.5
    assert available_cpus(str(tmp_path)) == min(AFFINITY, 2)
    (tmp_path / "cpu.max").write_text("50000 100000\n")  # half a CPU: still one
    assert available_cpus(str(tmp_path)) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota(str(tmp_path)) is None
    assert available_cpus(str(tmp_path)) == AFFINITY


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert available_cpus(str(tmp_path)) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert available_cpus(str(tmp_path)) == AFFINITY


def test_no_cgroup_files_is_the_affinity(tmp_path):
    assert cgroup_quota(str(tmp_path / "none")) is None
    assert available_cpus(str(tmp_path / "none")) == AFFINITY


def test_override_sizes_every_pool(monkeypatch):
    monkeypatch.setenv("NGSHARD_CPUS", "3")
    assert available_cpus() == 3
    code = ("import ngshard.threads as t, ngshard.pipelines.executors as e; "
            "p = e.local_pool(); print(t.WORKERS, p._max_workers); p.shutdown()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "NGSHARD_CPUS": "5"}, timeout=PEER_TIMEOUT)
    assert out.stdout.split() == ["5", "5"], out.stderr
