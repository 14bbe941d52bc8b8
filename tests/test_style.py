"""The code base stays ruff clean (ruff is part of the test extra), and no test or tool can
wait on a peer forever."""

import ast
import subprocess
import sys
from pathlib import Path

from peers import PEER_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "tools"],
                            cwd=ROOT, capture_output=True, text=True, timeout=PEER_TIMEOUT)
    assert result.returncode == 0, result.stdout + result.stderr


def _calls(*folders: str):
    """(file, line, call) of every call in the Python files of ``folders`` of the repository."""
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call):
                    yield path.relative_to(ROOT), node.lineno, node


def test_no_peer_call_in_tests_or_tools_can_wait_forever():
    """A tensorstore future, a child process or a thread waited on without a timeout once
    hung a whole run for 22 minutes at 0 CPU (tools/fuzz.py's ``list().result()``): each
    is given one (tests/peers.py's PEER_TIMEOUT in the tests)."""
    unbounded = []
    for path, line, call in _calls("tests", "tools"):
        func = call.func
        if not isinstance(func, ast.Attribute):
            continue
        timed = call.args or any(k.arg == "timeout" for k in call.keywords)
        blocking = func.attr in ("result", "wait", "communicate")  # futures, processes, events
        child = (func.attr in ("run", "call", "check_call", "check_output")
                 and isinstance(func.value, ast.Name) and func.value.id == "subprocess")
        if (blocking and not timed) or (child and not any(k.arg == "timeout"
                                                          for k in call.keywords)):
            unbounded.append(f"{path}:{line}: .{func.attr}(...) without a timeout")
    assert not unbounded, "\n".join(unbounded)


def test_dask_clusters_of_tests_and_tools_take_no_fixed_port():
    """Two runs at once must not fight for Dask's dashboard port: ``dashboard_address=":0"``
    takes a free one (None still binds the scheduler's HTTP routes to 8787 when it is free)."""
    fixed = []
    for path, line, call in _calls("tests", "tools"):
        name = getattr(call.func, "attr", getattr(call.func, "id", None))
        if name != "LocalCluster":
            continue
        given = {k.arg: k.value for k in call.keywords}
        dashboard = given.get("dashboard_address")
        if not (isinstance(dashboard, ast.Constant) and dashboard.value == ":0"):
            fixed.append(f"{path}:{line}: LocalCluster without dashboard_address=':0'")
        port = given.get("scheduler_port")
        if port is not None and not (isinstance(port, ast.Constant) and port.value == 0):
            fixed.append(f"{path}:{line}: LocalCluster with a fixed scheduler_port")
    assert not fixed, "\n".join(fixed)
