"""The shared thread pools: pmap from inside a pmap'd function runs on its own thread rather
than waiting on a pool whose every worker may be waiting too (a deadlock)."""

from __future__ import annotations

import threading

from ngshard.threads import WORKERS, pmap


def test_pmap_inside_pmap_finishes():
    done: list[list[int]] = []

    def outer(i: int) -> int:  # every worker of the pool runs one of these at once
        return sum(pmap(lambda j: i * j, range(100), min_items=2))

    def run() -> None:
        done.append(pmap(outer, range(4 * WORKERS), min_items=1))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert done == [[i * 4950 for i in range(4 * WORKERS)]]
