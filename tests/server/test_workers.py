"""A server of several processes (``serve(..., processes=N)``, ``ngshard serve --processes``):
every process answers, all of them stop together - on close, on Ctrl-C, when the parent is
killed - and what cannot reach the workers is refused up front."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from wire import DATA, raw, status_of

import ngshard
from ngshard.errors import SpecError

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")

LOG_VARIABLE = "NGSHARD_TEST_WORKER_LOG"


def log_pid(request, response) -> None:
    """A log every worker can import: which process answered."""
    with open(os.environ[LOG_VARIABLE], "a") as f:
        f.write(f"{os.getpid()}\n")


def gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its reaper counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_gone(pids: list[int], timeout: float = 15) -> list[int]:
    """The pids still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if not gone(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_every_process_answers_and_all_stop_on_close(tree, tmp_path, monkeypatch):
    monkeypatch.setenv(LOG_VARIABLE, str(tmp_path / "pids"))
    srv = ngshard.serve(tree, processes=2, log=log_pid)
    try:
        pids = srv.pids
        assert len(set(pids)) == 2 and pids[0] == os.getpid() and not gone(pids[1])
        held = []
        for _ in range(64):  # kept open, so that each is a connection of its own
            s = socket.create_connection((srv.host, srv.port), 10)
            s.sendall(b"GET /data HTTP/1.1\r\nRange: bytes=1-3\r\n\r\n")
            held.append(s)
        for s in held:
            answer = b""
            while not answer.endswith(DATA[1:4]):
                answer += s.recv(4096)
            assert status_of(answer) == 206
            s.close()
        deadline = time.monotonic() + 10
        while len((tmp_path / "pids").read_text().split()) < 64 and \
                time.monotonic() < deadline:
            time.sleep(0.05)
        answered_by = (tmp_path / "pids").read_text().split()
        # in turn: half each (a listening socket shared by both gave the worker all 64)
        assert sorted(answered_by) == sorted([str(pids[0]), str(pids[1])] * 32)
    finally:
        srv.close()
    assert gone(pids[1]) and refused(srv.port)


def test_a_worker_killed_leaves_the_others_serving(tree):
    """Its turns are taken by the parent. (A connection handed over while it dies is lost
    with it: its main thread may be gone while its loop still holds the channel.)"""
    with ngshard.serve(tree, processes=2) as srv:
        os.kill(srv.pids[1], signal.SIGKILL)
        assert wait_gone(srv.pids[1:]) == []
        answers = []
        for _ in range(6):
            try:
                answers.append(status_of(raw(srv, b"GET /data HTTP/1.0\r\n\r\n")))
            except ConnectionResetError:
                answers.append(None)
        assert answers.count(None) <= 1 and answers[-4:] == [200] * 4, answers


def test_workers_stop_when_the_parent_is_killed(tree):
    code = textwrap.dedent(f"""
        import sys, time, ngshard
        srv = ngshard.serve({str(tree)!r}, processes=3)
        print(srv.port, *srv.pids, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port, parent, *workers = map(int, proc.stdout.readline().split())
        assert parent == proc.pid and len(workers) == 2
        assert status_of(raw(type("S", (), {"host": "127.0.0.1", "port": port}),
                             b"GET /data HTTP/1.0\r\n\r\n")) == 200
    finally:
        proc.kill()
        proc.wait(30)
    assert wait_gone(workers) == []
    assert refused(port)


def test_ctrl_c_in_a_terminal_stops_every_process(tree):
    """SIGINT to the whole foreground process group, as a terminal sends it: the parent
    stops its workers and says "stopped", with no traceback from any of them."""
    proc = subprocess.Popen([sys.executable, "-m", "ngshard.cli", "serve", str(tree),
                             "--processes", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().startswith("serving ")
        workers = [int(p) for p in
                   Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        assert len(workers) == 1
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0 and out.strip().endswith("stopped"), (out, err)
    assert "Traceback" not in err, err
    assert wait_gone(workers) == []


def test_what_cannot_reach_the_workers_is_refused(tree):
    with pytest.raises(SpecError, match="a log must be a function defined at the top"):
        ngshard.serve(tree, processes=2, log=lambda request, response: None)
    with pytest.raises(SpecError, match="1 for a store that is not a local folder"):
        ngshard.serve("memory://served", processes=2)
    with pytest.raises(SpecError, match="processes must be 1 or more"):
        ngshard.serve(tree, processes=0)
    with ngshard.serve("memory://served", processes=None) as srv:  # one per core: local only
        assert srv.pids == [os.getpid()]
