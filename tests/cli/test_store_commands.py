"""The ngshard store commands, run in-process (the console script runs in test_demo.py)."""

from __future__ import annotations

import json

import pytest

import ngshard
from ngshard.cli import main

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=1,
                            data_encoding="gzip")
ITEMS = {0: b"zero", 5: b"", 2**64 - 1: b"max" * 100, 123456789: b"\x00\xff"}


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "kv"
    ngshard.write_kv(path, SPEC, ITEMS)
    (path / "info").write_text(json.dumps({"@type": "neuroglancer_skeletons",
                                           "sharding": SPEC.to_json()}))
    return str(path)


def test_info(store, capsys):
    assert main(["info", store]) == 0
    out = capsys.readouterr().out
    assert "keys         4" in out and "murmurhash3_x86_128" in out
    assert main(["info", store, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["keys"] == 4 and doc["sharding"] == SPEC.to_json()


def test_ls(store, capsys):
    assert main(["ls", store, "--sort"]) == 0
    assert capsys.readouterr().out.split() == [str(k) for k in sorted(ITEMS)]


def test_get_to_stdout_and_file(store, tmp_path, capsysbinary):
    assert main(["get", store, str(2**64 - 1)]) == 0
    assert capsysbinary.readouterr().out == ITEMS[2**64 - 1]
    assert main(["get", store, "0x75bcd15", "-o", str(tmp_path / "v")]) == 0
    assert (tmp_path / "v").read_bytes() == b"\x00\xff"


def test_spec_option_without_info(store, tmp_path, capsys):
    (tmp_path / "kv" / "info").unlink()
    assert main(["ls", store]) == 1
    assert "info" in capsys.readouterr().err
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(SPEC.to_json()))
    for spec in (json.dumps(SPEC.to_json()), str(spec_file)):
        assert main(["get", store, "0", "--spec", spec]) == 0
        assert capsys.readouterr().out == "zero"


@pytest.mark.parametrize("argv, message", [
    (["get", "{store}", "-1"], "bad key '-1'"),
    (["get", "{store}", "abc"], "bad key 'abc'"),
    (["get", "{store}", str(2**64)], "bad key"),
    (["ls", "{store}", "--spec", '{"@type": "neuroglancer_uint64_sharded_v1"}'], "minishard_bits"),
    (["ls", "{store}", "--spec", "/no/such/spec.json"], "No such file"),
])
def test_errors_are_one_line_with_nonzero_exit(store, capsys, argv, message):
    assert main([store if a == "{store}" else a for a in argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ngshard: error: ") and message in err and err.count("\n") == 1


def test_corrupt_shard_is_reported(store, capsys, tmp_path):
    for shard in (tmp_path / "kv").glob("*.shard"):
        shard.write_bytes(shard.read_bytes()[:20])
    assert main(["ls", store]) == 1
    assert "shorter than its" in capsys.readouterr().err


def test_put_rm_import_and_compact(store, tmp_path, capsys):
    value = tmp_path / "value"
    value.write_bytes(b"hello")
    assert main(["put", store, "42", str(value), "-q"]) == 0
    assert main(["rm", store, "0", "-q"]) == 0
    assert main(["rm", store, "0", "-q"]) == 3  # a missing key has its own status
    assert "not in" in capsys.readouterr().err
    assert main(["rm", store, "0", "5", "--force", "--plan", "-q"]) == 0
    assert "strategy append" in capsys.readouterr().out
    files = tmp_path / "files"
    files.mkdir()
    (files / "7").write_bytes(b"seven")
    (files / "0x10").write_bytes(b"sixteen")
    assert main(["import", store, str(files), "-q"]) == 0
    lines = tmp_path / "in.ndjson"
    lines.write_text('{"key": 100, "value": "AAE="}\n\n{"key": "0x65", "value": ""}\n')
    assert main(["import", store, str(lines), "-q"]) == 0
    expected = {**ITEMS, 42: b"hello", 7: b"seven", 16: b"sixteen", 100: b"\x00\x01", 101: b""}
    del expected[0], expected[5]
    assert dict(ngshard.open_kv(store).items()) == expected
    capsys.readouterr()
    assert main(["info", store]) == 0
    assert "garbage" in capsys.readouterr().out
    assert main(["compact", store, "-q"]) == 0
    assert "compacted" in capsys.readouterr().out
    assert all(s["garbage"] == 0 for s in ngshard.open_kv(store).stats())
    assert dict(ngshard.open_kv(store).items()) == expected


@pytest.mark.parametrize("line", ['{"key": 1}', "not json", '{"key": -1, "value": ""}',
                                  '{"key": 1, "value": "%%%"}'])
def test_import_rejects_bad_lines(store, tmp_path, capsys, line):
    bad = tmp_path / "bad.ndjson"
    bad.write_text(line + "\n")
    assert main(["import", store, str(bad), "-q"]) == 1
    err = capsys.readouterr().err
    assert "bad.ndjson:1" in err or "bad key '-1'" in err


def test_verify(store, tmp_path, capsys):
    assert main(["verify", store, "-q"]) == 0
    out = capsys.readouterr().out
    assert "4 keys" in out and "OK" in out
    # a key filed under the wrong shard: copy one shard file over another's name
    names = sorted(p.name for p in (tmp_path / "kv").glob("*.shard"))
    other = SPEC.shard_filename(1 - SPEC.parse_shard_filename(names[0]))
    (tmp_path / "kv" / other).write_bytes((tmp_path / "kv" / names[0]).read_bytes())
    assert main(["verify", store, "-q"]) == 1
    assert "belongs in shard" in capsys.readouterr().out


@pytest.mark.parametrize("sharding", [None, "auto"])
def test_volume_info_and_verify(tmp_path, capsys, sharding):
    from ngshard.volume import create_volume

    with create_volume(tmp_path / "vol", dtype="uint16", shape=(20, 12, 6), chunk_size=(8, 8, 4),
                       sharding=sharding) as vol:
        vol[:] = 5
    url = str(tmp_path / "vol")
    assert main(["info", url]) == 0
    out = capsys.readouterr().out
    assert "uint16" in out and "chunks (8, 8, 4)" in out
    assert ("hash identity" in out) == (sharding == "auto")
    assert main(["verify", url, "-q"]) == 0
    assert "12 chunks decoded" in capsys.readouterr().out
    scale_dir = tmp_path / "vol" / "1_1_1"
    if sharding is None:  # damage one chunk file; name a file that is no chunk
        victim = sorted(scale_dir.iterdir())[0]
        victim.write_bytes(victim.read_bytes()[:-2])
        (scale_dir / "junk").write_bytes(b"")
        expected = [victim.name, "junk: not a chunk"]
    else:  # a key past the grid
        with ngshard.open_kv(scale_dir, mode="r+") as kv:
            kv[2**40] = b"x"
        expected = ["outside the"]
    assert main(["verify", url, "-q"]) == 1
    out = capsys.readouterr().out
    assert all(e in out for e in expected)
