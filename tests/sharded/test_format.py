"""Binary encoders and decoders: golden bytes, round trips, and every kind of corruption."""

from __future__ import annotations

import struct
import time
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ngshard import CorruptDataError, ShardingSpec
from ngshard import compression as codec
from ngshard.compression import gzip_compress, gzip_decompress
from ngshard.sharded.format import (
    EMPTY_MINISHARD,
    MinishardIndex,
    decode_minishard_index,
    decode_minishard_indices,
    decode_shard_index,
    encode_minishard_indices,
    encode_shard,
    encode_shard_index,
)
from ngshard.sharded.reader import unique

U64 = (1 << 64) - 1
WHERE = "gs://bucket/layer/0a.shard"
ENCODINGS = ("raw", "gzip")


def u64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *(v % (1 << 64) for v in values))


def table(keys_delta, offsets_delta, sizes) -> bytes:
    """A raw minishard index: the [3, n] uint64le table."""
    return u64(*keys_delta, *offsets_delta, *sizes)


# --- gzip ----------------------------------------------------------------------------------

@given(st.binary(max_size=5000), st.integers(0, 9))
def test_gzip_round_trip(data, level):
    packed = gzip_compress(data, level)
    assert packed[:2] == b"\x1f\x8b"
    assert gzip_decompress(packed, WHERE) == data
    assert codec.decode(codec.encode(data, "gzip"), "gzip", WHERE) == data
    assert codec.encode(data, "raw") == codec.decode(data, "raw") == data


def test_gzip_concatenated_members():
    packed = gzip_compress(b"hello ") + gzip_compress(b"") + gzip_compress(b"world", 1)
    assert gzip_decompress(packed) == b"hello world"
    # libdeflate stops after the first stream: one with the same trailer after it is not lost
    assert gzip_decompress(gzip_compress(b"abc") * 2) == b"abcabc"


@pytest.mark.parametrize("packed", [gzip_compress(b"ab") + gzip_compress(b"c"),
                                    gzip_compress(b"abc") * 2, gzip_compress(b"") * 2])
def test_sharded_gzip_is_one_stream(packed):
    """A value or minishard index of several gzip streams is corrupt, as tensorstore and
    neuroglancer read them (two minishard indices' bytes would decode to a garbled table)."""
    with pytest.raises(CorruptDataError, match=f"{WHERE}: .* after the end of the gzip data"):
        codec.decode(packed, "gzip", WHERE)


@pytest.mark.parametrize("data", [
    b"", b"not gzip at all", gzip_compress(b"x" * 1000)[:-5], gzip_compress(b"abc")[:10],
    gzip_compress(b"abc") + b"\0\0", gzip_compress(b"abc") + b"junk",
    zlib.compress(b"abc"),  # zlib, not gzip
    gzip_compress(b"abc")[:-8] + u64(0),  # bad CRC and length
], ids=range(8))
def test_bad_gzip(data):
    with pytest.raises(CorruptDataError, match=WHERE):
        gzip_decompress(data, WHERE)
    with pytest.raises(CorruptDataError, match=WHERE):
        codec.decode(data, "gzip", WHERE)


# --- golden bytes --------------------------------------------------------------------------

def golden_shard() -> tuple[bytes, bytes, bytes]:
    """identity, M=1, S=0; keys 2 -> b"xyz" (minishard 0), 1 -> b"a", 3 -> b"bc" (minishard 1).

    Layout written by encode_shard: shard index (32 bytes), chunk data in (minishard, key)
    order, then the minishard indices in minishard order.
    """
    data = b"xyz" + b"a" + b"bc"                   # [32, 35), [35, 36), [36, 38)
    ms0 = table([2], [32 - 32], [3])               # key 2 at 32, size 3
    ms1 = table([1, 3 - 1], [35 - 32, 36 - 36], [1, 2])
    return data, ms0, ms1


