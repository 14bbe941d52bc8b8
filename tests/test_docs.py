"""The documentation runs as written: every code block of README.md, BENCHMARKS.md,
CONTRIBUTING.md and docs/**/*.md, page by page, in order, in a fresh folder holding the demo's
data (what `ngshard demo --no-view` writes, as the docs tell a reader to make first); the site
builds with MkDocs in strict mode (a griffe warning about a docstring fails it); the CLI pages
match `ngshard <command> --help`; every public name has its entry in the API reference.

Blocks: ```python runs in one namespace per page (``__name__ == "__main__"``, as a script);
```sh runs each line, every one an `ngshard` command (run in this process, as the console
script does; exit status 0); ```text and ```json are output or file contents, not run. A block
that needs what a test cannot have (a network, a browser, a cluster, a fresh venv, a server
that runs until Ctrl-C) is preceded by ``<!-- skip: why -->``.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import os
import pkgutil
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from peers import PEER_TIMEOUT

import ngshard
import ngshard.types
import ngshard.zarr
from ngshard.cli import main

ROOT = Path(__file__).parents[1]
# the site includes BENCHMARKS.md and CONTRIBUTING.md (docs/benchmarks.md, docs/contributing.md)
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "CONTRIBUTING.md",
         *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?:<!-- skip: (?P<skip>[^\n]*?) -->\n)?```(?P<lang>[a-z]*)\n"
                   r"(?P<code>.*?)^```$", re.M | re.S)
RUN, SHOWN = {"python", "sh"}, {"text", "json"}
MAX_SKIPPED = 12  # blocks a test cannot run stay few


def blocks(page: Path) -> list[tuple[str, str, str | None, int]]:
    """(language, code, skip reason or None, line) of each fenced block of ``page``."""
    text = page.read_text()
    return [(m["lang"], m["code"], m["skip"], text.count("\n", 0, m.start("code")) + 1)
            for m in FENCE.finditer(text)]


def shell_commands(code: str) -> list[list[str]]:
    """The argument lists of a shell block's lines (backslash continuations joined, comments
    dropped)."""
    return [words for line in code.replace("\\\n", " ").splitlines()
            if (words := shlex.split(line, comments=True))]


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    """A folder holding ./ngshard-demo, written once by `ngshard demo --no-view`."""
    folder = tmp_path_factory.mktemp("docs-data")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["demo", str(folder / "ngshard-demo"), "--no-view"]) == 0
    return folder


def run_ngshard(argv: list[str], where: str) -> None:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with contextlib.redirect_stdout(out):
        status = main(argv)
    assert status == 0, f"{where}: `ngshard {shlex.join(argv)}` exited {status}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_code_blocks_run(page, demo_data, tmp_path, monkeypatch):
    shutil.copytree(demo_data, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    for lang, code, skip, line in blocks(page):
        where = f"{page.relative_to(ROOT)}:{line}"
        assert lang in RUN | SHOWN, f"{where}: a block needs a language: {sorted(RUN | SHOWN)}"
        if skip is not None or lang in SHOWN:
            continue
        if lang == "python":
            exec(compile(code, where, "exec"), namespace)  # noqa: S102
            continue
        for words in shell_commands(code):
            assert words[0] == "ngshard", (f"{where}: `{shlex.join(words)}` is not an ngshard "
                                           f"command: mark the block <!-- skip: why -->")
            run_ngshard(words[1:], where)


def test_skipped_blocks_are_few_and_say_why():
    skipped = [(page.relative_to(ROOT), reason) for page in PAGES
               for _, _, reason, _ in blocks(page) if reason is not None]
    assert all(len(reason) > 10 for _, reason in skipped), skipped
    assert len(skipped) <= MAX_SKIPPED, skipped


def test_no_block_escapes_the_runner():
    """Every fence the runner sees starts and ends at column 0: an indented one (inside a
    list item) would not run, so the docs have none."""
    for page in PAGES:
        fences = [m for m in re.finditer(r"^[ \t]*```", page.read_text(), re.M)]
        found = sum(1 for _ in blocks(page))
        assert len(fences) == 2 * found, f"{page.relative_to(ROOT)}: an indented or " \
                                          f"unterminated code fence"


def test_site_builds_strict(tmp_path):
    """`mkdocs build --strict`: broken links, pages missing from the nav's reach and griffe's
    docstring warnings fail it."""
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                             "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                            text=True, timeout=PEER_TIMEOUT,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "api" / "volumes" / "index.html").is_file()


def test_cli_pages_match_the_help():
    """docs/cli/ has a page per command whose help is today's (`tools/make_cli_docs.py`
    rewrites them), each with an example."""
    result = subprocess.run([sys.executable, "tools/make_cli_docs.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=PEER_TIMEOUT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_public_name_is_in_the_api_reference():
    documented = set(re.findall(r"^::: ([\w.]+)", "\n".join(
        p.read_text() for p in (ROOT / "docs" / "api").glob("*.md")), re.M))
    public = {f"ngshard.{n}" for n in ngshard.__all__}
    public |= {f"ngshard.zarr.{n}" for n in ngshard.zarr.__all__}
    public |= {"ngshard.dask.write_kv", "ngshard.dask.write_chunks"}
    public |= {"ngshard.server.Server"}  # what ngshard.serve returns
    assert public <= documented, sorted(public - documented)
    types_page = (ROOT / "docs" / "api" / "types.md").read_text()
    assert all(n in types_page for n in ngshard.types.__all__)


def test_docstring_examples_run():
    """The examples of the docstrings (the API reference shows them) pass as doctests; those
    that need a bucket are marked ``# doctest: +SKIP``."""
    tried = 0
    for module in pkgutil.walk_packages(ngshard.__path__, "ngshard."):
        if module.name.endswith("__main__"):  # runs the command line when imported
            continue
        result = doctest.testmod(importlib.import_module(module.name), report=True,
                                 optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, module.name
        tried += result.attempted
    assert tried >= 10
