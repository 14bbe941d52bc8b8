"""What a fuzz case measures about its own process: peak memory growth per step."""

from __future__ import annotations

import re
import resource


class Memory:
    """Peak RSS growth during the ngshard steps of a case: /proc/self/clear_refs resets the
    high-water mark, so each step is measured on its own, not hidden by an earlier peak."""

    def __init__(self) -> None:
        try:
            self._reset()
            self.exact = True
        except OSError:
            self.exact = False
        self.growth = 0  # KiB, worst step of the current case

    @staticmethod
    def _reset() -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    @staticmethod
    def _status(field_name: str) -> int:
        with open("/proc/self/status") as f:
            return int(re.search(rf"{field_name}:\s+(\d+)", f.read()).group(1))

    def __enter__(self):
        if self.exact:
            self._reset()
            self._before = self._status("VmRSS")
        else:
            self._before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return self

    def __exit__(self, *exc) -> None:
        if self.exact:
            after = self._status("VmHWM")
        else:
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.growth = max(self.growth, after - self._before)