def test_golden_raw_shard():
    spec = ShardingSpec(minishard_bits=1, shard_bits=0)
    keys = np.array([2, 1, 3], np.uint64)
    shard, mini = spec.locate(keys)
    assert shard.tolist() == [0, 0, 0] and mini.tolist() == [0, 1, 1]
    data, ms0, ms1 = golden_shard()
    assert len(ms0) == 24 and len(ms1) == 48
    # shard index, relative to its end (32): ms0 at [38, 62), ms1 at [62, 110)
    expected = u64(6, 30, 30, 78) + data + ms0 + ms1
    parts = encode_shard(mini, keys, [b"xyz", b"a", b"bc"], 2, "raw")
    assert b"".join(parts) == expected
    ranges = decode_shard_index(expected[:32], 2, len(expected), WHERE)
    assert ranges.tolist() == [[38, 62], [62, 110]]
    got = decode_minishard_index(expected[62:110], "raw", 32, len(expected), WHERE)
    assert got.keys.tolist() == [1, 3]
    assert got.starts.tolist() == [35, 36]
    assert got.sizes.tolist() == [1, 2]


def test_golden_gzip_index_shard():
    spec = ShardingSpec(minishard_bits=1, shard_bits=0, minishard_index_encoding="gzip")
    keys = np.array([2, 1, 3], np.uint64)
    _, mini = spec.locate(keys)
    data, ms0, ms1 = golden_shard()
    shard = b"".join(encode_shard(mini, keys, [b"xyz", b"a", b"bc"], 2, "gzip"))
    assert shard[32:38] == data
    rel = struct.unpack("<4Q", shard[:32])
    a, b, c, d = (x + 32 for x in rel)
    assert a == 38 and b == c and d == len(shard)  # the indices follow the data, in order
    assert gzip_decompress(shard[a:b]) == ms0
    assert gzip_decompress(shard[c:d]) == ms1


def test_empty_shard_bytes():
    parts = encode_shard(np.zeros(0, np.uint64), np.zeros(0, np.uint64), [], 4, "raw")
    assert b"".join(parts) == u64(*[0] * 8)
    assert decode_shard_index(b"".join(parts), 4, 64).tolist() == [[64, 64]] * 4


def test_shard_index_round_trip():
    ranges = np.array([[16 * 4, 100], [100, 100], [7, 2**64 - 1], [2**63, 2**63 + 5]], np.uint64)
    buf = encode_shard_index(ranges, 4)
    assert buf == u64(0, 36, 36, 36, 7 - 64, 2**64 - 65, 2**63 - 64, 2**63 - 59)
    ranges = np.array([[64, 80], [100, 100], [80, 90], [64, 64]], np.uint64)
    np.testing.assert_array_equal(decode_shard_index(encode_shard_index(ranges, 4), 4, 100),
                                  ranges)


def test_minishard_find():
    idx = MinishardIndex(*(np.array(v, np.uint64) for v in ([1, 5, 2**64 - 1], [10, 20, 30],
                                                              [1, 2, 3])))
    found, pos = idx.find(np.array([0, 1, 3, 5, 2**64 - 1, 2**64 - 2], np.uint64))
    assert found.tolist() == [False, True, False, True, True, False]
    assert pos[found].tolist() == [0, 1, 2]
    found, _ = EMPTY_MINISHARD.find(np.array([0, 7], np.uint64))
    assert found.tolist() == [False, False]


# --- round trips ---------------------------------------------------------------------------

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), mbits=st.integers(0, 4), sbits=st.integers(0, 3),
       hash_name=st.sampled_from(["identity", "murmurhash3_x86_128"]),
       index_encoding=st.sampled_from(ENCODINGS), data_encoding=st.sampled_from(ENCODINGS))
