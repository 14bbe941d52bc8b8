"""Interoperability with tensorstore's neuroglancer_uint64_sharded kvstore (the reference).

Each spec of a compact matrix (every value of every spec field at least once) is written by one
library and read back by the other, key for key.
"""

from __future__ import annotations

import json
import random
import time

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard

ts = pytest.importorskip("tensorstore")

MAX_KEY = 2**64 - 1

# id: (hash, preshift_bits, minishard_bits, shard_bits, minishard_index_encoding, data_encoding)
SPECS = {
    "typical_raw": ("murmurhash3_x86_128", 0, 6, 4, "raw", "raw"),
    "typical_gzip": ("murmurhash3_x86_128", 0, 6, 4, "gzip", "gzip"),
    "murmur_p3": ("murmurhash3_x86_128", 3, 5, 2, "raw", "gzip"),
    "murmur_m0_s9": ("murmurhash3_x86_128", 0, 0, 9, "gzip", "raw"),
    "identity_p3": ("identity", 3, 4, 3, "gzip", "raw"),
    "identity_s0": ("identity", 0, 5, 0, "raw", "gzip"),
    "identity_m0_s0": ("identity", 0, 0, 0, "gzip", "gzip"),
    "identity_p64": ("identity", 64, 2, 5, "raw", "raw"),
}


def spec_json(hash_, preshift, minishard_bits, shard_bits, index_enc, data_enc) -> dict:
    return {"@type": "neuroglancer_uint64_sharded_v1", "hash": hash_,
            "preshift_bits": preshift, "minishard_bits": minishard_bits,
            "shard_bits": shard_bits, "minishard_index_encoding": index_enc,
            "data_encoding": data_enc}


SPEC_PARAMS = [pytest.param(spec_json(*fields), id=name) for name, fields in SPECS.items()]
TYPICAL = spec_json(*SPECS["typical_gzip"])


def make_items(seed: int = 0, n: int = 3000) -> dict[int, bytes]:
    """Random keys over the full uint64 range, the extremes, runs of 8 neighbouring keys (equal
    hashes under preshift_bits=3), small random values, several empty ones and one large one."""
    rng = random.Random(seed)
    keys = {rng.getrandbits(64) for _ in range(n)} | {0, MAX_KEY}
    for _ in range(5):
        base = rng.getrandbits(61) << 3
        keys |= set(range(base, base + 8))
    items = {k: rng.randbytes(rng.randrange(1, 64)) for k in sorted(keys)}
    for k in rng.sample(sorted(items), 8) + [MAX_KEY]:
        items[k] = b""
    items[rng.choice(sorted(items))] = rng.randbytes(100_000)
    return items


ITEMS = make_items()


def absent_keys(items: dict[int, bytes], seed: int = 1) -> list[int]:
    """Keys not in ``items``: random ones and neighbours of present keys."""
    rng = random.Random(seed)
    cands = [rng.getrandbits(64) for _ in range(50)] + [k ^ 1 for k in list(items)[:50]]
    out = [k for k in cands if k not in items]
    assert len(out) >= 50
    return out


def be(key: int) -> bytes:
    return key.to_bytes(8, "big")


def ts_open(path, spec: dict):
    return ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                            "base": f"file://{path}/", "metadata": spec}
                           ).result(timeout=PEER_TIMEOUT)


def ts_write(path, spec: dict, items: dict[int, bytes]) -> None:
    txn = ts.Transaction()
    kvt = ts_open(path, spec).with_transaction(txn)
    for k, v in items.items():
        kvt[be(k)] = v
    txn.commit_async().result(timeout=PEER_TIMEOUT)


def ts_read(path, spec: dict, keys) -> dict[int, bytes]:
    """{key: value} of the keys tensorstore finds (state 'value'); absent keys are left out."""
    kv = ts_open(path, spec)
    futures = [(k, kv.read(be(k))) for k in keys]
    out = {}
    for k, f in futures:
        r = f.result(timeout=PEER_TIMEOUT)
        assert r.state in ("value", "missing")
        if r.state == "value":
            out[k] = bytes(r.value)
    return out


def ts_list(path, spec: dict) -> list[int]:
    listed = ts_open(path, spec).list().result(timeout=PEER_TIMEOUT)
    return [int.from_bytes(k, "big") for k in listed]


