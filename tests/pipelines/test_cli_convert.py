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


def test_ctrl_c_stops_at_once_and_says_how_to_resume(tmp_path):
    """SIGINT to a running `ngshard convert` (its workers busy): it exits within about two
    seconds, not after the running tasks, with one line saying what is left and the command
    that resumes it; that command finishes the job."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from peers import PEER_TIMEOUT

    data = volume_data((128, 512, 512), "uint8", seed=2)
    src, out = tmp_path / "src.zarr", tmp_path / "out"
    zarr_python_array(src, data, chunks=(64, 64, 64))
    argv = ["convert", str(src), str(out), "--encoding", "jpeg", "--workers", "2"]
    child = subprocess.Popen([sys.executable, "-m", "ngshard.cli", *argv], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + PEER_TIMEOUT
    while not (out / ".ngshard-convert" / "job.json").exists() and child.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.02)  # the tasks are submitted once the job is recorded
    assert child.poll() is None, child.communicate()
    child.send_signal(signal.SIGINT)
    started = time.monotonic()
    _, err = child.communicate(timeout=PEER_TIMEOUT)
    took = time.monotonic() - started
    assert child.returncode == 130 and took < 2.5, (took, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    again = f"ngshard convert {src} {out} --encoding jpeg --workers 2"
    assert "left" in err and "resume" in err and err.rstrip().endswith(again), err
    assert main(argv) == 0  # the command it names resumes the job
    assert not (out / ".ngshard-convert").exists()
    got, want = read_precomputed(out)[0].astype(int), as_xyzc(data, "zyx").astype(int)
    assert got.shape == want.shape and np.abs(got - want).mean() < 20  # jpeg: lossy
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")], os.listdir(out)
