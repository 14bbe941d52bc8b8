"""An open reader never answers from what it knew of a shard that has changed since: a key
another writer added is found even after the reader cached its absence, and a shard replaced
by one of the same size (other offsets) is not read at the old offsets, locally and over HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=1,
                            minishard_index_encoding="gzip", data_encoding="raw")


@pytest.fixture(params=["local", "http"])
def place(request, tmp_path):
    """(directory the writers use, URL the reader opens)."""
    if request.param == "local":
        return tmp_path / "kv", str(tmp_path / "kv")
    server = request.getfixturevalue("http_server")
    return server.root / "kv", f"{server.base}/kv"


@pytest.mark.parametrize("strategy", ["append", "rewrite"])
def test_a_key_another_writer_adds_is_found_after_its_absence_was_read(place, strategy):
    path, url = place
    items = {k: b"old-%d" % k for k in range(0, 400, 2)}
    ngshard.write_kv(path, SPEC, items)
    added = [k for k in range(1, 400, 2)
             if SPEC.locate(k)[0] == SPEC.locate(0)[0]][:3]  # in a shard that exists
    reader = ngshard.open_kv(url, SPEC)
    for k in added:  # read absent: the reader caches the indices that say so
        assert reader.get(k) is None
    assert added[2] not in reader and reader.get_many(added) == {}
    with ngshard.open_kv(path, SPEC, "a", strategy=strategy) as writer:
        writer.update({k: b"new-%d" % k for k in added})
    # each kind of read first on its own key, before another read refreshes the cache
    assert reader.get(added[0]) == b"new-%d" % added[0]
    assert reader[added[1]] == b"new-%d" % added[1]
    assert added[2] in reader
    assert reader.get_many(added) == {k: b"new-%d" % k for k in added}
    assert reader.get(0) == b"old-0"


def test_a_key_another_process_adds_is_found(place):
    """The same with the writer in another process, its only link to the reader the files."""
    path, url = place
    ngshard.write_kv(path, SPEC, {0: b"zero"})
    reader = ngshard.open_kv(url, SPEC)
    assert reader.get(1) is None and reader.get(0) == b"zero"
    subprocess.run([sys.executable, "-c", "import sys, ngshard\n"
                    "with ngshard.open_kv(sys.argv[1], mode='a') as kv:\n"
                    "    kv[1] = b'one'\n", str(path)], check=True, timeout=PEER_TIMEOUT)
    assert reader.get(1) == b"one"


def shard_of(path) -> bytes:
    (name,) = [n for n in os.listdir(path) if n.endswith(".shard")]
    return (path / name).read_bytes()


def test_a_shard_replaced_by_one_of_the_same_size_is_read_afresh(place):
    path, url = place
    spec = ngshard.ShardingSpec(minishard_bits=0)  # one shard, one minishard, raw
    ngshard.write_kv(path, spec, {1: b"a" * 10, 2: b"b" * 30})
    reader = ngshard.open_kv(url, spec)
    assert reader[1] == b"a" * 10 and reader.get_many([1, 2]) == {1: b"a" * 10, 2: b"b" * 30}
    before, stat = shard_of(path), os.stat(path / "0.shard")
    ngshard.write_kv(path, spec, {1: b"c" * 30, 2: b"d" * 10}, overwrite=True)
    after, restat = shard_of(path), os.stat(path / "0.shard")
    # Same size, other offsets; a new file (what an ETag or a local generation tells apart).
    assert len(after) == len(before) and after != before
    assert (restat.st_ino, restat.st_mtime_ns) != (stat.st_ino, stat.st_mtime_ns)
    assert reader[1] == b"c" * 30
    assert reader.get_many([1, 2]) == {1: b"c" * 30, 2: b"d" * 10}
    assert reader[2] == b"d" * 10
    assert np.array_equal(np.sort(reader.keys_array()), [1, 2])