def test_shard_round_trip(data, mbits, sbits, hash_name, index_encoding, data_encoding):
    spec = ShardingSpec(hash=hash_name, minishard_bits=mbits, shard_bits=sbits,
                        minishard_index_encoding=index_encoding, data_encoding=data_encoding)
    items = data.draw(st.dictionaries(
        st.one_of(st.integers(0, U64), st.integers(0, 64), st.integers(U64 - 64, U64)),
        st.binary(max_size=64), max_size=60))
    keys = np.array(list(items), np.uint64)
    shards, minis = spec.locate(keys)
    for s in range(spec.num_shards):
        sel = np.flatnonzero(shards == s)
        order = sel[np.lexsort((keys[sel], minis[sel]))]
        k, m = keys[order], minis[order]
        values = [codec.encode(items[int(x)], data_encoding) for x in k]
        blob = b"".join(encode_shard(m, k, values, spec.num_minishards, index_encoding))
        index_end = spec.shard_index_size
        ranges = decode_shard_index(blob[:index_end], spec.num_minishards, len(blob), WHERE)
        got: dict[int, bytes] = {}
        nonempty = [i for i, (a, b) in enumerate(ranges.tolist()) if b > a]
        bufs = [blob[a:b] for a, b in ranges[nonempty].tolist()]
        many = decode_minishard_indices(bufs, index_encoding, index_end, len(blob), str)
        for mi, buf, idx2 in zip(nonempty, bufs, many):
            idx = decode_minishard_index(buf, index_encoding, index_end, len(blob), WHERE)
            for a, b in zip(idx, idx2):
                np.testing.assert_array_equal(a, b)
            assert (np.diff(idx.keys.astype(object)) > 0).all()
            assert spec.locate(idx.keys)[1].tolist() == [mi] * len(idx.keys)
            for key, start, size in zip(*(a.tolist() for a in idx)):
                assert key not in got
                got[key] = codec.decode(blob[start:start + size], data_encoding, WHERE)
        assert got == {int(x): items[int(x)] for x in k}


@st.composite
def minishard_entries(draw):
    num_minishards = 2 ** draw(st.integers(0, 3))
    index_end = 16 * num_minishards
    file_size = draw(st.one_of(st.integers(index_end, 10_000), st.integers(index_end, U64)))
    entries = []
    for m in range(num_minishards):
        ks = draw(st.lists(st.one_of(st.integers(0, U64), st.integers(0, 100)), unique=True,
                           max_size=8))
        for key in sorted(ks):
            size = draw(st.integers(0, file_size - index_end))
            start = draw(st.integers(index_end, file_size - size))
            entries.append((m, key, start, size))
    return num_minishards, index_end, file_size, entries


@settings(max_examples=200, deadline=None)
@given(case=minishard_entries(), encoding=st.sampled_from(ENCODINGS))
def test_minishard_indices_round_trip(case, encoding):
    num_minishards, index_end, file_size, entries = case
    m, k, s, z = (np.array(col, np.uint64).reshape(-1) for col in zip(*entries)) if entries \
        else (np.zeros(0, np.uint64),) * 4
    parts, lengths = encode_minishard_indices(m, k, s, z, index_end, num_minishards, encoding)
    assert len(lengths) == num_minishards
    blob = b"".join(parts)
    assert len(blob) == int(lengths.sum())
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    bufs = [blob[offsets[i]:offsets[i + 1]] for i in range(num_minishards)]
    nonempty = [i for i in range(num_minishards) if lengths[i]]
    decoded = decode_minishard_indices([bufs[i] for i in nonempty], encoding, index_end,
                                       file_size, str)
    got = [(mi, key, start, size) for mi, idx in zip(nonempty, decoded)
           for key, start, size in zip(*(a.tolist() for a in idx))]
    assert got == entries
    if encoding == "raw":
        assert all(lengths[i] == 24 * sum(e[0] == i for e in entries) for i in nonempty)


# --- corruption ----------------------------------------------------------------------------

def raises_corrupt(fn, *args, where=WHERE):
    with pytest.raises(CorruptDataError, match=where):
        fn(*args)


@pytest.mark.parametrize(("buf", "num_minishards", "file_size"), [
    (b"", 1, 100),
    (u64(0, 0, 0), 2, 100),                   # 24 of 32 bytes
    (u64(0, 0, 0, 0) + b"\0", 2, 100),        # too long
    (u64(0, 0, 0, 0), 2, 31),                 # file shorter than its own index
    (u64(5, 4), 1, 100),                      # end < start
    (u64(0, 0, 0, 85), 2, 100 + 16),          # past the end by one byte
    (u64(2**63, 2**63 + 8), 1, 1000),         # offset ~2**63
    (u64(0, 2**63), 1, 1000),
    (u64(2**64 - 16, 2**64 - 1), 1, 1000),
    (u64(2**64 - 1, 2**64 - 1), 1, 1000),     # empty but outside the file
])
def test_corrupt_shard_index(buf, num_minishards, file_size):
    t0 = time.perf_counter()
    raises_corrupt(decode_shard_index, buf, num_minishards, file_size, WHERE)
    assert time.perf_counter() - t0 < 1


