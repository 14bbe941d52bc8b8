"""The code base stays ruff clean (ruff is part of the test extra), and the layers of the code
stay apart: layer kinds are known in one module, the sharded format knows no layer."""

import ast
import re
import subprocess
import sys
from pathlib import Path


def test_ruff_clean():
    root = Path(__file__).resolve().parent.parent
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "tools"],
                            cwd=root, capture_output=True, text=True)
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
