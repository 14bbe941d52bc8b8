"""What a new user tripped over at the shell: each case answers in one line, with the exit
status a script can rely on, and the stores the commands make can be used again at once."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import ngshard
from ngshard.cli import main

RAW = ngshard.ShardingSpec(minishard_bits=1, shard_bits=1)
SPEC_JSON = json.dumps(RAW.to_json())


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("ngshard: error: ") and err.count("\n") == 1, err
    return err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == \
        f"ngshard {ngshard.__version__}"


def test_put_writes_an_info_so_later_commands_need_no_spec(tmp_path, capsys):
    store, value = str(tmp_path / "kv"), tmp_path / "v"
    value.write_bytes(b"hello")
    assert main(["put", store, "7", str(value), "--spec", SPEC_JSON, "-q"]) == 0
    assert json.loads((tmp_path / "kv" / "info").read_text()) == {"sharding": RAW.to_json()}
    assert main(["get", store, "7"]) == 0
    assert capsys.readouterr().out == "hello"
    for argv in (["ls", store], ["info", store], ["verify", store, "-q"]):
        assert main(argv) == 0


def test_write_kv_then_open_kv_needs_no_spec(tmp_path):
    ngshard.write_kv(tmp_path / "a", RAW, {1: b"one"})
    with ngshard.open_kv(tmp_path / "a", mode="r+") as kv:  # the README's sequence
        kv[2] = b"two"
    assert dict(ngshard.open_kv(tmp_path / "a").items()) == {1: b"one", 2: b"two"}
    ngshard.write_kv(tmp_path / "b", RAW, {1: b"one"}, info=False)
    assert not (tmp_path / "b" / "info").exists()
    with pytest.raises(ngshard.SpecError, match="no info file"):
        ngshard.open_kv(tmp_path / "b")


def test_a_spec_that_contradicts_the_info_is_refused(tmp_path):
    ngshard.write_kv(tmp_path, RAW, {1: b"one"})
    other = ngshard.ShardingSpec(minishard_bits=2, shard_bits=1)
    with pytest.raises(ngshard.SpecError, match="records sharding"):
        ngshard.open_kv(tmp_path, other, "r+")


@pytest.mark.parametrize("command", ["ls", "info", "verify"])
def test_reading_commands_on_nothing_fail(tmp_path, capsys, command):
    missing = str(tmp_path / "no" / "such")
    assert main([command, missing, "--spec", SPEC_JSON]) == 1
    assert "no such directory" in one_error_line(capsys)
    (tmp_path / "empty").mkdir()
    assert main([command, str(tmp_path / "empty"), "--spec", SPEC_JSON]) == 1
    assert "no shard files and no info" in one_error_line(capsys)
    ngshard.write_kv(tmp_path / "made-empty", RAW, {})  # an empty store asked for is fine
    assert main([command, str(tmp_path / "made-empty")]) == 0


def test_missing_key_has_its_own_exit_status(tmp_path, capsys):
    ngshard.write_kv(tmp_path, RAW, {1: b"one"})
    assert main(["get", str(tmp_path), "2"]) == 3
    assert "key 2 is not in" in one_error_line(capsys)
    assert main(["get", str(tmp_path), "x2"]) == 1
    assert "bad key" in one_error_line(capsys)


@pytest.mark.parametrize("text, key", [("007", 7), ("0x1F", 31), ("18446744073709551615",
                                                                 2**64 - 1)])
def test_keys_are_decimal_with_leading_zeros_or_hex(tmp_path, capsys, text, key):
    ngshard.write_kv(tmp_path, RAW, {key: b"v"})
    assert main(["get", str(tmp_path), text]) == 0
    assert capsys.readouterr().out == "v"


@pytest.mark.parametrize("text", ["7_0", "0b11", "-1", "1e3", "0x", ""])
def test_other_key_spellings_are_refused(tmp_path, capsys, text):
    ngshard.write_kv(tmp_path, RAW, {70: b"v"})
    assert main(["get", str(tmp_path), text]) == 1
    assert "bad key" in one_error_line(capsys)


def test_import_of_zero_padded_file_names(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    for name in ("0007", "0010"):
        (files / name).write_bytes(name.encode())
    assert main(["import", str(tmp_path / "kv"), str(files), "--spec", SPEC_JSON, "-q"]) == 0
    assert dict(ngshard.open_kv(tmp_path / "kv").items()) == {7: b"0007", 10: b"0010"}


def test_plan_counts_every_byte_written(tmp_path, capsys):
    value = tmp_path / "v"
    value.write_bytes(b"0123456789")
    store = tmp_path / "kv"
    assert main(["put", str(store), "5", str(value), "--spec", SPEC_JSON, "--plan", "-q"]) == 0
    out = capsys.readouterr().out
    shard = RAW.shard_filename(int(RAW.locate([5])[0][0]))
    size = os.path.getsize(store / shard)
    assert size == RAW.shard_index_size + 10 + 24  # index, value, one minishard entry
    assert f"write {size} B" in out


def test_no_progress_bars_off_a_terminal_or_for_quick_work(tmp_path, capsys):
    value = tmp_path / "v"
    value.write_bytes(b"x")
    assert main(["put", str(tmp_path / "kv"), "1", str(value), "--spec", SPEC_JSON]) == 0
    assert main(["rm", str(tmp_path / "kv"), "9", "--force"]) == 0
    assert capsys.readouterr().err == ""
    ngshard.write_kv(tmp_path / "api", RAW, {1: b"x"}, progress=True)  # quick: none shown
    assert capsys.readouterr().err == ""


def test_values_are_bytes_whatever_the_encoding(tmp_path):
    for encoding in ("raw", "gzip"):
        spec = ngshard.ShardingSpec(minishard_bits=1, shard_bits=1, data_encoding=encoding)
        ngshard.write_kv(tmp_path / encoding, spec, {3: b"three" * 10})
        kv = ngshard.open_kv(tmp_path / encoding)
        assert type(kv[3]) is bytes and type(kv.get_many([3])[3]) is bytes
        assert type(ngshard.open_kv(f"file://{tmp_path / encoding}")[3]) is bytes


@pytest.mark.parametrize("odd", [-1, 2**64, "3", 1.5, None, (1,)])
def test_membership_of_keys_the_store_cannot_hold_is_false(tmp_path, odd):
    ngshard.write_kv(tmp_path, RAW, {1: b"one"})
    kv = ngshard.open_kv(tmp_path)
    assert (odd in kv) is False
    with ngshard.open_kv(tmp_path, mode="r+") as kv:
        kv[2] = b"two"
        assert (odd in kv) is False


@pytest.fixture
def volume(tmp_path):
    """A two-scale sharded volume with appends' garbage in scale 0."""
    url = tmp_path / "vol"
    data = np.arange(32 * 32 * 16, dtype=np.uint16).reshape(32, 32, 16)
    with ngshard.create_volume(url, dtype="uint16", shape=data.shape, chunk_size=(8, 8, 8),
                               sharding="auto") as vol:
        vol[:] = data
    vol.add_scale((2, 2, 2))
    vol = ngshard.open_volume(url, mode="r+")
    vol[:8, :8, :8] = 1  # replaces a chunk: its old bytes become garbage
    vol.commit()
    return str(url), vol


