"""More processes serving one port, as nginx runs a worker per core: each runs the event
loop of ``connections.py`` on its own interpreter (one process is bound by its GIL to one
core). The parent accepts every connection and hands them in turn to itself and to each
worker over a Unix socket (a shared listening socket is raced for unevenly: a process that
wakes first takes them all), as Node's cluster module does.

The workers are started fresh (``python -c``, not forked: the parent may run threads), read
their settings from a pipe, and get their end of the channel as a descriptor. The channel is
their lifeline too: when the parent closes it, or dies in any way, the worker sees its end,
stops serving and exits. Workers ignore SIGINT from their first statement on: a Ctrl-C in a
terminal, sent to the whole foreground process group, is the parent's to handle, and it stops
them all. (They stay in the parent's session: a session of their own would be a scheduling
group of its own on Linux, given a core's share apart from the parent's.)"""

from __future__ import annotations

import contextlib
import pickle
import socket
import subprocess
import sys
import time
from typing import Any

from ..errors import NgShardError, SpecError

#: Seconds a worker may take to start (import ngshard, open the folder) on a busy machine.
_START_SECONDS = 60.0
#: Seconds a worker may take to stop before it is killed.
_STOP_SECONDS = 5.0
_PRELUDE = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "import sys, pickle; sys.path[:0] = pickle.load(sys.stdin.buffer); "
            "from ngshard.server.workers import main; main()")


class Worker:
    """A worker process (see the module docstring); ``channel`` hands it connections."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                message = pickle.dumps({**settings, "channel": theirs.fileno()})
            except (pickle.PicklingError, AttributeError, TypeError) as e:
                raise SpecError(f"serving from more than one process: the settings cannot "
                                f"be sent to the workers ({e}); a log must be a function "
                                f"defined at the top of a module") from None
            self.proc = subprocess.Popen([sys.executable, "-c", _PRELUDE],
                                         stdin=subprocess.PIPE, pass_fds=(theirs.fileno(),))
        except BaseException:
            self.channel.close()
            raise
        finally:
            theirs.close()
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):  # if it died at once, wait_ready says so
            self.proc.stdin.write(pickle.dumps(sys.path) + message)
            self.proc.stdin.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, deadline: float) -> None:
        """Wait until the worker serves (it says so over the channel).

        Raises
        ------
        NgShardError
            It exited, or did not start by ``deadline`` (``time.monotonic``).
        """
        self.channel.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            said = self.channel.recv(16)
        except OSError:
            said = b""
        if said == b"ready":
            self.channel.setblocking(False)
            return
        self.stop()
        self.join()
        raise NgShardError(f"a server worker process did not start (exit status "
                           f"{self.proc.returncode}; its error is printed above)")

    def stop(self) -> None:
        """Close the channel: the worker stops; :meth:`join` waits for it."""
        self.channel.close()

    def join(self) -> None:
        """Wait for the worker to exit, killing it if it takes too long."""
        try:
            self.proc.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_workers(n: int, settings: dict[str, Any]) -> list[Worker]:
    """``n`` workers with ``settings`` (``storage``, ``listing``, ``log``, ``base``,
    ``only``), each serving by the time this returns.

    Raises
    ------
    SpecError
        The settings cannot be sent (a log that is not a module-level function).
    NgShardError
        A worker did not start (the others are stopped).
    """
    workers: list[Worker] = []
    try:
        for _ in range(n):
            workers.append(Worker(settings))
        deadline = time.monotonic() + _START_SECONDS
        for worker in workers:
            worker.wait_ready(deadline)
    except BaseException:
        stop_workers(workers)
        raise
    return workers


def stop_workers(workers: list[Worker]) -> None:
    """Stop every worker and wait for them all."""
    for worker in workers:
        worker.stop()
    for worker in workers:
        worker.join()


def main() -> None:
    """A worker's life: read the settings, serve what the channel hands over until it
    ends."""
    from .connections import Connections
    from .files import open_files

    settings = pickle.load(sys.stdin.buffer)
    channel = socket.socket(fileno=settings.pop("channel"))
    files = open_files(settings.pop("storage"))
    front = Connections(files, channel, handed=True, **settings)
    channel.send(b"ready")
    try:
        front.wait()
    finally:
        front.close()
