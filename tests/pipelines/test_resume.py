"""Interrupted conversions: the shards finished before the interruption are whole and are not
rewritten on resume (same inode and mtime), the rest are done then, and the records go away
when the job is done. A corrupt source shard stops the conversion with a CorruptDataError
naming the file, leaves no half-written shard, and the conversion resumes after the fix."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from convert_helpers import (
    Interrupting,
    as_xyzc,
    read_precomputed,
    volume_data,
    zarr_python_array,
)

import ngshard
from ngshard.pipelines.resume import unfinished


def outputs(root) -> dict[str, tuple[int, int]]:
    """Every file a conversion left (but its records), by path: (inode, mtime_ns)."""
    return {str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file() and ".ngshard-convert" not in p.parts}


def no_stray_files(root) -> None:
    """Only info and shard files: no temporary (half-written) file is visible."""
    for name in outputs(root):
        assert name == "info" or name.endswith(".shard"), name


@pytest.fixture
def source(tmp_path):
    data = volume_data((64, 64, 64), "uint8")
    src = tmp_path / "src.zarr"
    zarr_python_array(src, data, chunks=(16, 16, 16), shards=(32, 32, 32))
    return src, data


def test_interrupt_and_resume(tmp_path, source):
    src, data = source
    dst = tmp_path / "out"
    # small shards: 8 tasks (2x2x2 boxes of 16^3 chunks)
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(RuntimeError, match="interrupted"):
            ngshard.convert(src, dst, executor=Interrupting(pool, 3), progress=False,
                            chunk_size=(16, 16, 16), task_bytes=32**3)
        no_stray_files(dst)
        # the job and a record of the three tasks done (one record per batch of tasks)
        records = sorted(p.name for p in (dst / ".ngshard-convert").iterdir())
        assert len(records) == 2 and records[1] == "job.json"
        assert "5 of 8 task(s) remain" in unfinished(str(dst))
        before = outputs(dst)
        shards = [n for n in before if n.endswith(".shard")]
        assert len(shards) == 3
        stats = ngshard.convert(src, dst, executor=pool, progress=False,
                                chunk_size=(16, 16, 16), task_bytes=32**3)
    assert stats == {**stats, "tasks": 8, "skipped": 3, "run": 5}
    after = outputs(dst)
    assert all(after[n] == before[n] for n in shards)  # not rewritten
    assert len([n for n in after if n.endswith(".shard")]) == 8
    assert not (dst / ".ngshard-convert").exists()
    np.testing.assert_array_equal(read_precomputed(dst)[0], as_xyzc(data, "zyx"))


def test_another_job_or_no_resume_starts_afresh(tmp_path, source):
    src, _ = source
    dst = tmp_path / "out"
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(RuntimeError):
            ngshard.convert(src, dst, executor=Interrupting(pool, 2), progress=False,
                            task_bytes=32**3, chunk_size=(16, 16, 16))
        stats = ngshard.convert(src, dst, executor=pool, progress=False, task_bytes=32**3,
                                chunk_size=(16, 16, 16), resume=False)
        assert stats["skipped"] == 0 and stats["run"] == 8
        with pytest.raises(ngshard.ExistsError, match="holds a precomputed image"):
            ngshard.convert(src, dst, executor=pool, progress=False, task_bytes=32**3,
                            chunk_size=(16, 16, 16))  # finished: nothing to resume
        with pytest.raises(RuntimeError):
            ngshard.convert(src, dst, executor=Interrupting(pool, 2), progress=False,
                            task_bytes=32**3, chunk_size=(16, 16, 16), overwrite=True)
        with pytest.raises(ngshard.ExistsError, match="holds a precomputed image"):
            ngshard.convert(src, dst, executor=pool, progress=False, task_bytes=32**3,
                            chunk_size=(8, 8, 8))  # another job onto an unfinished one
        stats = ngshard.convert(src, dst, executor=pool, progress=False, task_bytes=32**3,
                                chunk_size=(8, 8, 8), overwrite=True)
        assert stats["skipped"] == 0
    assert json.loads((dst / "info").read_text())["scales"][0]["chunk_sizes"] == [[8, 8, 8]]


@pytest.mark.parametrize("chunk", [32, 16], ids=["decoding", "fast-path"])
def test_corrupt_source_shard_stops_then_resumes(tmp_path, chunk):
    """(32^3 precomputed chunks from 16^3 zarr chunks are decoded and cut; 16^3 ones are
    carried by the fast path.)"""
    data = volume_data((64, 64, 64), "uint8", seed=3)
    src = tmp_path / "src.zarr"
    zarr_python_array(src, data, chunks=(16, 16, 16), shards=(32, 32, 32), compressor="gzip")
    bad = src / "c" / "1" / "0" / "1"
    good = bad.read_bytes()
    damaged = bytearray(good)
    damaged[-10] ^= 0xFF  # the shard index (at the end): its crc32c no longer matches
    bad.write_bytes(bytes(damaged))
    dst = tmp_path / "out"
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(ngshard.CorruptDataError, match="c/1/0/1"):
            ngshard.convert(src, dst, executor=pool, progress=False, chunk_size=(chunk,) * 3,
                            task_bytes=32**3)
        no_stray_files(dst)
        left = int(unfinished(str(dst)).split(": ")[2].split(" of ")[0])
        bad.write_bytes(good)
        stats = ngshard.convert(src, dst, executor=pool, progress=False,
                                chunk_size=(chunk,) * 3, task_bytes=32**3)
    assert stats["skipped"] == 8 - left and stats["run"] == left >= 1
    np.testing.assert_array_equal(read_precomputed(dst)[0], as_xyzc(data, "zyx"))


@pytest.mark.parametrize("chunk", [32, 16], ids=["decoding", "fast-path"])
def test_chunk_of_the_wrong_size_stops_then_resumes(tmp_path, chunk):
    """A chunk file (unsharded zarr) holding a valid gzip stream of the wrong size."""
    import gzip

    data = volume_data((32, 32, 64), "uint8", seed=4)
    src = tmp_path / "src.zarr"
    zarr_python_array(src, data, chunks=(16, 16, 16), compressor="gzip")
    bad = src / "c" / "1" / "1" / "2"
    good = bad.read_bytes()
    bad.write_bytes(gzip.compress(bytes(16**3 - 1)))
    dst = tmp_path / "out"
    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(ngshard.CorruptDataError) as error:
            ngshard.convert(src, dst, executor=pool, progress=False,
                            chunk_size=(chunk,) * 3, task_bytes=32**3)
        assert "src.zarr/c/1/1/2" in str(error.value), error.value  # the chunk file named
        no_stray_files(dst)
        bad.write_bytes(good)
        stats = ngshard.convert(src, dst, executor=pool, progress=False,
                                chunk_size=(chunk,) * 3, task_bytes=32**3)
    assert stats["skipped"] >= 1 and stats["run"] >= 1
    np.testing.assert_array_equal(read_precomputed(dst)[0], as_xyzc(data, "zyx"))


def test_a_worker_that_dies_is_named_with_what_to_do(tmp_path, source):
    """A dead worker process (killed for memory, or a script that is not guarded by
    ``if __name__ == "__main__":`` and cannot be imported again) is one clear error."""
    import os
    from concurrent.futures import ProcessPoolExecutor

    src, _ = source
    with ProcessPoolExecutor(1, initializer=os._exit, initargs=(3,)) as pool, \
            pytest.raises(ngshard.NgShardError, match="worker process died.*__main__"):
        ngshard.convert(src, tmp_path / "out", executor=pool, progress=False)


def test_verify_says_an_interrupted_conversion_has_not_finished(tmp_path, source, capsys,
                                                                http_server):
    from ngshard.cli import main
    from ngshard.verify import verify_volume

    src, _ = source
    dst = tmp_path / "out"
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(RuntimeError, match="interrupted"):
            ngshard.convert(src, dst, executor=Interrupting(pool, 3), progress=False,
                            chunk_size=(16, 16, 16), task_bytes=32**3, downsample=1)
        # the three shards written are whole: only the records tell the job is unfinished
        left = "a conversion into it has not finished: 13 of 16 task(s) remain (1_1_1: 5 of 8"
        assert main(["verify", str(dst)]) == 1
        out = capsys.readouterr().out
        assert "scale 1_1_1: 3 shard(s), " in out
        assert "of 1_1_1 remain; to finish it, run `ngshard convert" in out
        assert f"`ngshard convert {src} {dst}` again with the same options" in out
        assert "scale 2_2_2:" in out and "8 of 8 task(s) of 2_2_2 remain" in out
        assert "OK" not in out
        report = verify_volume(ngshard.open_volume(dst))
        assert not report.ok and "5 of 8 task(s) of 1_1_1 remain" in report.problems[-1]
        assert left in unfinished(str(dst))
        # served without directory listings: the records cannot be counted, but are there
        shutil.copytree(dst, http_server.root / "out")
        http_server.listing = False
        assert main(["verify", f"precomputed://{http_server.base}/out"]) == 1
        out = capsys.readouterr().out
        assert out.count("a conversion into it has not finished; to finish it") == 2
        ngshard.convert(src, dst, executor=pool, progress=False, chunk_size=(16, 16, 16),
                        task_bytes=32**3, downsample=1)
    assert main(["verify", str(dst)]) == 0
    out = capsys.readouterr().out
    assert out.count("OK") == 2 and "not finished" not in out


def test_verify_of_an_unfinished_zarr_destination(tmp_path, capsys):
    from ngshard.cli import main

    src = tmp_path / "layer"
    with ngshard.create_volume(src, dtype="uint8", shape=(64, 64, 64), chunk_size=(16,) * 3,
                               sharding="auto") as vol:
        vol[...] = volume_data((64, 64, 64), "uint8")[..., None]
    dst = tmp_path / "out.zarr"
    with ThreadPoolExecutor(2) as pool, pytest.raises(RuntimeError, match="interrupted"):
        ngshard.convert(src, dst, executor=Interrupting(pool, 1), progress=False,
                        task_bytes=32**3)
    assert main(["verify", str(dst)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{dst}: a conversion into it has not finished: 7 of 8 task(s)")


def test_one_job_however_the_paths_are_spelled(tmp_path, source, monkeypatch):
    """Relative and absolute, with and without a trailing slash, file:// or not: one job."""
    src, data = source
    monkeypatch.chdir(tmp_path)
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(RuntimeError, match="interrupted"):
            ngshard.convert("src.zarr", "out", executor=Interrupting(pool, 3),
                            progress=False, chunk_size=(16, 16, 16), task_bytes=32**3)
        stats = ngshard.convert(f"file://{tmp_path}/src.zarr/", f"{tmp_path}/./out/",
                                executor=pool, progress=False, chunk_size=(16, 16, 16),
                                task_bytes=32**3)
    assert stats["skipped"] == 3 and stats["run"] == 5
    np.testing.assert_array_equal(read_precomputed(tmp_path / "out")[0], as_xyzc(data, "zyx"))
