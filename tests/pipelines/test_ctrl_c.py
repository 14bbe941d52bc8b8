"""Ctrl-C on every long command (convert, downsample, transfer, mesh, skeletonize): SIGINT to
a child process running it, its workers busy, stops it within about a second (not after the
running tasks), with exit status 130 and one line saying how many tasks are done and left
and the exact command that resumes it; `ngshard verify` of the unfinished job names that
command too; the command run again finishes the job, byte for byte as a run never
interrupted."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from convert_helpers import files, volume_data, zarr_python_array
from peers import PEER_TIMEOUT
from segment_helpers import neurites, write_segmentation

import ngshard
from ngshard.cli import main

RECORDS = ".ngshard-convert"


def _image(path: Path, shape=(128, 128, 32)) -> Path:
    data = volume_data(shape, "uint8", seed=7)
    vol = ngshard.create_volume(path, shape=data.shape, dtype="uint8", chunk_size=(16, 16, 8),
                                resolution=(4, 4, 40), encoding="jpeg")
    vol[...] = data
    vol.commit()
    return path


def _labels(path: Path, *, fill: bool, shape=(64, 64, 64)) -> Path:
    labels = neurites(shape)
    if fill:
        labels[labels == 0] = 3  # a label in every box: every box has work
    return write_segmentation(path, labels, chunk=(16, 16, 16))


# Many small tasks (of one chunk), so that the job is still running when it is stopped: a
# few seconds of tasks on a quiet machine, long after the first output.
def _convert(root: Path) -> tuple[list[str], Path, Path]:
    src = root / "src.zarr"
    zarr_python_array(src, volume_data((128, 256, 128), "uint8", seed=2), chunks=(16, 64, 64))
    return ["convert", str(src), str(root / "out"), "--encoding", "jpeg", "--chunk-size",
            "16,16,16", "--task-bytes", str(16 ** 3)], root / "out", root / "out"


def _downsample(root: Path) -> tuple[list[str], Path, Path]:
    path = _image(root / "img", (512, 512, 32))
    return ["downsample", str(path), "--levels", "2", "--method", "mean", "--task-bytes",
            str(32 * 32 * 8)], path, path


def _transfer(root: Path) -> tuple[list[str], Path, Path]:
    src = _image(root / "src", (256, 256, 32))
    return ["transfer", str(src), str(root / "out"), "--chunk-size", "8,8,8",
            "--task-bytes", str(16 * 16 * 8)], root / "out", root / "out"


def _mesh(root: Path) -> tuple[list[str], Path, Path]:
    seg = _labels(root / "seg", fill=True, shape=(128, 128, 64))
    return ["mesh", str(seg), "--box", "16"], seg, seg / "mesh"


def _skeletonize(root: Path) -> tuple[list[str], Path, Path]:
    seg = _labels(root / "seg", fill=False)
    return ["skeletonize", str(seg), "--box", "8"], seg, seg / "skeletons"


#: per command: (argv, the tree it changes, the destination holding the job's records)
JOBS = {"convert": _convert, "downsample": _downsample, "transfer": _transfer,
        "mesh": _mesh, "skeletonize": _skeletonize}


def _interrupt(argv: list[str], dst: Path) -> tuple[str, float]:
    """Run ``ngshard argv`` in a child; once its tasks are running and some have written
    their output, send SIGINT: its standard error and the seconds it took to exit."""
    child = subprocess.Popen([sys.executable, "-m", "ngshard.cli", *argv], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + PEER_TIMEOUT
    job = dst / RECORDS / "job.json"
    before = set(dst.rglob("*"))

    def written() -> bool:  # a task's output is there (its temporaries aside)
        return job.exists() and any(
            p.is_file() and RECORDS not in p.parts and p.name != "info" and
            not p.name.endswith(".tmp") for p in set(dst.rglob("*")) - before)

    while not written() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert child.poll() is None, child.communicate(timeout=PEER_TIMEOUT)
    time.sleep(0.1)  # its result reaches the client
    child.send_signal(signal.SIGINT)
    started = time.monotonic()
    out, err = child.communicate(timeout=PEER_TIMEOUT)
    took = time.monotonic() - started
    assert child.returncode == 130, (child.returncode, out, err)
    return err, took


@pytest.mark.parametrize("command", list(JOBS))
def test_ctrl_c_stops_at_once_says_how_to_resume_and_resumes(tmp_path, command, capsys):
    made = JOBS[command](tmp_path / "run")
    argv, tree, dst = made
    reference = tmp_path / "reference"
    shutil.copytree(tmp_path / "run", reference)  # the same inputs, for a run never stopped
    argv += ["--workers", "2"]
    err, took = _interrupt(argv, dst)
    print(f"{command}: stopped in {took:.2f} s: {err}")
    assert took < 2, (took, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    again = shlex.join(["ngshard", *argv])
    done, total = (int(n) for n in err.split(" tasks of ")[0].split()[-3::2])
    assert 0 < done < total and f"{total - done} left" in err, err
    assert err.rstrip().endswith(f"to resume: {again}"), err

    # verify names the command that resumes the job (from the job's record)
    assert main(["verify", str(dst)]) == 1
    said = capsys.readouterr().out
    assert "has not finished" in said and f"run `ngshard {command} " in said, said

    # the command it names finishes the job, skipping what was done
    assert main(shlex.split(again)[1:]) == 0
    said = capsys.readouterr().out
    assert "done before" in said, said
    assert not (dst / RECORDS).exists()
    ref_argv = [a.replace(str(tmp_path / "run"), str(reference)) for a in argv]
    assert main(ref_argv) == 0
    capsys.readouterr()
    got = files(tree)
    assert got == files(reference / tree.relative_to(tmp_path / "run"))
    assert not [n for n in got if n.endswith(".tmp")]
    if command == "downsample":
        np.testing.assert_array_equal(ngshard.open_volume(tree, scale=2)[...],
                                      ngshard.open_volume(reference / "img", scale=2)[...])
