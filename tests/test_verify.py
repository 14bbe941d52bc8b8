"""verify_kv finds every kind of damage, reports it per shard, and never crashes."""

from __future__ import annotations

import numpy as np

import ngshard
from ngshard.sharded import format as codec
from ngshard.verify import verify_kv

SPEC = ngshard.ShardingSpec(minishard_bits=1, shard_bits=1, data_encoding="gzip")


def write(tmp_path, n: int = 40) -> dict[int, bytes]:
    items = {k: b"value %d" % k for k in range(n)}
    ngshard.write_kv(tmp_path, SPEC, items)
    return items


def test_a_good_store_verifies(tmp_path):
    items = write(tmp_path)
    report = verify_kv(ngshard.open_kv(tmp_path, SPEC))
    assert report.ok and report.keys == len(items) and report.shards == 2
    assert report.garbage_bytes == 0 and "OK" in str(report)


def test_overlapping_chunks_are_reported(tmp_path):
    spec = ngshard.ShardingSpec(minishard_bits=0)
    keys = np.array([1, 2], np.uint64)
    # both chunks claim the same 4 bytes right after the 16-byte shard index
    parts, lengths = codec.encode_minishard_indices(
        np.zeros(2, np.uint64), keys, np.array([16, 16], np.uint64),
        np.array([4, 4], np.uint64), 16, 1, "raw")
    index = codec.encode_shard_index(np.array([[20, 20 + int(lengths[0])]]), 1)
    (tmp_path / "0.shard").write_bytes(index + b"abcd" + b"".join(parts))
    report = verify_kv(ngshard.open_kv(tmp_path, spec))
    assert not report.ok and "overlap" in str(report)
    assert ngshard.open_kv(tmp_path, spec).get_many([1, 2]) == {1: b"abcd", 2: b"abcd"}


def test_bad_chunks_truncated_shards_and_stray_files(tmp_path):
    write(tmp_path)
    first = tmp_path / "0.shard"
    data = bytearray(first.read_bytes())
    data[40:48] = b"\xff" * 8  # inside the first gzip chunk
    first.write_bytes(bytes(data))
    second = tmp_path / "1.shard"
    second.write_bytes(second.read_bytes()[:20])
    (tmp_path / "zz.shard").write_bytes(b"")
    report = verify_kv(ngshard.open_kv(tmp_path, SPEC))
    text = str(report)
    assert "0.shard (chunk" in text and "gzip" in text
    assert "1.shard" in text and "shorter than" in text
    assert "zz.shard: not a shard name" in text
    assert report.shards == 2
