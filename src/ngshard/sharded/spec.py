"""The sharding spec (neuroglancer_uint64_sharded_v1): JSON binding, validation and key location."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np

from ..errors import InvalidKeyError, SpecError
from ..jsondoc import parse_json
from ..types import DataEncoding, HashName
from .hashing import murmur_array, murmur_one

SHARDING_TYPE = "neuroglancer_uint64_sharded_v1"
HASHES: tuple[str, ...] = get_args(HashName)
ENCODINGS: tuple[str, ...] = get_args(DataEncoding)
_FIELDS = ("@type", "preshift_bits", "hash", "minishard_bits", "shard_bits",
           "minishard_index_encoding", "data_encoding")
MAX_KEY = (1 << 64) - 1


def _int_field(doc: dict, name: str, lo: int, hi: int) -> int:
    if name not in doc:
        raise SpecError(f"sharding spec: missing required field {name!r}")
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"sharding spec: {name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise SpecError(f"sharding spec: {name}={value} is outside [{lo}, {hi}]")
    return value


def _choice_field(doc: dict, name: str, choices: tuple[str, ...], default: str | None) -> str:
    value = doc.get(name, default)
    if value is None:
        raise SpecError(f"sharding spec: missing required field {name!r}")
    if value not in choices:
        raise SpecError(f"sharding spec: {name}={value!r} is not one of {', '.join(choices)}")
    return value


def check_key(key: Any) -> int:
    """The key as a Python int in [0, 2**64), or InvalidKeyError."""
    if isinstance(key, (bool, np.bool_)):
        raise InvalidKeyError(f"key must be an unsigned 64-bit integer, got {key!r}")
    try:
        k = operator.index(key)
    except TypeError:
        raise InvalidKeyError(f"key must be an unsigned 64-bit integer, got {key!r}") from None
    if not 0 <= k <= MAX_KEY:
        raise InvalidKeyError(f"key {k} is outside [0, 2**64)")
    return k


def as_key_array(keys: Any) -> np.ndarray:
    """Keys (any iterable of integers, or an integer array) as a 1-D uint64 array."""
    if isinstance(keys, np.ndarray):
        arr = keys.reshape(-1)
        if arr.dtype.kind == "u":
            return arr.astype(np.uint64, copy=False)
        if arr.dtype.kind == "i":
            if arr.size and arr.min() < 0:
                raise InvalidKeyError(f"key {int(arr.min())} is outside [0, 2**64)")
            return arr.astype(np.uint64)
        if arr.dtype.kind != "O":
            raise InvalidKeyError(f"keys must be unsigned 64-bit integers, got {arr.dtype}")
        keys = arr.tolist()
    keys = keys if isinstance(keys, (list, tuple)) else list(keys)
    # Plain Python ints are the common case: check them with C-speed builtins, convert at once.
    if set(map(type, keys)) <= {int}:
        if keys and (min(keys) < 0 or max(keys) > MAX_KEY):
            bad = min(keys) if min(keys) < 0 else max(keys)
            raise InvalidKeyError(f"key {bad} is outside [0, 2**64)")
        return np.array(keys, dtype=np.uint64)
    return np.fromiter(map(check_key, keys), dtype=np.uint64, count=len(keys))


@dataclass(frozen=True)
class ShardingSpec:
    """How uint64 keys map to shard files and minishards, and how the shards are encoded.

    >>> spec = ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=6, shard_bits=4)
    >>> spec.shard_filename(int(spec.locate(42)[0]))
    '1.shard'
    """

    preshift_bits: int = 0
    hash: HashName = "identity"
    minishard_bits: int = 0
    shard_bits: int = 0
    minishard_index_encoding: DataEncoding = "raw"
    data_encoding: DataEncoding = "raw"

    def __post_init__(self) -> None:
        # Validate through the JSON binding so both constructors give the same errors.
        ShardingSpec.from_json(self.to_json())

    @classmethod
    def from_json(cls, doc: dict | str) -> ShardingSpec:
        """Parse a spec from its JSON object (or JSON text); encodings default to "raw"."""
        if isinstance(doc, str):
            doc = parse_json(doc, "sharding spec")
        if not isinstance(doc, dict):
            raise SpecError(f"sharding spec must be a JSON object, got {type(doc).__name__}")
        if doc.get("@type") != SHARDING_TYPE:
            raise SpecError(f"sharding spec: @type must be {SHARDING_TYPE!r}, "
                            f"got {doc.get('@type')!r}")
        unknown = sorted(set(doc) - set(_FIELDS))
        if unknown:
            raise SpecError(f"sharding spec: unknown field(s) {', '.join(unknown)}")
        minishard_bits = _int_field(doc, "minishard_bits", 0, 32)
        fields = dict(
            preshift_bits=_int_field(doc, "preshift_bits", 0, 64),
            hash=_choice_field(doc, "hash", HASHES, None),
            minishard_bits=minishard_bits,
            shard_bits=_int_field(doc, "shard_bits", 0, 64 - minishard_bits),
            minishard_index_encoding=_choice_field(doc, "minishard_index_encoding", ENCODINGS,
                                                   "raw"),
            data_encoding=_choice_field(doc, "data_encoding", ENCODINGS, "raw"),
        )
        spec = object.__new__(cls)
        for name, value in fields.items():
            object.__setattr__(spec, name, value)
        return spec

    def to_json(self) -> dict:
        """The spec as a JSON object, every field written."""
        return {
            "@type": SHARDING_TYPE,
            "preshift_bits": self.preshift_bits,
            "hash": self.hash,
            "minishard_bits": self.minishard_bits,
            "shard_bits": self.shard_bits,
            "minishard_index_encoding": self.minishard_index_encoding,
            "data_encoding": self.data_encoding,
        }

    @property
    def num_shards(self) -> int:
        return 1 << self.shard_bits

    @property
    def num_minishards(self) -> int:
        return 1 << self.minishard_bits

    @property
    def shard_index_size(self) -> int:
        """Bytes of the fixed-size shard index at the start of every shard file."""
        return 16 << self.minishard_bits

    def hash_one(self, key: int) -> int:
        """The hash of one key (a Python int in [0, 2**64))."""
        shifted = key >> self.preshift_bits if self.preshift_bits < 64 else 0
        return shifted if self.hash == "identity" else murmur_one(shifted)

    def hash_keys(self, keys: Any) -> np.ndarray:
        """The hashes of many keys as a uint64 array."""
        keys = as_key_array(keys)
        if self.preshift_bits == 0:
            shifted = keys
        elif self.preshift_bits < 64:
            shifted = keys >> np.uint64(self.preshift_bits)
        else:
            shifted = np.zeros_like(keys)
        return shifted if self.hash == "identity" else murmur_array(shifted)

    def locate_one(self, key: int) -> tuple[int, int]:
        """(shard, minishard) of one key, with Python ints (the fast path for single reads)."""
        h = self.hash_one(key)
        return (h >> self.minishard_bits) & (self.num_shards - 1), h & (self.num_minishards - 1)

    def locate(self, keys: Any) -> tuple[Any, Any]:
        """(shard, minishard) of a key, or of each key of an array, as uint64 numbers."""
        if np.ndim(keys) == 0 and not isinstance(keys, np.ndarray):
            one = self.locate_one(check_key(keys))
            return np.uint64(one[0]), np.uint64(one[1])
        h = self.hash_keys(keys)
        minishard = h & np.uint64(self.num_minishards - 1)
        shard = (h >> np.uint64(self.minishard_bits)) & np.uint64(self.num_shards - 1)
        shape = np.shape(keys)
        return shard.reshape(shape), minishard.reshape(shape)

    def shard_filename(self, shard: int) -> str:
        """File name of a shard: lowercase hex zero padded to ceil(shard_bits / 4) digits."""
        shard = operator.index(shard)
        if not 0 <= shard < self.num_shards:
            raise SpecError(f"shard {shard} is outside [0, {self.num_shards})")
        return f"{shard:0{(self.shard_bits + 3) // 4}x}.shard"

    def parse_shard_filename(self, name: str) -> int | None:
        """The shard number of a file name this spec would produce, else None."""
        stem, _, ext = name.rpartition(".")
        if ext != "shard" or not stem.isascii():
            return None
        try:
            shard = int(stem, 16)
        except ValueError:
            return None
        ok = 0 <= shard < self.num_shards and self.shard_filename(shard) == name
        return shard if ok else None
