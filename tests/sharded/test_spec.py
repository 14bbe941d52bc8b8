"""ShardingSpec: JSON binding and validation, shard file names, key checking."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from ngshard import InvalidKeyError, ShardingSpec, SpecError
from ngshard.sharded.spec import as_key_array, check_key

TYPE = "neuroglancer_uint64_sharded_v1"
FULL = {"@type": TYPE, "preshift_bits": 3, "hash": "murmurhash3_x86_128", "minishard_bits": 6,
        "shard_bits": 15, "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
MINIMAL = {"@type": TYPE, "preshift_bits": 0, "hash": "identity", "minishard_bits": 0,
           "shard_bits": 0}


def with_(**changes) -> dict:
    doc = dict(FULL)
    for name, value in changes.items():
        name = name.replace("type_", "@type")
        if value is dataclasses.MISSING:
            del doc[name]
        else:
            doc[name] = value
    return doc


# --- JSON binding --------------------------------------------------------------------------

def test_round_trip_writes_all_fields():
    spec = ShardingSpec.from_json(FULL)
    assert (spec.preshift_bits, spec.hash, spec.minishard_bits, spec.shard_bits,
            spec.minishard_index_encoding, spec.data_encoding) == (
        3, "murmurhash3_x86_128", 6, 15, "gzip", "gzip")
    assert spec.to_json() == FULL
    assert ShardingSpec.from_json(spec.to_json()) == spec
    assert ShardingSpec.from_json(json.dumps(FULL)) == spec
    assert ShardingSpec(**{k: v for k, v in FULL.items() if k != "@type"}) == spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.shard_bits = 1


def test_encodings_default_to_raw_and_are_always_written():
    spec = ShardingSpec.from_json(json.dumps(MINIMAL))
    assert spec.minishard_index_encoding == spec.data_encoding == "raw"
    assert spec.to_json() == {**MINIMAL, "minishard_index_encoding": "raw",
                              "data_encoding": "raw"}
    assert ShardingSpec() == spec


@pytest.mark.parametrize("doc", [
    with_(preshift_bits=64), with_(minishard_bits=32, shard_bits=32),
    with_(minishard_bits=0, shard_bits=64), with_(minishard_bits=20, shard_bits=44)])
def test_limits_are_accepted(doc):
    assert ShardingSpec.from_json(doc).to_json() == doc


M = dataclasses.MISSING


@pytest.mark.parametrize(("doc", "field"), [
    (with_(type_=M), "@type"),
    (with_(type_="neuroglancer_uint64_sharded_v2"), "@type"),
    (with_(hash=M), "hash"),
    (with_(minishard_bits=M), "minishard_bits"),
    (with_(shard_bits=M), "shard_bits"),
    (with_(preshift_bits=M), "preshift_bits"),
    (with_(hash="murmurhash3_x64_128"), "hash"),
    (with_(hash=None), "hash"),
    (with_(minishard_index_encoding="zstd"), "minishard_index_encoding"),
    (with_(data_encoding="jpeg"), "data_encoding"),
    (with_(data_encoding=None), "data_encoding"),
    (with_(preshift_bits=65), "preshift_bits"),
    (with_(minishard_bits=33, shard_bits=0), "minishard_bits"),
    (with_(minishard_bits=10, shard_bits=55), "shard_bits"),
    (with_(minishard_bits=0, shard_bits=65), "shard_bits"),
    (with_(preshift_bits=-1), "preshift_bits"),
    (with_(minishard_bits=-1), "minishard_bits"),
    (with_(shard_bits=-1), "shard_bits"),
    (with_(minishard_bits=True), "minishard_bits"),
    (with_(preshift_bits=False), "preshift_bits"),
    (with_(shard_bits=4.0), "shard_bits"),
    (with_(preshift_bits="3"), "preshift_bits"),
    (with_(shard_bits=None), "shard_bits"),
    (with_(shard_size=7), "shard_size"),
])
def test_invalid_spec_names_the_field(doc, field):
    with pytest.raises(SpecError, match=field):
        ShardingSpec.from_json(doc)
    with pytest.raises(SpecError, match=field):
        ShardingSpec.from_json(json.dumps(doc))


@pytest.mark.parametrize("doc", [[FULL], None, 3, "[1, 2]", '"text"', "null", "{", "",
                                 "{'@type': 'neuroglancer_uint64_sharded_v1'}"])
def test_non_object_or_invalid_json(doc):
    with pytest.raises(SpecError):
        ShardingSpec.from_json(doc)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"preshift_bits": 65}, "preshift_bits"),
    ({"preshift_bits": -1}, "preshift_bits"),
    ({"hash": "md5"}, "hash"),
    ({"minishard_bits": True}, "minishard_bits"),
    ({"minishard_bits": 33}, "minishard_bits"),
    ({"minishard_bits": 20, "shard_bits": 45}, "shard_bits"),
    ({"shard_bits": 2.0}, "shard_bits"),
    ({"minishard_index_encoding": "zstd"}, "minishard_index_encoding"),
    ({"data_encoding": "GZIP"}, "data_encoding"),
])
def test_constructor_validates(kwargs, field):
    with pytest.raises(SpecError, match=field):
        ShardingSpec(**kwargs)


@pytest.mark.parametrize(("mbits", "sbits"), [(0, 0), (5, 3), (32, 32)])
def test_sizes(mbits, sbits):
    spec = ShardingSpec(minishard_bits=mbits, shard_bits=sbits)
    assert (spec.num_minishards, spec.num_shards, spec.shard_index_size) == (
        2**mbits, 2**sbits, 16 * 2**mbits)


# --- shard file names ----------------------------------------------------------------------

@pytest.mark.parametrize(("sbits", "shard", "name"), [
    (0, 0, "0.shard"), (1, 1, "1.shard"), (4, 0, "0.shard"), (4, 10, "a.shard"),
    (5, 1, "01.shard"), (5, 31, "1f.shard"), (8, 0xAB, "ab.shard"), (9, 0x1AB, "1ab.shard"),
    (12, 1, "001.shard"), (64, 2**64 - 1, "ffffffffffffffff.shard"),
    (64, 2**63, "8000000000000000.shard"), (60, 5, "000000000000005.shard")])
def test_shard_filename(sbits, shard, name):
    spec = ShardingSpec(minishard_bits=64 - sbits if sbits > 32 else 0, shard_bits=sbits)
    assert spec.shard_filename(shard) == name
    assert spec.shard_filename(np.uint64(shard)) == name
    assert spec.parse_shard_filename(name) == shard


@pytest.mark.parametrize("sbits", [0, 1, 3, 4, 5, 8, 9, 12])
def test_parse_inverts_shard_filename_for_every_shard(sbits):
    spec = ShardingSpec(shard_bits=sbits)
    names = [spec.shard_filename(s) for s in range(spec.num_shards)]
    assert len(set(names)) == spec.num_shards
    assert all(len(n) == max(1, -(-sbits // 4)) + 6 for n in names)
    assert [spec.parse_shard_filename(n) for n in names] == list(range(spec.num_shards))


@pytest.mark.parametrize(("sbits", "shard"), [(0, 1), (0, -1), (5, 32), (5, -1), (64, 2**64)])
def test_shard_filename_out_of_range(sbits, shard):
    with pytest.raises(SpecError):
        ShardingSpec(shard_bits=sbits).shard_filename(shard)


@pytest.mark.parametrize(("sbits", "name"), [
    (0, "00.shard"), (0, "1.shard"), (5, "1.shard"), (5, "001.shard"), (5, "1F.shard"),
    (5, "1g.shard"), (5, "zz.shard"), (5, "20.shard"), (5, "-1.shard"), (5, "+1.shard"),
    (5, " 1.shard"), (5, "01.shard.tmp"), (5, "01.SHARD"), (5, "01.index"), (5, "01"),
    (5, ".shard"), (5, "01shard"), (4, "a.shard.tmp"), (12, "1_0.shard"),
    (64, "FFFFFFFFFFFFFFFF.shard"), (64, "fffffffffffffff.shard")])
def test_parse_shard_filename_rejects(sbits, name):
    spec = ShardingSpec(minishard_bits=64 - sbits if sbits > 32 else 0, shard_bits=sbits)
    assert spec.parse_shard_filename(name) is None


@pytest.mark.parametrize(("sbits", "name"), [
    (12, "0x1.shard"),           # int("0x1", 16) == 1
    (4, "\u0661.shard"),         # ARABIC-INDIC DIGIT ONE
    (8, "\uff11\uff12.shard"),   # FULLWIDTH DIGITS ONE TWO
])
def test_parse_shard_filename_rejects_non_canonical_hex(sbits, name):
    spec = ShardingSpec(shard_bits=sbits)
    assert spec.parse_shard_filename(name) is None


# --- keys ----------------------------------------------------------------------------------

BAD_KEYS = [-1, -(2**63), 2**64, 2**70, 1.5, 2.0, "3", b"3", True, False, None, np.float64(2.0),
            np.True_, np.int64(-1), 1 + 0j]


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_bad_key(key):
    with pytest.raises(InvalidKeyError):
        check_key(key)
    with pytest.raises(InvalidKeyError):
        as_key_array([5, key])
    with pytest.raises(InvalidKeyError):
        ShardingSpec().locate(key)
    assert issubclass(InvalidKeyError, ValueError)


@pytest.mark.parametrize("keys", [
    np.array([1.0, 2.0]), np.array([1, -1]), np.array([[3], [-2**63]], np.int64),
    np.array([True]), np.array(["1"]), np.array([1, -1], dtype=object),
    np.array([2**64], dtype=object), [2**63, -1], [1, 2**64], [1, 1.0]], ids=repr)
def test_bad_key_arrays(keys):
    with pytest.raises(InvalidKeyError):
        as_key_array(keys)
    with pytest.raises(InvalidKeyError):
        ShardingSpec().locate(keys)


BIG = [2**64 - 1, 0, 2**63, 7, 2**63 - 1, 2**63 + 12345, 1]


@pytest.mark.parametrize(("keys", "expected"), [
    (np.array(BIG, np.uint64), BIG),
    (np.array(BIG, np.uint64).reshape(7, 1), BIG),
    (np.array([0, 5, 2**63 - 1], np.int64), [0, 5, 2**63 - 1]),
    (np.array([0, 255], np.uint8), [0, 255]),
    (np.array([3, 2**32 - 1], np.uint32), [3, 2**32 - 1]),
    (BIG, BIG),
    (tuple(BIG), BIG),
    (iter(BIG), BIG),
    (np.array(BIG, dtype=object), BIG),
    ([np.uint64(2**64 - 1), 3, np.int32(4)], [2**64 - 1, 3, 4]),
    ([], []),
    (np.zeros(0, np.int64), []),
], ids=lambda v: type(v).__name__)
def test_keys_convert_exactly(keys, expected):
    arr = as_key_array(keys)
    assert arr.dtype == np.uint64 and arr.ndim == 1
    assert arr.tolist() == expected


@pytest.mark.parametrize(("key", "expected"), [
    (0, 0), (2**64 - 1, 2**64 - 1), (np.uint64(2**64 - 1), 2**64 - 1), (np.int64(5), 5),
    (np.uint8(9), 9)])
def test_check_key_accepts(key, expected):
    k = check_key(key)
    assert k == expected and type(k) is int
