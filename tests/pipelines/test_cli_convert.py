"""``ngshard convert``: a wrong path or bad --axes cost one line on standard error (exit 1,
no traceback); a conversion on worker processes succeeds and tensorstore reads the result."""

from __future__ import annotations

import numpy as np
from convert_helpers import as_xyzc, read_precomputed, volume_data, zarr_python_array

from ngshard.cli import main


def one_error_line(capsys, *args: str, says: str) -> None:
    assert main(["convert", *args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ngshard: error:") and says in err, err
    assert "Traceback" not in err


def test_wrong_path(tmp_path, capsys):
    one_error_line(capsys, str(tmp_path / "nothing"), str(tmp_path / "out"),
                   says="not a zarr array or group")
    assert not (tmp_path / "out").exists()


def test_bad_axes_and_chunk_size(tmp_path, capsys):
    src = tmp_path / "src.zarr"
    zarr_python_array(src, volume_data((8, 8, 8), "uint8"), chunks=(8, 8, 8))
    one_error_line(capsys, str(src), str(tmp_path / "out"), "--axes", "zyq", says="axes")
    one_error_line(capsys, str(src), str(tmp_path / "out"), "--chunk-size", "8,8",
                   says="--chunk-size")
    one_error_line(capsys, str(src), str(tmp_path / "out"), "--sharding", "{bad",
                   says="sharding")


def test_success_on_worker_processes(tmp_path, capsys):
    data = volume_data((20, 40, 36), "uint8", seed=1)
    src = tmp_path / "src.zarr"
    zarr_python_array(src, data, chunks=(16, 16, 16), shards=(32, 32, 32))
    out = tmp_path / "out"
    assert main(["convert", str(src), str(out), "--workers", "2", "--chunk-size",
                 "16,16,16"]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"converted {src} -> {out}: ") and "tasks" in said
    np.testing.assert_array_equal(read_precomputed(out)[0], as_xyzc(data, "zyx"))
