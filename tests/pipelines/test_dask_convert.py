"""A conversion on a Dask LocalCluster of two worker processes writes byte for byte what the
local process pool writes."""

from __future__ import annotations

import pytest
from convert_helpers import files, volume_data, zarr_python_array

import ngshard

distributed = pytest.importorskip("distributed")



@pytest.mark.parametrize("compressor", ["zstd", "gzip"])
def test_dask_equals_local_pool(tmp_path, compressor):
    src = tmp_path / "src.zarr"
    zarr_python_array(src, volume_data((48, 64, 80), "uint8"), chunks=(16, 16, 16),
                      shards=(32, 32, 32), compressor=compressor)
    local = ngshard.convert(src, tmp_path / "local", workers=2, progress=False,
                            task_bytes=32**3 * 4)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    try:
        with distributed.Client(cluster) as client:
            remote = ngshard.convert(src, tmp_path / "dask", executor=client.get_executor(),
                                     progress=False, task_bytes=32**3 * 4)
    finally:
        cluster.close()
    assert local == remote and local["tasks"] > 2
    assert files(tmp_path / "local") == files(tmp_path / "dask")


def test_command_line_dask(tmp_path, capsys):
    from ngshard.cli import main

    src = tmp_path / "src.zarr"
    data = volume_data((16, 32, 32), "uint8", seed=2)
    zarr_python_array(src, data, chunks=(16, 16, 16))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        assert main(["convert", str(src), str(tmp_path / "out"), "--dask",
                     cluster.scheduler_address]) == 0
    assert "converted" in capsys.readouterr().out
    vol = ngshard.open_volume(tmp_path / "out")
    assert (vol[..., 0] == data.T).all()
