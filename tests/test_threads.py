"""The shared thread pools: pmap from inside a pmap'd function runs on its own thread rather
than waiting on a pool whose every worker may be waiting too (a deadlock); a joining caller
takes items too once it waits, and a caller that does not join runs none; ahead fetches the
next item while the caller works on one, and runs inline on a pool's own thread."""

from __future__ import annotations

import threading
import time

import pytest

from ngshard.threads import WORKERS, ahead, bounded_map, pmap, pstart


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


def test_ahead_runs_the_next_item_while_the_caller_works_one_at_a_time():

    running, most, threads = [0], [0], set()
    lock = threading.Lock()
    started = threading.Event()

    def fn(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threads.add(threading.current_thread().name)
        if i == 1:
            started.set()  # item 1 runs while the caller still holds item 0
        with lock:
            running[0] -= 1
        return i * i

    results = []
    for r in ahead(fn, range(6)):
        if r == 0:
            assert started.wait(10)
        results.append(r)
    assert results == [i * i for i in range(6)]
    assert most[0] == 1  # never two at once
    assert any(name.startswith("ngshard-job") for name in threads)


def test_ahead_inside_jobs_finishes():

    done: list[list[int]] = []

    def job(i: int) -> int:  # every job thread runs one of these at once
        return sum(ahead(lambda j: i * j, range(10)))

    def run() -> None:
        done.append(list(bounded_map(job, range(8 * WORKERS), in_flight=4 * WORKERS)))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert done == [[i * 45 for i in range(8 * WORKERS)]]


def test_pmap_gives_the_last_items_to_whichever_thread_is_free():
    # the next-to-last item waits for the last: were the items bound to runs made beforehand
    # (both in the last run, on one thread), the last could not start until the other ended
    n = 16 * WORKERS  # runs of 4 items, had they been made beforehand
    last = threading.Event()

    def fn(i: int) -> bool:
        if i == n - 1:
            last.set()
        return last.wait(10) if i == n - 2 else True

    assert pmap(fn, range(n), min_items=2) == [True] * n


def test_pmap_stops_taking_items_after_a_failure():
    ran: list[int] = []
    n = 200

    def fn(i: int) -> int:
        ran.append(i)
        if i == 0:
            raise ValueError("item 0")
        time.sleep(0.001)
        return i

    try:
        pmap(fn, range(n), min_items=2)
    except ValueError as e:
        assert str(e) == "item 0"
    else:
        raise AssertionError("the failure was lost")
    time.sleep(0.5)  # time enough for the rest, had the other threads gone on
    assert len(ran) < n // 2  # they stopped soon after


def test_a_joining_caller_takes_items_once_it_waits():
    # the pool's threads hold their items until the caller has run one: without the caller
    # taking items, they would wait out the timeout
    me = threading.current_thread()
    caller_ran = threading.Event()
    n = 8 * WORKERS

    def fn(i: int) -> tuple[int, bool]:
        if threading.current_thread() is me:
            caller_ran.set()
            return i, True
        return i, caller_ran.wait(10)

    wait = pstart(fn, range(n), min_items=2, join=True)
    results = wait()
    assert [i for i, _ in results] == list(range(n)) and all(ok for _, ok in results)
    assert caller_ran.is_set()


def test_a_failure_in_the_callers_items_is_raised_once_the_pool_has_finished():
    me = threading.current_thread()
    started, finished = [], []
    running = threading.Event()

    def fn(i: int) -> int:
        if threading.current_thread() is me:
            raise ValueError(f"item {i}")
        started.append(i)
        running.set()
        time.sleep(0.2)  # still running when the caller fails
        finished.append(i)
        return i

    wait = pstart(fn, range(8 * WORKERS), min_items=2, join=True)
    assert running.wait(10)
    with pytest.raises(ValueError, match="item"):
        wait()
    assert started and sorted(finished) == sorted(started)  # none still running


def test_a_caller_that_does_not_join_runs_no_item():
    me = threading.current_thread()
    ran_here = []
    results = pstart(lambda i: ran_here.append(i) if threading.current_thread() is me else i,
                     range(8 * WORKERS), min_items=2)()
    assert results == list(range(8 * WORKERS)) and not ran_here
