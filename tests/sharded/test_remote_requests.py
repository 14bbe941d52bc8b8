"""What a batch read asks a remote server, counted at a real HTTP server on 127.0.0.1: no HEAD
on the way (a shard's index is a ranged GET from offset 0, whose response gives the size and
ETag), one GET per shard for each step (shard index, minishard indices, values: nearby
ranges read together, values the minishard indices' GET brought not read again), each shard
on its own (no waiting for the slowest shard between steps), and a shard replaced between
those GETs still found out without a HEAD (the ETags of the GETs differ) and read again."""

from __future__ import annotations

import os
import shutil
import threading

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=2,
                            minishard_index_encoding="gzip", data_encoding="gzip")


def items(n: int = 400, tag: bytes = b"v", size: int = 200) -> dict[int, bytes]:
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**64 - 1, n, np.uint64)).tolist()
    return {k: tag + b"-%d-" % k + rng.bytes(int(rng.integers(0, size))) for k in keys}


def shard_ranges(requests: list) -> dict[str, list[int]]:
    """The start of each ranged GET, by shard file."""
    out: dict[str, list[int]] = {}
    for method, path, rng in requests:
        assert method == "GET" and rng, (method, path, rng)
        out.setdefault(path.rsplit("/", 1)[-1], []).append(int(rng[6:].split("-")[0]))
    return out


def test_a_batch_read_sends_no_head_and_one_get_per_shard_and_phase(http_server):
    want = items(size=8000)  # the values of a shard span more than 128 KiB
    ngshard.write_kv(http_server.root / "kv", SPEC, want)
    kv = ngshard.open_kv(f"{http_server.base}/kv", SPEC)
    http_server.requests.clear()
    assert kv.get_many(list(want)) == want
    gets = shard_ranges(http_server.requests)
    shards = sorted(n for n in os.listdir(http_server.root / "kv") if n.endswith(".shard"))
    assert sorted(gets) == shards
    for starts in gets.values():
        # the shard index from offset 0 first, then the minishard indices, then the values
        assert len(starts) == 3 and starts[0] == 0, starts
    http_server.requests.clear()  # a shard whose values lie within 128 KiB before its
    small = {k: v[:20] for k, v in want.items()}  # minishard indices: read with them
    ngshard.write_kv(http_server.root / "small", SPEC, small)
    assert ngshard.open_kv(f"{http_server.base}/small", SPEC).get_many(list(small)) == small
    assert all(len(starts) == 2 for starts in shard_ranges(http_server.requests).values())
    http_server.requests.clear()  # a cached index: one GET of it again, no HEAD either
    assert kv.get_many(list(want)[:50]) == {k: want[k] for k in list(want)[:50]}
    assert {m for m, _, _ in http_server.requests} == {"GET"}


def test_a_shard_replaced_between_the_index_and_the_data_reads_is_read_again(
        http_server, tmp_path):
    spec = ngshard.ShardingSpec(minishard_bits=2, shard_bits=0,
                                minishard_index_encoding="gzip")
    old, new = items(tag=b"old"), items(tag=b"new")  # the same keys, other values
    ngshard.write_kv(http_server.root / "kv", spec, old)
    ngshard.write_kv(tmp_path / "new", spec, new)
    assert old.keys() == new.keys() and old != new
    served = http_server.root / "kv" / "0.shard"
    replaced = []

    def replace_after_the_index_read(path: str, start: int, end: int) -> None:
        if path.endswith("/0.shard") and start == 0 and not replaced:
            replaced.append(path)  # a new file (a new inode: a new ETag)
            shutil.copy(tmp_path / "new" / "0.shard", f"{served}.tmp")
            os.replace(f"{served}.tmp", served)

    kv = ngshard.open_kv(f"{http_server.base}/kv", spec)
    http_server.requests.clear()
    http_server.after_range = replace_after_the_index_read
    assert kv.get_many(list(old)) == new
    assert {m for m, _, _ in http_server.requests} == {"GET"}
    assert replaced and kv.reader.stats()["retries"] == 1


