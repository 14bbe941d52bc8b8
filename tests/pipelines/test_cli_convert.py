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
                   says="nothing: no such directory")
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


def test_placement_where_the_source_has_none(tmp_path, capsys):
    """A plain zarr array has no voxel size or offset: --resolution (in --units), --offset
    give them (and ngshard.convert's keywords); an OME group that has units refuses them."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    import ngshard

    data = volume_data((8, 16, 16), "uint8", seed=3)
    src = tmp_path / "src.zarr"
    zarr_python_array(src, data, chunks=(8, 8, 8))
    out = tmp_path / "out"
    assert main(["convert", str(src), str(out), "--workers", "1", "--resolution",
                 "0.004,0.004,0.04", "--units", "um", "--offset", "10,-20,3"]) == 0
    scale = json.loads((out / "info").read_text())["scales"][0]
    assert scale["resolution"] == [4, 4, 40] and scale["voxel_offset"] == [10, -20, 3]
    assert scale["key"] == "4_4_40"
    with ThreadPoolExecutor(2) as pool:
        ngshard.convert(src, tmp_path / "py", resolution=(8, 8, 30), executor=pool,
                        progress=False)
    scale = json.loads((tmp_path / "py" / "info").read_text())["scales"][0]
    assert scale["resolution"] == [8, 8, 30] and scale["voxel_offset"] == [0, 0, 0]
    one_error_line(capsys, str(src), str(tmp_path / "bad"), "--offset", "1,2",
                   says="--offset")
    ngshard.convert(out, tmp_path / "ome.zarr", executor=ThreadPoolExecutor(1),
                    progress=False)  # an OME-Zarr group with nanometer units
    one_error_line(capsys, str(tmp_path / "ome.zarr"), str(tmp_path / "again"),
                   "--resolution", "1,1,1", says="units")