def shard_files(path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.shard"))}


def assert_ngshard_holds(kv: ngshard.ShardedKV, items: dict[int, bytes], absent: list[int]):
    """``kv`` holds exactly ``items``, through every read path."""
    assert kv.get_many(list(items) + absent) == items
    empty = [k for k, v in items.items() if not v]
    for k in list(items)[::100] + empty[:3] + [max(items, key=lambda k: len(items[k]))]:
        assert kv[k] == items[k]
    for k in absent[:10]:
        assert k not in kv
        with pytest.raises(KeyError):
            kv[k]
    listed = kv.keys_array()
    assert listed.dtype == np.uint64
    assert sorted(listed.tolist()) == sorted(items)  # sorted lists: duplicates would show
    assert len(kv) == len(items)
    assert sorted(kv) == sorted(items)


@pytest.mark.parametrize("spec", SPEC_PARAMS)
def test_tensorstore_writes_ngshard_reads(tmp_path, spec):
    ts_write(tmp_path, spec, ITEMS)
    assert_ngshard_holds(ngshard.open_kv(tmp_path, spec), ITEMS, absent_keys(ITEMS))


WRITE_PARAMS = [pytest.param(*s.values, "write_kv", id=s.id) for s in SPEC_PARAMS]
WRITE_PARAMS.append(pytest.param(TYPICAL, "mode_w", id="typical_gzip-mode_w"))


@pytest.mark.parametrize("spec, how", WRITE_PARAMS)
def test_ngshard_writes_tensorstore_reads(tmp_path, spec, how):
    if how == "write_kv":
        ngshard.write_kv(tmp_path, spec, ITEMS)
    else:
        with ngshard.open_kv(tmp_path, spec, mode="w") as kv:
            for k, v in ITEMS.items():
                kv[k] = v
    absent = absent_keys(ITEMS)
    assert ts_read(tmp_path, spec, list(ITEMS) + absent) == ITEMS
    assert sorted(ts_list(tmp_path, spec)) == sorted(ITEMS)


@pytest.mark.parametrize("writer", ["tensorstore", "ngshard"])
def test_keys_of_missing_shards_are_absent(tmp_path, writer):
    spec = TYPICAL
    parsed = ngshard.ShardingSpec.from_json(spec)
    shards, _ = parsed.locate(np.arange(2000, dtype=np.uint64))
    items = {k: b"v%d" % k for k in range(2000) if shards[k] == 5}
    others = [k for k in range(2000) if shards[k] != 5][:40]
    assert len(items) > 50 and len(others) == 40
    (ts_write if writer == "tensorstore" else ngshard.write_kv)(tmp_path, spec, items)
    assert [p.name for p in tmp_path.glob("*.shard")] == [parsed.shard_filename(5)]
    kv = ngshard.open_kv(tmp_path, spec)
    assert_ngshard_holds(kv, items, others)
    assert ts_read(tmp_path, spec, list(items) + others) == items


def test_ngshard_output_is_deterministic(tmp_path, monkeypatch):
    """Same items (a dict, then reversed (key, value) pairs) give byte-identical shards."""
    a, b = tmp_path / "a", tmp_path / "b"
    ngshard.write_kv(a, TYPICAL, ITEMS)
    monkeypatch.setattr(time, "time", lambda: 2e9)  # a gzip header must not record the clock
    ngshard.write_kv(b, TYPICAL, reversed(list(ITEMS.items())))
    first = shard_files(a)
    assert len(first) == 16
    assert shard_files(b) == first


def test_overwrite_removes_obsolete_shards(tmp_path):
    spec = TYPICAL
    parsed = ngshard.ShardingSpec.from_json(spec)
    ngshard.write_kv(tmp_path, spec, ITEMS)
    (tmp_path / "info").write_text(json.dumps({"note": "replaced", "sharding": spec}))
    (tmp_path / "README").write_text("not the store's")
    assert len(shard_files(tmp_path)) == 16
    shards, _ = parsed.locate(np.array(list(ITEMS), np.uint64))
    new = {k: v[::-1] + b"!" for (k, v), s in zip(ITEMS.items(), shards.tolist()) if s in (2, 7)}
    with pytest.raises(ngshard.ExistsError, match=f"{tmp_path} holds a sharded store"):
        ngshard.write_kv(tmp_path, spec, new)
    assert len(shard_files(tmp_path)) == 16
    ngshard.write_kv(tmp_path, spec, new, overwrite=True)
    assert sorted(shard_files(tmp_path)) == [parsed.shard_filename(s) for s in (2, 7)]
    # the old store's info is replaced whole; files that are not the store's stay
    assert json.loads((tmp_path / "info").read_text()) == {"sharding": parsed.to_json()}
    assert (tmp_path / "README").read_text() == "not the store's"
    gone = [k for k in ITEMS if k not in new][:50]
    assert_ngshard_holds(ngshard.open_kv(tmp_path, spec), new, gone)
    assert ts_read(tmp_path, spec, list(new) + gone) == new
    assert sorted(ts_list(tmp_path, spec)) == sorted(new)
