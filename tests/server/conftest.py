"""Fixtures: a small served tree, a server over it, and the demo data."""

from __future__ import annotations

import gzip
import json

import pytest
from wire import DATA

import ngshard

INFO = {"@type": "neuroglancer_skeletons", "vertex_attributes": []}


@pytest.fixture
def tree(tmp_path):
    """A folder to serve: ``data`` (1 KiB), ``info``, an empty file, a chunk stored only as
    its ``.gz`` twin, a file beside its twin, a sub-folder, and hidden files."""
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "data").write_bytes(DATA)
    (root / "info").write_text(json.dumps(INFO))
    (root / "empty").write_bytes(b"")
    (root / "sub" / "0-64_0-64_0-64.gz").write_bytes(gzip.compress(b"chunk" * 100))
    (root / "both").write_bytes(b"plain")
    (root / "both.gz").write_bytes(gzip.compress(b"twin"))
    (root / ".hidden").write_bytes(b"secret")
    (root / "sub" / ".secret").write_bytes(b"secret")
    return root


@pytest.fixture
def server(tree):
    with ngshard.serve(tree) as srv:
        yield srv


@pytest.fixture(scope="session")
def demo_dir(tmp_path_factory):
    """The built-in sample data, as ``ngshard demo`` writes it."""
    from ngshard.demo import make_demo

    path = tmp_path_factory.mktemp("serve-demo") / "demo"
    make_demo(path)
    return path
