"""How many CPUs this process may use: the CPUs it may run on (its affinity), capped by the
cgroup's CPU quota (a container given 2 CPUs of a 64-core host sees 64 in ``os.cpu_count()``
and would oversubscribe them 32 times over). ``NGSHARD_CPUS`` overrides both. Every pool of
the package is sized from :func:`available_cpus`."""

from __future__ import annotations

import math
import os

#: The environment variable that sets the CPU count outright (a positive integer).
CPUS_VARIABLE = "NGSHARD_CPUS"


def available_cpus(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The CPUs this process may use: ``NGSHARD_CPUS`` if set, else the smaller of its CPU
    affinity and its cgroup's quota (rounded up), at least 1.

    Parameters
    ----------
    cgroup_root
        Where the cgroup filesystem is mounted (v2: ``cpu.max``; v1: ``cpu/cpu.cfs_*``).

    Returns
    -------
    int
    """
    given = os.environ.get(CPUS_VARIABLE, "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        cpus = os.cpu_count() or 1
    quota = cgroup_quota(cgroup_root)
    return max(1, min(cpus, math.ceil(quota)) if quota else cpus)


def cgroup_quota(cgroup_root: str = "/sys/fs/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in CPUs (``quota / period``), None when there
    is none (or no cgroup filesystem)."""
    for path, pair in ((f"{cgroup_root}/cpu.max", None),
                       (f"{cgroup_root}/cpu/cpu.cfs_quota_us",
                        f"{cgroup_root}/cpu/cpu.cfs_period_us")):
        try:
            with open(path) as f:
                fields = f.read().split()
            if pair is not None:
                with open(pair) as f:
                    fields += f.read().split()
        except OSError:
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = int(fields[0]), int(fields[1])
        except ValueError:
            return None
        return quota / period if quota > 0 and period > 0 else None
    return None