def test_each_shard_reads_on_without_waiting_for_the_others(http_server):
    """Shard 0's index is held back until shard 1 was read through: the batch completes
    only if shard 1's minishard indices and values are asked for without waiting for it."""
    spec = ngshard.ShardingSpec(minishard_bits=3, shard_bits=1,
                                minishard_index_encoding="gzip", data_encoding="gzip")
    want = items()
    ngshard.write_kv(http_server.root / "kv", spec, want)
    kv = ngshard.open_kv(f"{http_server.base}/kv", spec)
    shard1, waited = threading.Event(), []

    def hold_shard_0s_index(path: str, start: int, end: int) -> None:
        if path.endswith("/0.shard") and start == 0:
            waited.append(shard1.wait(5))
        elif path.endswith("/1.shard") and start > 0:
            shard1.set()  # its minishard indices (and values) are being answered

    http_server.before_range = hold_shard_0s_index
    assert kv.get_many(list(want)) == want
    assert waited == [True]


def test_values_read_with_the_minishard_indices_are_not_asked_for_again(http_server):
    """tensorstore writes each minishard's values right before its index: the spans read for
    the minishard indices hold them, so a batch takes two GETs per shard, not three."""
    ts = pytest.importorskip("tensorstore")
    spec = SPEC.to_json()
    want = items()
    txn = ts.Transaction()
    kvt = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "metadata": spec,
                           "base": f"file://{http_server.root}/kv/"}
                          ).result(timeout=PEER_TIMEOUT).with_transaction(txn)
    for k, v in want.items():
        kvt[k.to_bytes(8, "big")] = v
    txn.commit_async().result(timeout=PEER_TIMEOUT)
    kv = ngshard.open_kv(f"{http_server.base}/kv", SPEC)
    http_server.requests.clear()
    assert kv.get_many(list(want)) == want
    gets = shard_ranges(http_server.requests)
    assert len(gets) == 4 and all(len(starts) == 2 for starts in gets.values()), gets


def test_ranges_within_128_kib_of_each_other_are_one_request(http_server):
    data = os.urandom(300_000)
    (http_server.root / "blob").write_bytes(data)
    storage = ngshard.storage.open_storage(http_server.base)
    http_server.requests.clear()
    ranges = np.array([[0, 10], [120_000, 120_010], [240_000, 240_100]])
    _, chunks = storage.read_ranges([("blob", ranges)])[0]
    assert [bytes(c) for c in chunks] == [data[a:b] for a, b in ranges.tolist()]
    assert len(http_server.requests) == 1


BOXED = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 2,
         "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip",
         "data_encoding": "gzip"}


def boxed_volume(root, name: str = "vol") -> np.ndarray:
    """A volume of 4 x 4 x 2 chunks in shards of 2 x 2 x 2 (x in [0, 32) or [32, 64), y
    the same); returns its voxels."""
    data = np.random.default_rng(0).integers(0, 255, (64, 64, 32, 1), dtype=np.uint8)
    vol = ngshard.create_volume(root / name, dtype="uint8", shape=(64, 64, 32),
                                chunk_size=(16, 16, 16), sharding=BOXED)
    vol[...] = data
    vol.commit()
    return data


def test_a_volume_read_of_every_chunk_of_a_shard_reads_it_in_one_get(http_server):
    """Where shards are boxes of chunks (identity hash), a read holding every chunk of one
    asks for the shard whole, one GET with no Range (as tensorstore does), instead of its
    index, minishard indices and values one after another; a shard read in part still
    reads its indices first."""
    data = boxed_volume(http_server.root)
    remote = ngshard.open_volume(f"{http_server.base}/vol")
    http_server.requests.clear()
    assert np.array_equal(remote[0:48], data[0:48])
    gets: dict[str, list] = {}
    for method, path, rng in http_server.requests:
        assert method == "GET"
        gets.setdefault(path.rsplit("/", 1)[-1], []).append(rng)
    whole = [name for name, ranges in gets.items() if ranges == [None]]
    parts = [name for name, ranges in gets.items()
             if len(ranges) > 1 and ranges[0].startswith("bytes=0-")]
    assert len(whole) == 2 and len(parts) == 2, gets  # x in [0, 32): whole; [32, 48): not


@pytest.mark.parametrize("cut", [8, 5000])
def test_a_shard_read_whole_that_was_cut_short_is_an_error_naming_it(http_server, cut):
    boxed_volume(http_server.root)
    shard = next((http_server.root / "vol").glob("*/*.shard"))
    shard.write_bytes(shard.read_bytes()[:-cut])  # its minishard indices, or its values too
    with pytest.raises(ngshard.CorruptDataError, match=shard.name):
        ngshard.open_volume(f"{http_server.base}/vol")[...]
