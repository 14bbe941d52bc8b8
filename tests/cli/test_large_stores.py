"""ls, info and verify on stores too large to hold: they go shard by shard (a few shards in
parallel) and show progress on a terminal."""

from __future__ import annotations

import numpy as np
import pytest

import ngshard
import ngshard.progress
from ngshard.cli import main

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=4,
                            minishard_index_encoding="gzip", data_encoding="gzip")


@pytest.fixture
def store(tmp_path):
    keys = np.arange(5000, dtype=np.uint64) * np.uint64(104729)
    ngshard.write_kv(tmp_path, SPEC, keys=keys, values=[b"v%d" % k for k in keys.tolist()])
    return tmp_path, keys


def test_ls_streams_shard_by_shard(store, capsys):
    path, keys = store
    kv = ngshard.open_kv(path)
    listed = kv.keys_array().tolist()
    assert main(["ls", str(path)]) == 0
    assert capsys.readouterr().out.split() == [str(k) for k in listed]
    # a broken last shard: the keys of the shards before it are out before the error
    last = kv.shard_names()[-1]
    before = [k for k in listed if SPEC.shard_filename(int(SPEC.locate(k)[0])) != last]
    (path / last).write_bytes(b"\xff" * 10)
    assert main(["ls", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out.split() == [str(k) for k in before]
    assert last in captured.err


def test_progress_on_a_terminal(store, capsys, monkeypatch):
    path, _ = store
    monkeypatch.setattr(ngshard.progress, "DELAY", 0)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    for argv, bar in ((["ls", str(path)], "listing"), (["info", str(path)], "reading indices"),
                      (["verify", str(path)], "verifying")):
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert bar in err and "16/16" in err, (argv, err)
        assert main([*argv, "-q"]) == 0
        assert bar not in capsys.readouterr().err


def test_verify_checks_every_shard_in_parallel(store, capsys):
    path, keys = store
    assert main(["verify", str(path)]) == 0
    assert f"16 shard(s), {len(keys)} keys" in capsys.readouterr().out
    names = ngshard.open_kv(path).shard_names()
    for name in names[3], names[11]:
        data = bytearray((path / name).read_bytes())
        data[:16] = b"\xff" * 16  # a shard index entry past the end of the file
        (path / name).write_bytes(bytes(data))
    assert main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "2 problem(s)" in out and names[3] in out and names[11] in out