def test_store_commands_accept_a_volume_root(volume, capsys):
    url, vol = volume
    capsys.readouterr()
    assert main(["ls", url]) == 0
    out = capsys.readouterr().out
    assert out.count("# ") == 2 and len(out.split("\n")) == 2 + 32 + 4 + 1
    assert main(["ls", url, "--scale", "0", "--chunks", "--sort"]) == 0
    rows = [list(map(int, line.split())) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 32 and rows[0] == [0, 0, 0, 0]
    assert all(vol.grid.morton([r[1:]])[0] == r[0] for r in rows)
    key = rows[5][0]
    assert main(["get", url, str(key)]) == 0  # scale 0 by default
    assert len(capsys.readouterr().out) > 0
    assert main(["info", url]) == 0
    out = capsys.readouterr().out
    assert "garbage" in out and "shard box" in out and "0.0% of the bytes" not in \
        out.split("scale 1")[0]
    assert main(["compact", url, "-q"]) == 0
    assert capsys.readouterr().out.count("compacted") == 2
    stores = [t for t in (ngshard.open_kv(os.path.join(url, s.key)) for s in vol.scales)]
    assert all(s["garbage"] == 0 for kv in stores for s in kv.stats())
    np.testing.assert_array_equal(ngshard.open_volume(url)[:8, :8, :8], 1)


def test_writing_commands_on_a_volume_root_need_a_scale(volume, tmp_path, capsys):
    url, vol = volume
    value = tmp_path / "v"
    value.write_bytes(b"x")
    assert main(["put", url, "1", str(value)]) == 1
    assert "give --scale" in one_error_line(capsys)
    assert main(["rm", url, "0", "--scale", "0", "-q"]) == 0
    assert 0 not in ngshard.open_kv(os.path.join(url, vol.scale.key))


def test_info_of_a_zarr_array_and_an_ome_group(tmp_path, capsys):
    """Pointed at zarr (what one would convert or serve), info describes it rather than
    asking for a sharding spec; damaged metadata is one line naming the file."""
    import ngshard.zarr

    arr = ngshard.zarr.create_array(tmp_path / "a.zarr", (10, 20, 30), "uint16", (5, 10, 10),
                                    shards=(10, 20, 30), dimension_names=("z", "y", "x"))
    arr[...] = 3
    assert main(["info", str(tmp_path / "a.zarr")]) == 0
    out = capsys.readouterr().out
    assert "zarr v3, uint16, shape (10, 20, 30)" in out and "dimensions   z, y, x" in out
    assert "(5, 10, 10) in shards of (10, 20, 30)" in out and "bytes -> zstd" in out
    with ngshard.create_volume(tmp_path / "pc", dtype="uint8", shape=(40, 30, 20),
                               resolution=(4, 4, 40)) as vol:
        vol[:] = 1
    ngshard.convert(tmp_path / "pc", tmp_path / "pc.zarr", progress=False, workers=1)
    assert main(["info", str(tmp_path / "pc.zarr"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ome"] == "0.5" and doc["levels"][0]["shape"] == [20, 30, 40]
    assert doc["levels"][0]["scale"] == [40.0, 4.0, 4.0]
    (tmp_path / "a.zarr" / "zarr.json").write_text("{")
    assert main(["info", str(tmp_path / "a.zarr")]) == 1
    assert "a.zarr/zarr.json: not valid JSON" in one_error_line(capsys)


@pytest.mark.parametrize("command", ["put", "import"])
def test_writing_to_a_new_store_without_a_spec_asks_for_one(tmp_path, capsys, command):
    """Not "no such directory": the store is to be made, and the spec is what is missing."""
    (tmp_path / "items").mkdir()
    (tmp_path / "items" / "7").write_bytes(b"hello")
    last = [str(tmp_path / "items")] if command == "import" else \
        ["7", str(tmp_path / "items" / "7")]
    assert main([command, str(tmp_path / "new"), *last]) == 1
    err = one_error_line(capsys)
    assert "--spec" in err and "no such directory" not in err, err
    assert not (tmp_path / "new").exists()


def test_each_command_says_what_its_scale_option_does(capsys):
    """--scale's help is the command's own, not get's default everywhere."""
    helps = {}
    for name in ("info", "ls", "get", "put", "rm", "import", "verify", "compact"):
        with pytest.raises(SystemExit):
            main([name, "-h"])
        text = " ".join(capsys.readouterr().out.split())
        helps[name] = text.split("--scale INDEX|KEY")[-1].split(" --", 1)[0]
    assert "scale 0" in helps["get"] and all("scale 0" not in h for n, h in helps.items()
                                             if n != "get"), helps
    assert len({helps[n] for n in ("info", "ls", "get", "put", "verify", "compact")}) == 6


@pytest.mark.parametrize("command", [["mesh"], ["skeletonize"], ["downsample"],
                                     ["convert", "OUT"], ["transfer", "OUT"]])
def test_a_missing_folder_or_a_plain_file_is_named_as_such(tmp_path, capsys, command):
    """Not "FILE/info: Not a directory" nor "no zarr.json": what is wrong with the path."""
    out = [str(tmp_path / "out")] if len(command) == 2 else []
    assert main([command[0], str(tmp_path / "nope"), *out]) == 1
    assert "nope: no such directory" in one_error_line(capsys)
    plain = tmp_path / "notes.txt"
    plain.write_text("hi")
    assert main([command[0], str(plain), *out]) == 1
    err = one_error_line(capsys)
    assert "notes.txt: " in err and ("a file, not a layer" in err or "convert reads" in err)
    assert "Not a directory" not in err and "zarr.json" not in err


@pytest.mark.parametrize("command", [["info"], ["get", "1"], ["ls"], ["verify"], ["serve"]])
def test_every_command_names_a_plain_file_given_for_a_folder(tmp_path, capsys, command):
    """Not "notes.txt/info: Not a directory" (info, get) nor "no such folder" (serve): the
    path, and that it is a file where a folder was expected."""
    plain = tmp_path / "notes.txt"
    plain.write_text("hi")
    assert main([command[0], str(plain), *command[1:]]) == 1
    err = one_error_line(capsys)
    assert f"{plain}: a file, not " in err and "Not a directory" not in err, err
    assert main([command[0], str(tmp_path / "nope"), *command[1:]]) == 1
    assert f"{tmp_path / 'nope'}: no such directory" in one_error_line(capsys)
