"""The README's quick start runs as written (a new user's first paste)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def test_quick_start_key_value_block_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # noqa: S102
    ngshard = namespace["ngshard"]
    assert namespace["kv"][5] == b"five"  # the memory:// store of the block's end
    assert dict(ngshard.open_kv(tmp_path / "skeletons").items()) == {12: b"...",
                                                                    2**40 + 7: b"..."}
