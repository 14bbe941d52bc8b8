"""``ngshard serve``, ``ngshard view`` and ``ngshard demo`` as a user runs them: they print
where the data (and the viewer) are, serve until Ctrl-C or SIGTERM, and then stop cleanly
with exit status 0 and no traceback; failures to start are one line."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from ngshard.cli import main


class Running:
    """A console-script process whose output lines are read as they come."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("DISPLAY", None)
        env.pop("WAYLAND_DISPLAY", None)  # no browser is opened in any case
        self.proc = subprocess.Popen([sys.executable, "-m", "ngshard.cli", *args], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            self.out.append(line)
            if match := re.search(pattern, line):
                return match
        self.proc.kill()
        raise AssertionError(f"no {pattern!r} in {''.join(self.out)!r}; stderr: "
                             f"{self.proc.stderr.read()!r}")

    def stop(self, sig: int = signal.SIGINT) -> tuple[int, str, str]:
        """Send ``sig``; (exit status, the rest of stdout, stderr) within 20 s."""
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(20)  # a server that does not stop fails here, never hangs
        finally:
            self.proc.kill()
        err = self.proc.stderr.read()
        time.sleep(0.1)
        rest = []
        while not self.lines.empty():
            rest.append(self.lines.get())
        return code, "".join(rest), err


def fetch(url: str, headers: dict | None = None) -> tuple[int, bytes]:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                timeout=10) as r:
        return r.status, r.read()


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from ngshard.demo import make_demo

    path = tmp_path_factory.mktemp("cli-serve") / "demo"
    make_demo(path)
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_prints_sources_and_stops_cleanly(demo, sig):
    run = Running("serve", str(demo))
    base = run.wait_for(r"serving .* at (http://127\.0\.0\.1:\d+) ").group(1)
    image = run.wait_for(r"image\s+(precomputed://\S+)").group(1)
    seg = run.wait_for(r"segmentation\s+(precomputed://\S+)\s+\(segmentation; with "
                       r"skeletons, mesh, segment_properties\)")
    run.wait_for(r"synapses\s+precomputed://\S+/synapses\s+\(annotations\)")
    assert image == f"precomputed://{base}/image"
    assert seg.group(1) == f"precomputed://{base}/segmentation"
    status, body = fetch(f"{base}/image/8_8_40/0.shard", {"Range": "bytes=0-15"})
    assert status == 206 and len(body) == 16
    code, rest, err = run.stop(sig)
    assert code == 0 and rest.strip() == "stopped" and "Traceback" not in err, err
    with pytest.raises(OSError):
        fetch(f"{base}/image/info")


def test_view_prints_the_viewer_and_stops_cleanly(demo):
    pytest.importorskip("neuroglancer", reason="the view extra is not installed")
    run = Running("view", str(demo), "--no-browser")
    base = run.wait_for(r"serving .* at (http://\S+) ").group(1)
    viewer = run.wait_for(r"^viewer: (http://127\.0\.0\.1:\d+/v/\w+/)$").group(1)
    status, page = fetch(viewer)
    assert status == 200 and b"<script" in page
    assert fetch(f"{base}/segmentation/info")[0] == 200
    code, rest, err = run.stop()
    assert code == 0 and rest.strip() == "stopped" and "Traceback" not in err, err


def test_demo_writes_then_views_and_stops_cleanly(demo, tmp_path):
    """`ngshard demo` (here a rerun into a copy, to save time) writes, prints where and the
    viewer's link (nothing else), serves until Ctrl-C."""
    pytest.importorskip("neuroglancer", reason="the view extra is not installed")
    shutil.copytree(demo, tmp_path / "demo")
    run = Running("demo", str(tmp_path / "demo"), "--no-browser")
    run.wait_for(r"^wrote the demo to ")
    viewer = run.wait_for(r"^viewer: (http://\S+)$").group(1)
    assert len(run.out) == 2, run.out  # quiet: what was written where, and the link
    assert fetch(viewer)[0] == 200
    code, rest, err = run.stop()
    assert code == 0 and rest.strip() == "stopped" and "Traceback" not in err, err


def test_failures_to_start_are_one_line(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing: no such directory" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert main(["serve", str(tmp_path), "--port", str(taken.getsockname()[1])]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ngshard: error: ")
    assert main(["serve", "nosuchscheme://x"]) == 1
    assert "unknown URL scheme" in capsys.readouterr().err
