"""What a read asks a server for: over a real HTTP server that records requests, a region read
reads each shard index once (and not again while the shard is unchanged), then the inner
chunks it needs in coalesced ranges, never a whole shard."""

from __future__ import annotations

import numpy as np
import pytest

from ngshard.errors import ChangedError
from ngshard.zarr import create_array, open_array


def ranged_gets(requests):
    return [(path, rng) for method, path, rng in requests if method == "GET" and rng]


def test_one_index_read_per_shard_and_coalesced_ranges(http_server):
    root = http_server.root / "a"
    arr = create_array(root, (32, 32), "uint16", (4, 4), shards=(16, 16), codecs=[
        {"name": "bytes", "configuration": {"endian": "little"}}])
    data = np.arange(32 * 32, dtype=np.uint16).reshape(32, 32)
    arr[...] = data
    remote = open_array(f"{http_server.base}/a")
    requests = http_server.requests
    requests.clear()
    # rows 2..9 of every shard column: inner chunk rows 0-2 of the top shards, in 2 shards;
    # within a shard the chunks of a row of inner chunks lie side by side (C order)
    np.testing.assert_array_equal(remote[2:10, :], data[2:10, :])
    gets = ranged_gets(requests)
    shards = {"/a/c/0/0", "/a/c/0/1"}
    chunk, index_size = 4 * 4 * 2, 16 * 16 + 4  # 16 inner chunks a shard, + crc32c
    index_at = f"bytes={16 * chunk}-{16 * chunk + index_size - 1}"
    index_reads = [(p, r) for p, r in gets if r == index_at]
    assert sorted(p for p, _ in index_reads) == sorted(shards)
    data_reads = [(p, r) for p, r in gets if (p, r) not in index_reads]
    # rows 2..9: inner chunk rows 0-2 of each shard, 12 chunks side by side (C order):
    # one read a shard, of exactly those chunks
    assert sorted(data_reads) == [(p, f"bytes=0-{12 * chunk - 1}") for p in sorted(shards)]
    assert not [r for m, p, r in requests if m == "GET" and not r and "/c/" in p]
    requests.clear()
    np.testing.assert_array_equal(remote[12:14, 3:20], data[12:14, 3:20])
    gets = ranged_gets(requests)
    assert not [g for g in gets if g in index_reads]  # indices from the cache
    assert len(gets) == 2  # one coalesced range per shard


def test_replaced_shard_index_read_again(http_server):
    root = http_server.root / "a"
    arr = create_array(root, (8, 8), "uint8", (4, 4), shards=(8, 8))
    arr[...] = 1
    remote = open_array(f"{http_server.base}/a")
    assert (remote[...] == 1).all()
    arr[:4, :4] = 2  # the shard is replaced (new size, ETag)
    expected = np.ones((8, 8), np.uint8)
    expected[:4, :4] = 2
    np.testing.assert_array_equal(remote[...], expected)



class Replaced:
    """The array's real storage, but another writer replaces the shard just before every
    ``every``-th read of byte ranges (2: each data read, after its index was read), ``times``
    times."""

    def __init__(self, storage, replace, times, every):
        self.storage, self.replace, self.times, self.every = storage, replace, times, every
        self.calls = 0

    def __getattr__(self, name):
        return getattr(self.storage, name)

    def read_ranges(self, requests):
        self.calls += 1
        if self.calls % self.every == 0 and self.times:
            self.times -= 1
            self.replace(self.times)
        return self.storage.read_ranges(requests)


def replaced_reader(path, times, every):
    arr = create_array(path, (8, 8), "uint8", (4, 4), shards=(8, 8))
    arr[...] = 1

    def replace(n):
        arr[:4, :4 + n % 4] = 2 + n  # a new shard, of another size

    reader = open_array(path).encoded().reader
    reader.storage = Replaced(reader.storage, replace, times, every)
    return reader


def test_a_shard_replaced_between_index_and_data_is_read_again(tmp_path):
    reader = replaced_reader(tmp_path / "a", 3, 2)
    positions = np.array([[0, 0], [1, 1]])
    got = reader.get(positions)
    fresh = open_array(tmp_path / "a").encoded().reader.get(positions)
    assert [bytes(g) for g in got] == [bytes(f) for f in fresh]
    assert reader.storage.times == 0 and reader.storage.calls == 2 * (3 + 1)


def test_a_shard_replaced_while_its_index_is_read_is_listed_afresh(tmp_path):
    reader = replaced_reader(tmp_path / "a", 3, 1)
    listed = reader.list_positions()
    assert reader.storage.times == 0 and reader.storage.calls == 3 + 1
    fresh = open_array(tmp_path / "a").encoded().reader.list_positions()
    np.testing.assert_array_equal(listed, fresh)


@pytest.mark.parametrize("every", [1, 2])
def test_a_shard_that_never_stops_changing_is_refused(tmp_path, every):
    reader = replaced_reader(tmp_path / "a", 100, every)
    with pytest.raises(ChangedError, match="c/0/0: changed under each of 11 tries"):
        reader.get(np.array([[0, 0]]))
    if every == 1:
        with pytest.raises(ChangedError, match="c/0/0: changed under each of 11 tries"):
            reader.list_positions()
