"""The code base stays ruff clean (ruff is part of the test extra), no test or tool can wait on a
peer forever, and the layers of the code stay apart: layer kinds are known in one module, the
sharded format knows no layer."""

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

from peers import PEER_TIMEOUT

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "tools"],
                            cwd=ROOT, capture_output=True, text=True, timeout=PEER_TIMEOUT)
    assert result.returncode == 0, result.stdout + result.stderr


SRC = Path(__file__).resolve().parent.parent / "src" / "ngshard"


def _code_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of a module's code (docstrings left out), with their lines."""
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def test_only_kinds_spells_a_layer_type():
    """Layer ``@type`` strings are spelled in ngshard.kinds alone: every other module asks it
    what kind a layer is (and writes an info's ``@type`` from its constants)."""
    from ngshard import kinds

    types = {"neuroglancer_multiscale_volume", "neuroglancer_skeletons",
             "neuroglancer_multilod_draco", "neuroglancer_legacy_mesh",
             "neuroglancer_annotations_v1", "neuroglancer_segment_properties"}
    assert types == {*kinds.LAYER_TYPES, kinds.VOLUME_TYPE}
    found = [f"{path.relative_to(SRC)}:{line}: {text!r}"
             for path in sorted(SRC.rglob("*.py")) if path != SRC / "kinds.py"
             for line, text in _code_strings(ast.parse(path.read_text()))
             if any(t in text for t in types)]
    assert not found, "\n".join(found)


def test_the_sharded_package_knows_no_layers_and_no_command_line():
    """ngshard.sharded imports nothing of the layers, volumes, zarr arrays, conversions, the
    server or the command line, names no layer kind and no command-line flag."""
    above = ("layers", "volume", "zarr", "convert", "serve", "cli", "dask", "demo")
    found = []
    for path in sorted((SRC / "sharded").glob("*.py")):
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level >= 2 and \
                    (node.module or "").split(".")[0] in above:
                found.append(f"{path.name}:{node.lineno}: imports ..{node.module}")
            if isinstance(node, ast.Import):
                found += [f"{path.name}:{node.lineno}: imports {a.name}" for a in node.names
                          if a.name.startswith("ngshard.")]
        for number, line in enumerate(text.splitlines(), 1):
            if re.search(r"(?<![\w-])--[a-z]", line):
                found.append(f"{path.name}:{number}: a command-line flag: {line.strip()}")
            if re.search(r"\b(mesh|meshes|volumes?|skeletons?|annotations?|segmentation)\b",
                         line, re.IGNORECASE) and not line.startswith("from __future__"):
                found.append(f"{path.name}:{number}: a layer kind: {line.strip()}")
    assert not found, "\n".join(found)


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


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


def _private_uses(source: str) -> list[tuple[int, str]]:
    """The private names of ngshard a module's code imports or reads: a dotted name with an
    underscore-prefixed part (``ngshard._arrays``, ``from ngshard.x import _y``), or such an
    attribute of a name imported from ngshard (``kv_module._y``)."""
    tree = ast.parse(source)
    found, imported = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            dotted = [(a.name, a.asname or a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            dotted = [(f"{node.module}.{a.name}", a.asname or a.name) for a in node.names]
        else:
            continue
        for name, bound in dotted:
            if name.split(".")[0] == "ngshard":
                imported.add(bound)
                if any(_private(p) for p in name.split(".")):
                    found.append((node.lineno, name))
    members = _private_members()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and (root.id in imported or (
                    node.attr in members and root.id not in ("self", "cls", "os"))):
                found.append((node.lineno, ast.unparse(node)))
    return found


#: zarr-python's Store protocol spells these with an underscore; its own store tests use them.
ZARR_STORE_PROTOCOL = {"_is_open", "_set_many"}


@functools.cache
def _private_members() -> frozenset[str]:
    """The underscore names ngshard's classes define (methods, and attributes set on self):
    a test reading one of them off an ngshard object (``arr._plan()``) uses a private name."""
    names = set()
    for path in (ROOT / "src" / "ngshard").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.add(node.attr)
    return frozenset(n for n in names if _private(n)) - ZARR_STORE_PROTOCOL


def test_tests_use_no_private_name_of_ngshard():
    """Tests go through the public names: a private one may change or vanish in any
    refactoring, and a test of it pins the code, not the behaviour."""
    assert _private_uses("from ngshard.staged.copy import _copy_runs\n"
                         "import ngshard.sharded.kv as kv\nkv._x\nimport ngshard._arrays\n"
                         "from ngshard import errors\nerrors.NgShardError._y\n"
                         "from ngshard import __version__\narr._through()\nself._through()\n"
                         ) == [
        (1, "ngshard.staged.copy._copy_runs"), (4, "ngshard._arrays"), (3, "kv._x"),
        (6, "errors.NgShardError._y"), (8, "arr._through")]
    used = [f"{path.relative_to(ROOT)}:{line}: {name}"
            for path in sorted((ROOT / "tests").rglob("*.py"))
            for line, name in _private_uses(path.read_text())]
    assert not used, "\n".join(used)
