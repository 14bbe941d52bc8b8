"""Missing optional packages and mistyped URLs cost one line on standard error, never a
traceback (``--debug`` shows it): exit status 1 and ``ngshard: error: <what to do>``.

Missing packages are simulated in a fresh interpreter that makes their import fail
(``sys.modules[name] = None``) before the command line runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard
from ngshard.cli import main

SRC = str(Path(ngshard.__file__).resolve().parent.parent)


def run_cli(*args: str, without: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``ngshard ARGS`` in a new interpreter where importing ``without`` fails."""
    code = ("import sys\n"
            f"for name in {list(without)!r}:\n"
            "    sys.modules[name] = None\n"
            "from ngshard.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=PEER_TIMEOUT)


def assert_one_line(args: list[str], without: tuple[str, ...] = (), *, says: list[str],
                    never: tuple[str, ...] = ()) -> None:
    """The command fails with exactly one ``ngshard: error:`` line saying ``says``; with
    ``--debug`` the traceback comes first, then the same line."""
    result = run_cli(*args, without=without)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("ngshard: error: ")
    for text in says:
        assert text in lines[0]
    for text in never:
        assert text not in lines[0]
    debug = run_cli("--debug", *args, without=without)
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.splitlines()[-1] == lines[0]


@pytest.mark.parametrize("package", ["aiohttp", "obstore"])
def test_http_without_its_packages(package):
    assert_one_line(["info", "http://127.0.0.1:9/kv"], (package,),
                    says=["http://127.0.0.1:9/kv", "pip install 'ngshard[http]'", package],
                    never=("requests",))


@pytest.mark.parametrize("url, package", [("gs://bucket/kv", "gcsfs"),
                                          ("s3://bucket/kv", "obstore"),
                                          ("az://container/kv", "obstore")])
def test_object_store_without_its_package(url, package):
    assert_one_line(["ls", url], (package,),
                    says=[url, "pip install 'ngshard[cloud]'", package])


def test_mistyped_scheme():
    assert_one_line(["info", "htp://x"], says=["htp://x", "unknown URL scheme 'htp'"])


@pytest.fixture(scope="module")
def jpeg_volumes(tmp_path_factory) -> dict[str, Path]:
    """An unsharded and a sharded jpeg volume (written with Pillow, which is installed)."""
    root = tmp_path_factory.mktemp("jpeg")
    out = {}
    for name, sharding in (("unsharded", None), ("sharded", "auto")):
        vol = ngshard.create_volume(root / name, dtype="uint8", shape=(64, 64, 8),
                                    chunk_size=(32, 32, 8), encoding="jpeg", sharding=sharding)
        vol[:] = np.full((64, 64, 8, 1), 7, np.uint8)
        vol.commit()
        out[name] = root / name
    return out


@pytest.mark.parametrize("kind", ["unsharded", "sharded"])
def test_verify_of_a_jpeg_volume_without_its_decoder(jpeg_volumes, kind):
    assert_one_line(["verify", "-q", str(jpeg_volumes[kind])], ("simplejpeg",),
                    says=["simplejpeg", "pip install 'ngshard[images]'"])


@pytest.mark.parametrize("command", ["info", "ls"])
def test_info_and_ls_of_a_jpeg_volume_need_no_pillow(jpeg_volumes, command):
    """They decode no chunk: they work, and say nothing on standard error."""
    result = run_cli(command, str(jpeg_volumes["sharded"]), without=("PIL",))
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and result.stdout
    assert "jpeg" in result.stdout or command == "ls"


@pytest.mark.parametrize("encoding", ["jpeg", "png"])
@pytest.mark.parametrize("sharding", [None, "auto"])
def test_create_volume_without_pillow_writes_nothing(tmp_path, monkeypatch, encoding, sharding):
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ngshard.MissingDependencyError, match=r"Pillow.*ngshard\[images\]"):
        ngshard.create_volume(tmp_path / "vol", dtype="uint8", shape=(64, 64, 8),
                              encoding=encoding, sharding=sharding)
    assert not (tmp_path / "vol" / "info").exists()
    assert not (tmp_path / "vol").exists() or not any((tmp_path / "vol").iterdir())


def test_reading_a_jpeg_volume_needs_simplejpeg_not_pillow(jpeg_volumes, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)
    vol = ngshard.open_volume(jpeg_volumes["sharded"])
    assert (vol[:8, :8, :1] > 0).all()
    monkeypatch.setitem(sys.modules, "simplejpeg", None)
    with pytest.raises(ngshard.MissingDependencyError, match="simplejpeg"):
        vol[:8, :8, :1]


def test_warnings_are_one_line_too(plain_http_server, capsys):
    """A server that ignores Range requests: the keys, and one warning line."""
    spec = ngshard.ShardingSpec(minishard_bits=1)
    ngshard.write_kv(plain_http_server.root / "kv", spec, {k: b"v" for k in range(20)})
    assert main(["ls", "--sort", f"{plain_http_server.base}/kv"]) == 0
    out, err = capsys.readouterr()
    assert out.split() == [str(k) for k in range(20)]
    assert err.splitlines() == [f"ngshard: warning: {plain_http_server.base}/kv: the server "
                                f"ignores Range requests and sends whole files; reads stay "
                                f"right, but each one downloads whole shard files"]
