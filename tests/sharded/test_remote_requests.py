"""What a batch read asks a remote server, counted at a real HTTP server on 127.0.0.1: no HEAD
on the way (a shard's index is a ranged GET from offset 0, whose response gives the size and
ETag), one GET per shard for each phase (shard index, minishard indices, values: nearby
ranges read together), and a shard replaced between those GETs still found out without a
HEAD (the ETags of the GETs differ) and read again."""

from __future__ import annotations

import os
import shutil

import numpy as np

import ngshard

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=2,
                            minishard_index_encoding="gzip", data_encoding="gzip")


def items(n: int = 400, tag: bytes = b"v") -> dict[int, bytes]:
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(1, 2**64 - 1, n, np.uint64)).tolist()
    return {k: tag + b"-%d-" % k + rng.bytes(int(rng.integers(0, 200))) for k in keys}


def shard_ranges(requests: list) -> dict[str, list[int]]:
    """The start of each ranged GET, by shard file."""
    out: dict[str, list[int]] = {}
    for method, path, rng in requests:
        assert method == "GET" and rng, (method, path, rng)
        out.setdefault(path.rsplit("/", 1)[-1], []).append(int(rng[6:].split("-")[0]))
    return out


def test_a_batch_read_sends_no_head_and_one_get_per_shard_and_phase(http_server):
    want = items()
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
