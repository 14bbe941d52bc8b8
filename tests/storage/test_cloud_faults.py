"""Object stores under trouble, on the real servers of tests/objectstores.py: a proxy that
fails requests (503, connection resets before and after the server saw them), writers that
race for the same shards, a writer killed mid-upload, another process rewriting what a
long-lived reader has open."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time

import cloud_workers as w
import numpy as np
import pytest
from faultproxy import FaultProxy
from objectstores import BUCKET
from peers import PEER_TIMEOUT

import ngshard
from ngshard.cli import main
from ngshard.storage import open_storage

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
        "preshift_bits": 0, "minishard_bits": 2, "shard_bits": 2, "data_encoding": "gzip"}
# Fast backoff: the proxy fails at random, not from load.
FAST = {"retries": 12, "retry_seconds": 60}


def items(n: int, version: int = 0) -> dict[int, bytes]:
    return {k * 7919: f"{version}:{k}:".encode() * (1 + k % 9) for k in range(n)}


@pytest.mark.parametrize("rate", [0.02, 0.2])
def test_every_read_and_write_succeeds_through_failing_requests(object_server, rate):
    with FaultProxy(object_server.endpoint, fail=rate, seed=int(rate * 100)) as proxy:
        options = {**object_server.through(proxy.endpoint), **FAST}
        url = object_server.url()
        first = items(120)
        ngshard.write_kv(url, SPEC, first, storage_options=options)
        with ngshard.open_kv(url, mode="r+", storage_options=options) as kv:
            kv.update(items(40, version=1))  # rewrites every shard, conditionally
            del kv[0]
        expected = {**first, **items(40, version=1)}
        del expected[0]
        kv = ngshard.open_kv(url, storage_options=options)
        assert kv.get_many(list(expected) + [0]) == expected
        assert sorted(kv.keys_array().tolist()) == sorted(expected)
        vol = ngshard.create_volume(f"{url}-vol", dtype="uint16", shape=(40, 30, 20),
                                    chunk_size=(16, 16, 16), sharding="auto",
                                    storage_options=options)
        data = np.arange(40 * 30 * 20, dtype=np.uint16).reshape(40, 30, 20)
        vol[:, :, :] = data
        vol.commit()
        back = ngshard.open_volume(f"{url}-vol", storage_options=options)
        np.testing.assert_array_equal(back[:, :, :, 0], data)
    failed = sum(proxy.counts[k] for k in ("503", "reset", "reset-after"))
    assert rate < 0.1 or failed > 5, proxy.counts


def test_a_request_that_keeps_failing_names_the_url_the_status_and_the_tries(s3_server):
    url = s3_server.url()
    ngshard.write_kv(url, SPEC, items(10), storage_options=s3_server.options)
    with FaultProxy(s3_server.endpoint, fail=1.0) as proxy:
        options = {**s3_server.through(proxy.endpoint), "retries": 2, "retry_seconds": 30}
        with pytest.raises(ngshard.NgShardError) as e:
            ngshard.open_kv(url, storage_options=options)[0]
    assert isinstance(e.value, ngshard.RequestError)
    assert e.value.url.startswith(url) and e.value.tries == 3
    assert e.value.status in (503, None)
    assert url in str(e.value) and "3 tries" in str(e.value)
    assert proxy.counts["requests"] == 3


def test_retries_are_counted_in_stats(s3_server):
    url = s3_server.url()
    ngshard.write_kv(url, SPEC, items(50), storage_options=s3_server.options)
    with FaultProxy(s3_server.endpoint, fail=0.3, seed=3) as proxy:
        kv = ngshard.open_kv(url, storage_options={**s3_server.through(proxy.endpoint),
                                                   **FAST})
        assert kv.get_many(list(items(50))) == items(50)
        reads = kv.reader.stats()
        failed = sum(proxy.counts[k] for k in ("503", "reset", "reset-after"))
    # each failed request was sent again once, and counted
    assert failed > 0 and reads["retries_requests"] == failed, (proxy.counts, reads)
    assert reads["retries"] >= failed and reads["retries_gave_up"] == 0


def test_the_cli_takes_storage_options_and_retry_settings(s3_server, capsys):
    url = s3_server.url()
    ngshard.write_kv(url, SPEC, items(5), storage_options=s3_server.options)
    flags = [f"--storage-option={k}={v}" for k, v in s3_server.options.items()]
    assert main(["get", url, str(7919), *flags, "--retries", "3"]) == 0
    assert capsys.readouterr().out == items(5)[7919].decode()
    with FaultProxy(s3_server.endpoint, fail=1.0) as proxy:
        flags = [f"-S{k}={v}" for k, v in s3_server.through(proxy.endpoint).items()]
        assert main(["get", url, "7919", *flags, "--retries", "1"]) == 1
    err = capsys.readouterr().err
    assert url in err and "2 tries" in err and len(err.strip().splitlines()) == 1


# --- writers that race ---------------------------------------------------------------------

def _race(target, args_of, n):
    # forked from a clean server process that imported ngshard once: quick to start, and
    # free of this process's threads (obstore's runtime, thread pools)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["cloud_workers"])
    start = time.time() + 1.5  # every process is up before the first commit
    with ctx.Pool(n) as pool:
        return pool.starmap(target, [(*args_of(i), start) for i in range(n)],
                            chunksize=1)


def test_eight_processes_updating_the_same_shards_lose_no_acknowledged_write(s3_server):
    url = s3_server.url()
    ngshard.write_kv(url, w.SPEC, {1: b"first"}, storage_options=s3_server.options)
    results = _race(w.kv_writer, lambda i: (url, s3_server.options, i), w.WORKERS)
    kv = ngshard.open_kv(url, storage_options=s3_server.options)
    expected = {k: w.kv_value(i, k) for i, (done, _) in enumerate(results) for k in done}
    assert len(expected) == w.WORKERS * w.ROUNDS * w.KEYS_PER_ROUND
    assert kv.get_many(list(expected)) == expected  # 0 lost
    assert kv[1] == b"first"
    assert sum(c for _, c in results) > 0  # they did race, and each retry succeeded


def test_eight_processes_staging_volume_writes_into_the_same_shards(s3_server):
    url = s3_server.url()
    ngshard.create_volume(url, dtype="uint8", shape=w.VOLUME_SHAPE, chunk_size=w.CHUNK,
                          sharding={"@type": "neuroglancer_uint64_sharded_v1",
                                    "hash": "identity", "preshift_bits": 0,
                                    "minishard_bits": 1, "shard_bits": 1},
                          storage_options=s3_server.options)
    results = _race(w.volume_writer, lambda i: (url, s3_server.options, i), w.WORKERS)
    vol = ngshard.open_volume(url, storage_options=s3_server.options)
    got = vol[:, :, :, 0]
    for i in range(w.WORKERS):
        for r in range(w.ROUNDS):
            y0 = w.CHUNK[1] * (r % (w.VOLUME_SHAPE[1] // w.CHUNK[1]))
            block = got[8 * i:8 * i + 8, y0:y0 + 8, :]
            assert (block == i * 10 + r + 1).all(), (i, r)
    assert sum(c for _, c in results) > 0


def test_a_writer_killed_mid_upload_leaves_no_partial_object(s3_server, tmp_path):
    url = s3_server.url()
    ngshard.write_kv(url, w.SPEC, {k: w.big_value(k, 0) for k in range(4)},
                     storage_options=s3_server.options)
    ready = tmp_path / "ready"
    ready.touch()
    code = (f"import sys; sys.path[:0] = {sys.path[:3]!r}\n"
            f"import cloud_workers; cloud_workers.slow_writer({url!r}, "
            f"{s3_server.options!r}, {str(ready)!r})")
    child = subprocess.Popen([sys.executable, "-c", code], env={**os.environ},
                             cwd=os.path.dirname(__file__))
    try:
        deadline = time.monotonic() + PEER_TIMEOUT
        while len(ready.read_text().split()) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.15)  # into the next version's uploads
        child.send_signal(signal.SIGKILL)
        child.wait(PEER_TIMEOUT)
    finally:
        if child.poll() is None:
            child.kill()
    versions = len(ready.read_text().split())
    assert versions >= 1
    kv = ngshard.open_kv(url, storage_options=s3_server.options)
    got = kv.get_many(range(4))
    for k, value in got.items():
        # whole values of some version, never a partial object
        assert value in [w.big_value(k, n) for n in range(versions + 2)], k
    assert sorted(got) == list(range(4))
    # and no temporary or partial object beside them
    listed = open_storage(url, storage_options=s3_server.options).list()
    assert listed == ["0.shard", "info"]


# --- staleness -----------------------------------------------------------------------------

REWRITE = ("import sys, ngshard; ngshard.write_kv(sys.argv[1], {spec!r}, "
           "{{k: bytes([9]) * (40 + k % 13) for k in range(300)}}, overwrite=True, "
           "storage_options={options!r})")


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_a_long_lived_reader_reopens_what_another_process_rewrote(kind, request):
    server = request.getfixturevalue(f"{kind}_server")
    url = server.url()
    spec = {**SPEC, "data_encoding": "raw"}
    ngshard.write_kv(url, spec, {k: bytes([1]) * (3 + k % 5) for k in range(300)},
                     storage_options=server.options)
    reader = ngshard.open_kv(url, storage_options=server.options)
    assert reader[5] == bytes([1]) * 3
    subprocess.run([sys.executable, "-c", REWRITE.format(spec=spec, options=server.options),
                    url], check=True, timeout=PEER_TIMEOUT)
    # the open store finds the shards replaced (generation), a reopened one reads afresh
    assert reader[5] == bytes([9]) * 45
    again = ngshard.open_kv(url, storage_options=server.options)
    assert again.get_many(range(300)) == {k: bytes([9]) * (40 + k % 13) for k in range(300)}


# --- anonymous access ------------------------------------------------------------------------

def test_a_public_bucket_reads_without_credentials(s3_server, monkeypatch):
    import boto3

    for name in [v for v in os.environ if v.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    url = s3_server.url()
    ngshard.write_kv(url, SPEC, items(20), storage_options=s3_server.options)
    anonymous = {"endpoint_url": s3_server.endpoint}  # no keys: requests go unsigned
    with pytest.raises(ngshard.RequestError) as e:  # private objects: refused
        ngshard.open_kv(url, storage_options=anonymous)
    assert e.value.status == 403 and url in str(e.value)
    client = boto3.client("s3", endpoint_url=s3_server.endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    prefix = url.split(f"{BUCKET}/", 1)[1]
    for o in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]:
        client.put_object_acl(Bucket=BUCKET, Key=o["Key"], ACL="public-read")
    for options in (anonymous, {**anonymous, "anon": True}):
        assert ngshard.open_kv(url, storage_options=options).get_many(list(items(20))) == \
            items(20)


# --- options that travel -------------------------------------------------------------------

def test_storage_options_reach_conversion_workers_and_pickled_handles(s3_server, tmp_path):
    import pickle

    from ngshard.zarr import create_array

    data = np.arange(40 * 30 * 20, dtype=np.uint16).reshape(20, 30, 40)  # z, y, x
    create_array(tmp_path / "a.zarr", data.shape, "uint16", (16, 16, 16))[...] = data
    url = s3_server.url()
    # the options exist only here: a worker process that did not get them reaches no server
    stats = ngshard.convert(str(tmp_path / "a.zarr"), url, workers=1, progress=False,
                            storage_options=s3_server.options)
    assert stats["run"] == stats["tasks"] > 0
    # a scale's handle (what a task ships) crosses a process boundary with its options
    handle = ngshard.open_volume(url, storage_options=s3_server.options).handle
    vol = ngshard.open_volume(pickle.loads(pickle.dumps(handle)).storage)
    np.testing.assert_array_equal(vol[:, :, :, 0], data.T)


ZARR_REWRITE = ("import sys, numpy as np; from ngshard.zarr import create_array; "
                "a = create_array(sys.argv[1], (16, 16), 'uint8', (4, 4), shards=(16, 16), "
                "overwrite=True, storage_options={options!r}); "
                "a[...] = np.arange(256, dtype=np.uint8).reshape(16, 16)")


def test_a_long_lived_zarr_reader_after_another_process_rewrote_the_array(s3_server):
    from ngshard.zarr import create_array, open_array

    url = s3_server.url()
    create_array(url, (16, 16), "uint8", (4, 4), shards=(16, 16),
                 storage_options=s3_server.options)[:8] = 7  # half the chunks stored
    reader = open_array(url, storage_options=s3_server.options)
    assert (reader[:8] == 7).all() and (reader[8:] == 0).all()
    subprocess.run([sys.executable, "-c", ZARR_REWRITE.format(options=s3_server.options),
                    url], check=True, timeout=PEER_TIMEOUT)
    want = np.arange(256, dtype=np.uint8).reshape(16, 16)
    np.testing.assert_array_equal(reader[...], want)  # the shard's new offsets, not the old
    np.testing.assert_array_equal(open_array(url, storage_options=s3_server.options)[...], want)


def test_serve_gives_the_object_as_it_is_now_after_another_writer_grew_it(s3_server):
    import requests

    url = s3_server.url()
    store = open_storage(url, storage_options=s3_server.options)
    store.write("info", [b'{"small": 1}'])
    with ngshard.serve(url, listing=True, storage_options=s3_server.options) as server:
        assert requests.get(f"{server.url}/info", timeout=PEER_TIMEOUT).content == \
            b'{"small": 1}'
        assert "info" in requests.get(f"{server.url}/", timeout=PEER_TIMEOUT).text
        grown = b'{"grown": "' + b"x" * 8000 + b'"}'
        open_storage(url, storage_options=s3_server.options).write("info", [grown])
        assert requests.get(f"{server.url}/info", timeout=PEER_TIMEOUT).content == grown


def test_a_fresh_destination_is_claimed_in_one_request(s3_server):
    # every round trip before a conversion's first task is latency on a distant bucket
    from ngshard.destination import claim

    with FaultProxy(s3_server.endpoint) as proxy:
        options = s3_server.through(proxy.endpoint)
        fresh = open_storage(s3_server.url(), storage_options=options)
        claim(fresh, overwrite=False, into=[fresh.child("1_1_1")])
        assert proxy.counts["requests"] == 1
        vol = ngshard.create_volume(fresh.url, shape=(8, 8, 8), dtype="uint8",
                                    storage_options=options)
        vol[...] = 1
        vol.commit()
        with pytest.raises(ngshard.ExistsError, match="precomputed image"):
            claim(open_storage(fresh.url, storage_options=options), overwrite=False)