def test_shard_index_accepts_range_ending_at_file_end():
    assert decode_shard_index(u64(0, 0, 0, 84), 2, 116, WHERE).tolist() == [[32, 32], [32, 116]]


RAW_BAD_MINISHARDS = {
    "23 bytes": table([1], [0], [1])[:23],
    "25 bytes": table([1], [0], [1]) + b"\0",
    "32 bytes": table([1], [0], [1]) + u64(0),
    "past end": table([1], [0], [69]),                 # [16, 85) in an 84-byte file
    "second past end": table([1, 1], [0, 60], [4, 5]),  # [80, 85)
    "size 2**63": table([1], [0], [2**63]),
    "size 2**64-1": table([1], [0], [U64]),
    "start 2**63": table([1], [2**63], [0]),
    "start wraps": table([1], [U64 - 16], [1]),        # start = 2**64 - 1
    "duplicate": table([5, 0], [0, 0], [1, 1]),
    "duplicate unsorted": table([5, U64, 1], [0, 0, 0], [1, 1, 1]),  # keys 5, 4, 5
}


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", list(RAW_BAD_MINISHARDS))
def test_corrupt_minishard_index(name, encoding):
    buf = codec.encode(RAW_BAD_MINISHARDS[name], encoding)
    t0 = time.perf_counter()
    raises_corrupt(decode_minishard_index, buf, encoding, 16, 84, WHERE)
    assert time.perf_counter() - t0 < 1
    # In a batch, the message names the bad index (the second one here).
    good = codec.encode(table([1], [0], [68]), encoding)  # [16, 84): exactly to the end
    with pytest.raises(CorruptDataError, match="index #1"):
        decode_minishard_indices([good, buf], encoding, 16, 84, lambda i: f"index #{i}")


@pytest.mark.parametrize("buf", [
    b"\x1f\x8b not gzip", b"", gzip_compress(table([1], [0], [1]))[:-3], table([1], [0], [1])])
def test_bad_gzip_minishard_index(buf):
    raises_corrupt(decode_minishard_index, buf, "gzip", 16, 84, WHERE)


def test_minishard_index_unsorted_is_sorted():
    idx = decode_minishard_index(table([9, U64 - 4], [0, 0], [1, 2]), "raw", 16, 84, WHERE)
    assert idx.keys.tolist() == [4, 9]
    assert idx.starts.tolist() == [17, 16]
    assert idx.sizes.tolist() == [2, 1]


FILE_SIZES = st.one_of(st.integers(0, 300), st.integers(0, U64))


@settings(max_examples=400, deadline=None)
@given(data=st.data(), num_minishards=st.sampled_from([1, 2, 4, 8]), file_size=FILE_SIZES)
def test_fuzz_decode_shard_index(data, num_minishards, file_size):
    n = 16 * num_minishards
    buf = data.draw(st.one_of(st.binary(min_size=n, max_size=n), st.binary(max_size=n + 8),
                              st.lists(st.sampled_from([0, 1, 16, 2**63, U64, file_size % 2**64,
                                                        max(file_size - n, 0)]),
                                       min_size=2 * num_minishards, max_size=2 * num_minishards
                                       ).map(lambda v: u64(*v))))
    try:
        ranges = decode_shard_index(buf, num_minishards, file_size, WHERE)
    except CorruptDataError as e:
        assert WHERE in str(e)
        return
    assert ranges.shape == (num_minishards, 2) and ranges.dtype == np.uint64
    for start, end in ranges.tolist():
        assert n <= start <= end <= file_size


@settings(max_examples=400, deadline=None)
@given(data=st.data(), encoding=st.sampled_from(ENCODINGS), file_size=FILE_SIZES,
       index_end=st.sampled_from([16, 64]))
