"""The two hashes and the key -> (shard, minishard) bit math, against mmh3 and plain Python."""

from __future__ import annotations

import mmh3
import numpy as np
import pytest

from ngshard import ShardingSpec
from ngshard.sharded.hashing import PARALLEL_MIN, murmur_array, murmur_one

MASK64 = (1 << 64) - 1
EDGE_KEYS = [0, 1, 2, 3, 255, 256, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**63 + 1,
             MASK64 - 1, MASK64]
HASHES = ("identity", "murmurhash3_x86_128")


def ref_murmur(key: int) -> int:
    return mmh3.hash128(key.to_bytes(8, "little"), 0, False, signed=False) & MASK64


def ref_hash(hash_name: str, preshift: int, key: int) -> int:
    shifted = key >> preshift if preshift < 64 else 0
    return shifted if hash_name == "identity" else ref_murmur(shifted)


def some_keys(n: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return EDGE_KEYS + rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False).tolist()


@pytest.mark.parametrize(("key", "expected"), [
    (0, 0x4772B084E028AE41), (1, 0xE8BD67D616D4CE9A), (42, 0xC20B94F95119F47A)])
def test_murmur_vectors(key, expected):
    assert murmur_one(key) == expected
    assert int(murmur_array(np.array([key], np.uint64))[0]) == expected


def test_murmur_array_matches_mmh3_on_a_million_keys():
    keys = np.array(some_keys(1_000_000, seed=1), np.uint64)
    assert keys.size > PARALLEL_MIN  # one call over the threaded path
    expected = np.fromiter(map(ref_murmur, keys.tolist()), np.uint64, count=keys.size)
    got = murmur_array(keys)
    assert got.dtype == np.uint64 and got.shape == keys.shape
    mismatch = np.flatnonzero(got != expected)
    assert not mismatch.size, f"first wrong key: {int(keys[mismatch[0]])}"


def test_murmur_array_non_contiguous_and_empty():
    keys = np.array(some_keys(100, seed=2), np.uint64)
    np.testing.assert_array_equal(murmur_array(keys[::3]),
                                  [ref_murmur(k) for k in keys[::3].tolist()])
    assert murmur_array(np.zeros(0, np.uint64)).shape == (0,)


@pytest.mark.parametrize("hash_name", HASHES)
@pytest.mark.parametrize("preshift", range(65))
def test_hash_keys_matches_hash_one_and_reference(hash_name, preshift):
    spec = ShardingSpec(preshift_bits=preshift, hash=hash_name)
    keys = some_keys(300, seed=preshift)
    expected = [ref_hash(hash_name, preshift, k) for k in keys]
    assert [spec.hash_one(k) for k in keys] == expected
    got = spec.hash_keys(np.array(keys, np.uint64))
    assert got.dtype == np.uint64
    assert got.tolist() == expected


@pytest.mark.parametrize("hash_name", HASHES)
@pytest.mark.parametrize("preshift", [0, 7, 64])
@pytest.mark.parametrize(("mbits", "sbits"), [(0, 0), (0, 64), (3, 0), (32, 0), (32, 32),
                                              (13, 17)])
def test_locate_matches_bit_math(hash_name, preshift, mbits, sbits):
    spec = ShardingSpec(preshift_bits=preshift, hash=hash_name, minishard_bits=mbits,
                        shard_bits=sbits)
    keys = some_keys(200, seed=mbits * 100 + sbits)
    hashes = [ref_hash(hash_name, preshift, k) for k in keys]
    exp_mini = [h & ((1 << mbits) - 1) for h in hashes]
    exp_shard = [(h >> mbits) & ((1 << sbits) - 1) for h in hashes]
    shard, mini = spec.locate(np.array(keys, np.uint64))
    assert shard.dtype == mini.dtype == np.uint64
    assert shard.tolist() == exp_shard
    assert mini.tolist() == exp_mini
    # Python int lists, scalars and locate_one agree with the array path.
    shard_l, mini_l = spec.locate(keys)
    assert shard_l.tolist() == exp_shard and mini_l.tolist() == exp_mini
    for k, s, m in list(zip(keys, exp_shard, exp_mini))[:len(EDGE_KEYS) + 5]:
        assert spec.locate_one(k) == (s, m)
        s1, m1 = spec.locate(k)
        assert (int(s1), int(m1)) == (s, m)
        assert isinstance(s1, np.uint64) and isinstance(m1, np.uint64)


def test_locate_keeps_array_shape():
    spec = ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=2)
    keys = np.arange(12, dtype=np.uint64).reshape(3, 4)
    shard, mini = spec.locate(keys)
    assert shard.shape == mini.shape == (3, 4)
    flat_s, flat_m = spec.locate(keys.reshape(-1))
    np.testing.assert_array_equal(shard.reshape(-1), flat_s)
    np.testing.assert_array_equal(mini.reshape(-1), flat_m)
