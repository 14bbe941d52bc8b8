"""A conversion into a local S3 server (moto, on 127.0.0.1) with ``storage_options`` and no
credentials in the environment: the options travel with every task; without them the job
stops with one StorageAccessError before anything is written."""

from __future__ import annotations

import logging
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest
from convert_helpers import volume_data, zarr_python_array

import ngshard

server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")


@pytest.fixture(scope="module")
def s3():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    yield f"http://{host}:{port}"
    srv.stop()


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))


def test_storage_options_travel_with_the_tasks(tmp_path, s3, no_credentials):
    options = {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": s3}}
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    fs.mkdir("convert")
    data = volume_data((32, 32, 64), "uint8")
    zarr_python_array(tmp_path / "src.zarr", data, chunks=(16, 16, 16))
    with ProcessPoolExecutor(2) as pool:  # the workers' environment has no credentials
        with pytest.raises(ngshard.StorageAccessError, match="s3://convert/out.*Credentials"):
            ngshard.convert(tmp_path / "src.zarr", "s3://convert/out", executor=pool,
                            progress=False,
                            storage_options={"client_kwargs": {"endpoint_url": s3}})
        assert fs.find("convert") == []  # nothing written
        stats = ngshard.convert(tmp_path / "src.zarr", "s3://convert/out", executor=pool,
                                progress=False, chunk_size=(16, 16, 16), task_bytes=32**3,
                                storage_options=options)
    assert stats["run"] == stats["tasks"] == 2
    assert not fs.find("convert/out/.ngshard-convert")  # the records are gone
    fs.get("convert/out", str(tmp_path / "got"), recursive=True)
    got = ngshard.open_volume(tmp_path / "got")[...]
    np.testing.assert_array_equal(got[..., 0], data.T)
