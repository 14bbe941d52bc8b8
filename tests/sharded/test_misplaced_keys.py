"""Keys a writer put in a minishard (or shard) they do not hash to, as tensorstore sees them.

A reader looks a key up in its own minishard only, so such a copy cannot be read: tensorstore
reports the key missing, and every ngshard read (``get_many``, ``kv[k]``, ``get``, ``in``) must
agree, whatever other keys share the batch. Listing reads the minishard indices without
hashing what they hold, so it reports every key they list, misplaced ones and a key listed
twice included, as tensorstore's listing does.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard
from ngshard.sharded.format import assemble_shard

# identity hash: minishard = key & 3, shard = (key >> 2) & 1; 0.shard holds 0-3, 8-11, 16-19
ENTRIES = [  # (minishard the writer used, key, value)
    (0, 0, b"zero"), (1, 1, b"one"), (3, 3, b"three"), (0, 8, b"eight"),
    (0, 9, b"nine, misplaced below its own copy"), (1, 9, b"nine"),
    (2, 10, b"ten"), (3, 10, b"ten, misplaced above its own copy"),
    (0, 11, b"eleven, misplaced only"), (2, 16, b"sixteen, misplaced only"),
    (1, 4, b"four, in the wrong shard"),
]
READABLE = {0: b"zero", 1: b"one", 3: b"three", 8: b"eight", 9: b"nine", 10: b"ten"}
KEYS = list(range(20))


def spec_for(index_encoding: str) -> ngshard.ShardingSpec:
    return ngshard.ShardingSpec(hash="identity", minishard_bits=2, shard_bits=1,
                                minishard_index_encoding=index_encoding, data_encoding="raw")


@pytest.fixture(params=["raw", "gzip"])
def store(request, tmp_path):
    spec = spec_for(request.param)
    entries = sorted(ENTRIES, key=lambda e: e[:2])
    minishards, keys = (np.array([e[i] for e in entries], np.uint64) for i in (0, 1))
    values = [e[2] for e in entries]
    sizes = np.array([len(v) for v in values], np.uint64)
    parts = assemble_shard(minishards, keys, sizes, values, spec.num_minishards,
                           spec.minishard_index_encoding)
    (tmp_path / "0.shard").write_bytes(b"".join(parts))
    return tmp_path, spec


def tensorstore_view(path, spec) -> tuple[dict[int, bytes], list[int]]:
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{path}/",
                          "metadata": spec.to_json()}).result(timeout=PEER_TIMEOUT)
    reads = [(k, kv.read(k.to_bytes(8, "big"))) for k in KEYS]
    values = {k: bytes(r.value) for k, f in reads
              if (r := f.result(timeout=PEER_TIMEOUT)).state == "value"}
    return values, [int.from_bytes(k, "big") for k in kv.list().result(timeout=PEER_TIMEOUT)]


def test_reads_agree_with_tensorstore(store):
    path, spec = store
    expected, _ = tensorstore_view(path, spec)
    assert expected == READABLE  # the oracle says what the module docstring says
    kv = ngshard.open_kv(path, spec)
    assert kv.get_many(KEYS) == expected
    # every pair in one batch: a batch reads every minishard its keys need, so a misplaced
    # copy sits in the table it searches whenever the batch also wants that minishard
    for pair in itertools.combinations(KEYS, 2):
        assert kv.get_many(pair) == {k: expected[k] for k in pair if k in expected}, pair
    for k in KEYS:  # single-key reads, from a fresh store and from a warm cache
        for reader in (ngshard.open_kv(path, spec), kv):
            assert reader.get(k) == expected.get(k), k
            assert (k in reader) == (k in expected), k
            if k not in expected:
                with pytest.raises(KeyError):
                    reader[k]


def test_listing_reports_every_listed_key_as_tensorstore_does(store):
    path, spec = store
    _, listed = tensorstore_view(path, spec)
    assert sorted(listed) == sorted(key for _, key, _ in ENTRIES)  # 9 and 10 twice
    kv = ngshard.open_kv(path, spec)
    assert sorted(kv.keys_array().tolist()) == sorted(listed)
    assert len(kv) == len(listed)
    assert sum(s["keys"] for s in kv.stats()) == len(listed)