def test_fuzz_decode_minishard_index(data, encoding, file_size, index_end):
    word = st.one_of(st.integers(0, U64), st.integers(0, 100), st.integers(U64 - 100, U64))
    raw = data.draw(st.one_of(st.binary(max_size=200),
                              st.lists(word, max_size=30).map(lambda v: u64(*v))))
    buf = data.draw(st.sampled_from([raw, gzip_compress(raw)])) if encoding == "gzip" else raw
    try:
        idx = decode_minishard_index(buf, encoding, index_end, file_size, WHERE)
    except CorruptDataError as e:
        assert WHERE in str(e)
        return
    keys, starts, sizes = (a.tolist() for a in idx)
    assert len(keys) == len(starts) == len(sizes)
    assert keys == sorted(set(keys))
    assert all(start + size <= file_size for start, size in zip(starts, sizes))


def reference_minishard_index(raw: bytes, index_end: int, file_size: int):
    """The format's definition, one entry at a time: (keys, starts, sizes) sorted by key, or
    "outside" where an entry lies outside the data region, "repeated" where a key repeats."""
    n = len(raw) // 24
    words = struct.unpack(f"<{3 * n}Q", raw)
    rows, key, at = [], 0, 0
    for i in range(n):
        key = (key + words[i]) % 2**64
        at = (at + words[n + i]) % 2**64
        start, size = (index_end + at) % 2**64, words[2 * n + i]
        at = (at + size) % 2**64
        if not index_end <= start <= file_size or size > file_size - start:
            return "outside"
        rows.append((key, start, size))
    rows.sort(key=lambda r: r[0])  # stable: as the decoder sorts
    if any(a[0] == b[0] for a, b in zip(rows, rows[1:])):
        return "repeated"
    return [list(col) for col in zip(*rows)] if rows else [[], [], []]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), file_size=st.one_of(st.integers(16, 400), st.integers(16, U64)))
def test_batches_of_minishard_indices_decode_as_the_format_defines(data, file_size):
    """Several indices decoded together (the compiled pass) give, index by index, what the
    format's definition gives: the same entries, or an error naming the first index with an
    entry outside the data region, else the first with a repeated key."""
    word = st.one_of(st.integers(0, 40), st.integers(0, U64), st.integers(U64 - 40, U64))
    tables = data.draw(st.lists(st.lists(st.tuples(word, word, word), max_size=6).map(
        lambda rows: u64(*(v for col in zip(*rows) for v in col)) if rows else b""),
        min_size=1, max_size=6))
    want = [reference_minishard_index(t, 16, file_size) for t in tables]
    for fault in ("outside", "repeated"):
        if fault in want:
            with pytest.raises(CorruptDataError, match=f"index #{want.index(fault)}:"):
                decode_minishard_indices(tables, "raw", 16, file_size, lambda i: f"index #{i}")
            return
    got = decode_minishard_indices(tables, "raw", 16, file_size, lambda i: f"index #{i}")
    assert [[a.tolist() for a in idx] for idx in got] == want


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.integers(0, 400), st.integers(0, 255), st.booleans())
def test_gzip_decoding_agrees_with_zlib_on_damaged_streams(payload, at, byte, cut):
    """The fast libdeflate path returns exactly what zlib would, or the error zlib gives."""
    packed = bytearray(gzip_compress(payload))
    if cut:
        del packed[at % (len(packed) + 1):]
    elif packed:
        packed[at % len(packed)] = byte
    try:
        expected = zlib.decompress(bytes(packed), 31)
        tail_ok = zlib.decompressobj(31)
        tail_ok.decompress(bytes(packed))
        expected = expected if tail_ok.eof and not tail_ok.unused_data else None
    except zlib.error:
        expected = None
    if expected is None:
        with pytest.raises(CorruptDataError):
            gzip_decompress(bytes(packed), WHERE)
    else:
        assert gzip_decompress(bytes(packed), WHERE) == expected


@given(st.lists(st.integers(0, U64), max_size=300), st.sampled_from(["u8", "i8", "u4", "i2"]),
       st.integers(1, 3))
def test_unique_gives_numpys_unique(values, dtype, ndim):
    """The sort-based unique every key path uses (numpy's hashes first: see _arrays) gives
    np.unique's values and dtype, of any shape, flattened."""
    arr = np.array(values, np.uint64).astype(dtype)
    block = 2 ** (ndim - 1)
    arr = arr[:len(arr) - len(arr) % block].reshape((-1,) + (2,) * (ndim - 1))
    got, want = unique(arr), np.unique(arr)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()
