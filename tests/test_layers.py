"""The shape of the code, read from the source: what the readers may import, and that every
budget lives in ``ngshard.limits``."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def module_path(name: str) -> Path | None:
    base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def imports_of(name: str) -> set[str]:
    """The ngshard modules ``name`` imports anywhere in its text (a package's ``__init__``
    that a ``from package.module import`` runs on the way is not counted)."""
    path = module_path(name)
    if path is None:  # a compiled module (ngshard._kernels) imports no ngshard module
        return set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("ngshard")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not target.startswith("ngshard"):
                continue
            for alias in node.names:  # `from package import module` names a module
                sub = f"{target}.{alias.name}"
                found.add(sub if module_path(sub) else target)
    return found


def reachable(name: str) -> set[str]:
    seen, todo = set(), [name]
    while todo:
        for found in imports_of(todo.pop()) - seen:
            seen.add(found)
            todo.append(found)
    return seen


WRITERS = {"ngshard.sharded.update", "ngshard.sharded.commit", "ngshard.sharded.bulk",
           "ngshard.sharded.staging", "ngshard.sharded.plan", "ngshard.zarr.writer"}


def test_the_readers_import_only_format_and_storage_code():
    for reader in ("ngshard.sharded.reader", "ngshard.zarr.reader"):
        assert not reachable(reader) & WRITERS, reader
    assert "ngshard.sharded.trailer" in reachable("ngshard.sharded.reader")
    # the pure format modules and the trailer import no storage either
    for pure in ("ngshard.sharded.format", "ngshard.sharded.trailer"):
        assert not {m for m in reachable(pure) if m.startswith("ngshard.storage")}, pure


# Module-level constants that look like budgets but are facts or one algorithm's crossover
# points, kept beside their code (see the docstring of ngshard.limits).
NOT_BUDGETS = {"MAX_KEY", "INT64_MAX", "_PNG_DEPTHS", "KEY_BYTES", "_MAPPING_KEY_BYTES",
               "_IOV_MAX", "_ZSTD_IN", "_MAX_DIGITS", "MAPPED_BYTES", "LARGE_VALUE", "_LARGE",
               "THREADED_BYTES", "BLOCK", "PARALLEL_MIN", "_PARALLEL_DECODE_BYTES",
               "MODE_BLOCK"}
BUDGET_WORDS = ("BYTES", "BATCH", "RETRIES", "TIMEOUT", "LIMIT", "PIECE", "WINDOW", "BLOCK",
                "MAX", "CACHE", "DEPTH", "SLACK", "LINGER")


def test_every_budget_is_defined_in_limits_only():
    stray = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "limits.py":
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, ast.AnnAssign) else []
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            stray += [f"{path.relative_to(SRC)}: {n}" for n in names
                      if n.upper() == n and n not in NOT_BUDGETS
                      and any(word in n for word in BUDGET_WORDS)]
    assert not stray, stray
