"""The neuroglancer_uint64_sharded_v1 format as the fuzzer needs it, written independently of
ngshard from the spec: where a key lives, a shard file's minishard tables, edits of them, and
the defects of a damaged file that ngshard's whole-shard checks see."""

from __future__ import annotations

import gzip
import struct
import zlib
from dataclasses import dataclass, field

import mmh3
import numpy as np

MASK = (1 << 64) - 1
U64 = np.dtype("<u8")
MiB = 1 << 20
SHARD_TYPE = "neuroglancer_uint64_sharded_v1"

# --- the sharded format, written independently of ngshard (the originals are valid) ---------

def hash_key(spec: dict, key: int) -> int:
    shifted = key >> spec["preshift_bits"] if spec["preshift_bits"] < 64 else 0
    if spec["hash"] == "identity":
        return shifted
    return mmh3.hash128(shifted.to_bytes(8, "little"), 0, False) & MASK


def locate(spec: dict, key: int) -> tuple[int, int]:
    """(shard, minishard) of a key."""
    h, m = hash_key(spec, key), spec["minishard_bits"]
    return (h >> m) & ((1 << spec["shard_bits"]) - 1), h & ((1 << m) - 1)


def index_end(spec: dict) -> int:
    return 16 << spec["minishard_bits"]


def encode(data: bytes, encoding: str) -> bytes:
    return gzip.compress(data, mtime=0) if encoding == "gzip" else data


def minishard_tables(spec: dict, data: bytes) -> dict[int, np.ndarray]:
    """The delta-coded [3, n] table of every non-empty minishard of a valid shard file."""
    end, out = index_end(spec), {}
    rel = np.frombuffer(data[:end], U64).reshape(-1, 2)
    for m, (a, b) in enumerate(rel.tolist()):
        if a != b:
            raw = data[end + a:end + b]
            if spec["minishard_index_encoding"] == "gzip":
                raw = gzip.decompress(raw)
            out[m] = np.frombuffer(raw, U64).reshape(3, -1).copy()
    return out


def absolute(table: np.ndarray, end: int) -> list[tuple[int, int, int]]:
    """(key, start, size) of each entry of a delta-coded table, arithmetic modulo 2**64."""
    out, key, pos = [], 0, end
    for dk, dpos, size in zip(*table.tolist()):
        key, start = (key + dk) & MASK, (pos + dpos) & MASK
        pos = (start + size) & MASK
        out.append((key, start, size))
    return out


def delta(entries: list[tuple[int, int, int]], end: int) -> np.ndarray:
    rows, key, pos = [[], [], []], 0, end
    for k, start, size in entries:
        rows[0].append((k - key) & MASK)
        rows[1].append((start - pos) & MASK)
        rows[2].append(size & MASK)
        key, pos = k, (start + size) & MASK
    return np.array(rows, np.uint64).reshape(3, -1)


def repoint(spec: dict, data: bytes, m: int, index: bytes) -> bytes:
    """``data`` with minishard m's (encoded) index appended and its shard index entry moved
    there."""
    end = index_end(spec)
    entry = struct.pack("<QQ", len(data) - end, len(data) - end + len(index))
    return data[:16 * m] + entry + data[16 * m + 16:] + index


def with_table(spec: dict, data: bytes, m: int, table: np.ndarray) -> bytes:
    raw = np.ascontiguousarray(table, U64).tobytes()
    return repoint(spec, data, m, encode(raw, spec["minishard_index_encoding"]))


def replace_chunk(spec: dict, data: bytes, key: int, payload: bytes) -> bytes:
    """``data`` with the stored (encoded) bytes of ``key`` replaced by ``payload``, appended."""
    m = locate(spec, key)[1]
    entries = absolute(minishard_tables(spec, data)[m], index_end(spec))
    entries = [(k, len(data), len(payload)) if k == key else (k, s, n) for k, s, n in entries]
    return with_table(spec, data + payload, m, delta(entries, index_end(spec)))


def stored_chunk(spec: dict, data: bytes, key: int) -> bytes | None:
    """The (data-decoded) bytes of ``key`` in a shard file, damaged or not; None where its own
    entries do not lead to them."""
    end, m = index_end(spec), locate(spec, key)[1]
    try:
        a, b = struct.unpack_from("<QQ", data, 16 * m)
        raw = data[end + a:end + b]
        raw = gzip.decompress(raw) if spec["minishard_index_encoding"] == "gzip" else raw
        for k, start, size in absolute(np.frombuffer(raw, U64).reshape(3, -1), end):
            if k == key and start + size <= len(data):
                chunk = data[start:start + size]
                return gzip.decompress(chunk) if spec["data_encoding"] == "gzip" else chunk
    except (struct.error, ValueError, OSError, EOFError, zlib.error):
        pass
    return None


@dataclass
class Damage:
    """What is wrong in a (damaged) shard file, as ngshard's whole-shard checks see it."""

    shard: set[str] = field(default_factory=set)
    minishards: dict[int, set[str]] = field(default_factory=dict)
    cross: set[int] = field(default_factory=set)  # keys in their own and another minishard

    def has(self, defect: str, minishard: int | None = None) -> bool:
        if defect in self.shard:
            return True
        ms = self.minishards.values() if minishard is None else \
            [self.minishards.get(minishard, set())]
        return any(defect in s for s in ms)


def analyze(spec: dict, data: bytes) -> Damage:
    """The defects of a shard file that ngshard checks beyond the key being read, and the keys
    that also sit under a wrong minishard."""
    dmg, size, end = Damage(), len(data), index_end(spec)
    if size < end:
        dmg.shard.add("short" if size else "empty")
        return dmg
    rel = [(a, b) for a, b in np.frombuffer(data[:end], U64).reshape(-1, 2).tolist()]
    good = [m for m, (a, b) in enumerate(rel) if a <= b <= size - end]
    if len(good) < len(rel):
        dmg.shard.add("bad entry")
    used = sorted((rel[m][0], rel[m][1]) for m in good if rel[m][0] < rel[m][1])
    if any(b0 > a1 for (_, b0), (a1, _) in zip(used, used[1:])):
        dmg.shard.add("overlap")
    owners: dict[int, set[int]] = {}
    for m in good:
        a, b = rel[m]
        if a == b:
            continue
        raw = data[end + a:end + b]
        if spec["minishard_index_encoding"] == "gzip":
            d = zlib.decompressobj(31)
            try:
                raw = d.decompress(raw, 16 * MiB)
            except zlib.error:
                raw = b"?"
        if len(raw) % 24:
            dmg.minishards[m] = {"undecodable"}
            continue
        table = np.frombuffer(raw, U64).reshape(3, -1)
        keys, sizes = np.cumsum(table[0], dtype=np.uint64), table[2]
        starts = np.cumsum(table[1] + sizes, dtype=np.uint64) + np.uint64(end) - sizes
        found = dmg.minishards.setdefault(m, set())
        if len(np.unique(keys)) < len(keys):
            found.add("dup")
        past = (starts < np.uint64(end)) | (starts > np.uint64(size)) | \
            (sizes > np.uint64(size) - np.minimum(starts, np.uint64(size)))
        if past.any():
            found.add("past eof")
        if len(keys) > 4096:
            continue
        for k in keys.tolist():
            owners.setdefault(k, set()).add(m)
    dmg.cross = {k for k, ms in owners.items() if len(ms) > 1 and locate(spec, k)[1] in ms}
    return dmg
