"""A conversion into a local S3 server (moto, on 127.0.0.1) with ``storage_options`` and no
credentials in the environment: the options travel with every task to the pool's workers;
options that reach no server stop the job with one StorageAccessError before anything is
written."""

from __future__ import annotations

import socket

import numpy as np
from convert_helpers import volume_data, zarr_python_array
from faultproxy import FaultProxy

import ngshard
from ngshard.storage import open_storage


def test_storage_options_travel_with_the_tasks(tmp_path, s3_server, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    data = volume_data((32, 32, 64), "uint8")
    zarr_python_array(tmp_path / "src.zarr", data, chunks=(16, 16, 16))
    dst = s3_server.url()
    with socket.socket() as s:  # a port where no server listens
        s.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{s.getsockname()[1]}"
    # the local pool (a forkserver's: this process runs the object store's threads)
    try:
        ngshard.convert(tmp_path / "src.zarr", dst, workers=2, progress=False,
                        storage_options={**s3_server.options, "endpoint_url": nowhere,
                                         "retries": 0, "retry_seconds": 5})
    except ngshard.StorageAccessError as e:
        assert dst in str(e) and "cannot reach" in str(e)
    else:
        raise AssertionError("no StorageAccessError")
    stored = open_storage(dst, storage_options=s3_server.options)
    assert stored.list(dirs=True) == []  # nothing written
    stats = ngshard.convert(tmp_path / "src.zarr", dst, workers=2, progress=False,
                            chunk_size=(16, 16, 16), task_bytes=32**3,
                            storage_options=s3_server.options)
    assert stats["run"] == stats["tasks"] == 2
    assert stored.child(".ngshard-convert").list() == []  # the records are gone
    got = ngshard.open_volume(dst, storage_options=s3_server.options)[...]
    np.testing.assert_array_equal(got[..., 0], data.T)


def test_a_conversion_into_an_empty_place_asks_few_requests(tmp_path, s3_server):
    """Each request around the tasks is a round trip to a distant bucket: into an empty
    place a one-task conversion lists it once, writes the job record and the info, runs its
    task (the info, one shard) and removes the records in one request, with no records of
    an earlier run looked for or removed, and none of its own written only to be removed."""
    data = volume_data((32, 32, 32), "uint8")
    zarr_python_array(tmp_path / "src.zarr", data, chunks=(16, 16, 16))
    with FaultProxy(s3_server.endpoint) as proxy:
        options = s3_server.through(proxy.endpoint)
        dst = s3_server.url()
        stats = ngshard.convert(tmp_path / "src.zarr", dst, workers=1, progress=False,
                                chunk_size=(16, 16, 16), storage_options=options)
        assert stats["run"] == stats["tasks"] == 1
        # the probe, the listing, the job record, the info, the task's info read and its
        # shard, the records' removal
        assert proxy.counts["requests"] <= 7, proxy.counts
    stored = open_storage(dst, storage_options=s3_server.options)
    assert stored.child(".ngshard-convert").list() == []  # the records are gone
    got = ngshard.open_volume(dst, storage_options=s3_server.options)[...]
    np.testing.assert_array_equal(got[..., 0], data.T)
