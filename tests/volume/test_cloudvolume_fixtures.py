"""Golden stores written by cloud-volume (fixtures/cloudvolume, see its README): ngshard reads
every key as recorded in expected.json, and tensorstore agrees (so the fixtures are valid)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from peers import PEER_TIMEOUT

import ngshard

FIXTURES = Path(__file__).parents[2] / "fixtures" / "cloudvolume"
CASES = ["murmur_gzip", "identity_raw", "identity_noshard"]
MAX_KEY = 2**64 - 1


def load_case(name: str) -> tuple[Path, dict, dict[int, str], dict[int, bytes], list[int]]:
    """(directory, sharding spec, key -> sha256 hex, key -> exact value, some absent keys)."""
    case_dir = FIXTURES / name
    spec = json.loads((case_dir / "info").read_text())["sharding"]
    expected = json.loads((case_dir / "expected.json").read_text())
    exact = {int(k): bytes.fromhex(v) for k, v in expected.pop("values_hex").items()}
    digests = {int(k): v for k, v in expected.items()}
    assert exact and set(exact) <= set(digests)
    top = max(digests)
    cands = [1, 2, 3, 4, 5, 12345, top + 1, top + 4, 2**32, 2**63, MAX_KEY - 1, MAX_KEY]
    absent = [k for k in cands if k not in digests and k <= MAX_KEY]
    assert len(absent) >= 5
    return case_dir, spec, digests, exact, absent


@pytest.mark.parametrize("name", CASES)
def test_ngshard_reads_fixture(name):
    case_dir, spec, digests, exact, absent = load_case(name)
    kv = ngshard.open_kv(case_dir)
    assert kv.spec == ngshard.ShardingSpec.from_json(spec)
    got = kv.get_many(list(digests) + absent)
    assert {k: hashlib.sha256(v).hexdigest() for k, v in got.items()} == digests
    for k, v in exact.items():
        assert got[k] == v
        assert kv[k] == v
    assert sorted(kv.keys_array().tolist()) == sorted(digests)
    assert len(kv) == len(digests)
    for k in absent:
        assert k not in kv
        with pytest.raises(KeyError):
            kv[k]


@pytest.mark.parametrize("name", CASES)
def test_tensorstore_agrees_on_fixture(name):
    ts = pytest.importorskip("tensorstore")
    case_dir, spec, digests, _, absent = load_case(name)
    store = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                             "base": f"file://{case_dir}/", "metadata": spec}
                            ).result(timeout=PEER_TIMEOUT)
    keys = list(digests) + absent
    futures = [store.read(k.to_bytes(8, "big")) for k in keys]
    results = [f.result(timeout=PEER_TIMEOUT) for f in futures]
    theirs = {k: bytes(r.value) for k, r in zip(keys, results) if r.state == "value"}
    assert all(r.state in ("value", "missing") for r in results)
    assert theirs == ngshard.open_kv(case_dir).get_many(keys)
    assert set(theirs) == set(digests)
    listed = sorted(int.from_bytes(k, "big") for k in store.list().result(timeout=PEER_TIMEOUT))
    assert listed == sorted(digests)
