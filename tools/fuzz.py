"""Fuzz ngshard's readers against tensorstore, the reference implementation, as the oracle.

Each case damages one file of a small store (a sharded key-value store, or a precomputed volume
of any encoding, sharded or not) and reads it with both libraries. They must agree: the same
value, or both an error. ngshard must never raise anything but NgShardError or KeyError, and its
peak memory during a read must stay below ``64 x the largest file + 64 MiB``.

Some differences are deliberate: ngshard checks a whole shard index or minishard index where
tensorstore looks only at the entry of the key it reads; and tensorstore cannot read some
valid files. Those are counted by class (``KNOWN``), after checking that the damaged file
really holds that defect and that ngshard's error names it; anything else is a mismatch,
printed with its case number for ``--replay``.

Cases are reproducible: case n of seed s damages, with its own generator, the base store of its
group (``GROUP`` consecutive cases share one base, written once: writing costs more than
reading). Usage::

    python tools/fuzz.py --cases 100000 --seed 1 --jobs 2
    python tools/fuzz.py --seed 1 --replay 4711      # one case, every comparison printed
    python tools/fuzz.py --surfaces all --cases 5000 # every other format surface, per surface

``--surfaces`` hands the run to ``tools/fuzz_surfaces.py`` (zarr v2/v3, volumes, skeletons,
meshes, annotations, segment properties, each case in a memory-limited child).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import gzip
import math
import multiprocessing
import os
import re
import resource
import shutil
import struct
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import mmh3
import numpy as np
import tensorstore as ts

import ngshard

GROUP = 50  # cases per base store
#: Seconds a tensorstore call may take before the run fails as hung (the test sets it to
#: tests/peers.py's); a timeout is never counted as tensorstore's "error" outcome.
PEER_TIMEOUT = 120
MASK = (1 << 64) - 1
U64 = np.dtype("<u8")
MiB = 1 << 20
SHARD_TYPE = "neuroglancer_uint64_sharded_v1"
VOLUME_KINDS = [  # (encoding, dtype, channel counts)
    ("raw", "uint8", (1, 2)), ("raw", "uint16", (1,)), ("raw", "uint64", (1, 2)),
    ("raw", "float32", (1,)), ("compressed_segmentation", "uint32", (1, 2)),
    ("compressed_segmentation", "uint64", (1, 2)), ("jpeg", "uint8", (1, 3)),
    ("png", "uint8", (1, 2, 3, 4)), ("png", "uint16", (1,))]

#: The differences counted apart from mismatches: ngshard's deliberate checks and leniencies,
#: and what tensorstore cannot read.
KNOWN = {
    "short": "shard file shorter than its shard index: ngshard refuses the file, tensorstore "
             "reads the entries that are there",
    "empty": "empty shard file: ngshard refuses it, tensorstore takes it for an empty shard "
             "(listing, whole-shard reads)",
    "bad entry": "bad shard index entry of another minishard: ngshard refuses the shard",
    "overlap": "overlapping minishard index ranges: ngshard refuses the shard",
    "past eof": "another chunk of the minishard lies outside the file: ngshard refuses the "
                "minishard, tensorstore only that chunk",
    "dup": "key twice in one minishard index: ngshard refuses the minishard, tensorstore reads "
           "one of the two",
    "jpeg cut": "jpeg cut after its image data: ngshard decodes it as if the end marker were "
                "there, tensorstore refuses",
    "unneeded minishard": "tensorstore's whole-shard read decodes a damaged minishard index "
                          "that no chunk read needs",
    "inflation limit": "gzip-wrapped volume chunk inflating past 4 x its voxels' bytes + 64 KiB: "
                       "ngshard refuses it, tensorstore reads it (compressed_segmentation allows "
                       "bytes after the data)",
    "interlaced png": "interlaced png: tensorstore reads none (libpng warns that it does not "
                      "handle the interlacing)",
    "png bit depth": "png of another sample size than the volume's: ngshard refuses, tensorstore "
                     "returns the bytes of its samples",
    "png crash": "16-bit png with tRNS or in a uint8 volume: libpng would write past "
                 "tensorstore's buffer, so tensorstore is not asked",
}
# ngshard's message for each defect it checks beyond the key being read
STRICT = [("shorter than its", ("short", "empty")), ("reversed or past the end", ("bad entry",)),
          ("overlapping minishard index bytes", ("overlap",)),
          ("the data region of the file", ("past eof",)), ("appears twice", ("dup",))]


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


# --- mutations --------------------------------------------------------------------------------

def pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def edge_values(rng, old: int, size: int, end: int, other: int) -> list[int]:
    """uint64 values that hit the checks: ends of the range, the file size, the index."""
    return [0, 1, MASK, MASK - 1, 1 << 63, (1 << 63) - 1, 1 << 32, size, size + 1, size - end,
            size - end + 1, end, (-end) & MASK, (old + 1) & MASK, (old - 1) & MASK,
            (old + int(rng.integers(-64, 64))) & MASK, (MASK - old + 1) & MASK, other,
            int(rng.integers(0, 1 << 62)) << 2]


def mutate_bytes(rng, data: bytes, hot: list[tuple[int, int]] = ()) -> tuple[bytes, str]:
    """A byte-level mutation, at a position in one of the ``hot`` regions half the time."""
    b = bytearray(data)
    kind = pick(rng, ["flip", "flip", "set", "truncate", "extend", "splice", "delete", "empty"])
    if not b and kind not in ("extend", "delete"):
        kind = "extend"
    regions = [(a, e) for a, e in hot if e > a and e <= len(b)]

    def pos() -> int:
        if regions and rng.random() < 0.5:
            a, e = pick(rng, regions)
            return int(rng.integers(a, e))
        return int(rng.integers(len(b)))

    if kind == "flip":
        for _ in range(int(rng.integers(1, 5))):
            b[pos()] ^= 1 << int(rng.integers(8))
    elif kind == "set":
        for _ in range(int(rng.integers(1, 5))):
            b[pos()] = pick(rng, [0, 0xFF, int(rng.integers(256))])
    elif kind == "truncate":
        cut = pos() if rng.random() < 0.7 else len(b) - int(rng.integers(1, min(len(b), 9) + 1))
        b = b[:cut]
    elif kind == "extend":
        extra = pick(rng, [bytes(int(rng.integers(1, 64))), rng.bytes(int(rng.integers(1, 64))),
                           bytes(b[-16:])])
        b += extra
    elif kind == "splice":
        n = int(rng.integers(1, 33))
        src, dst = pos(), pos()
        b[dst:dst + n] = b[src:src + n]
    elif kind == "delete":
        return None, "delete"
    else:
        b = bytearray()
    return bytes(b), kind


@functools.cache
def gzip_bomb(size: int) -> bytes:
    """A gzip stream of ``size`` zero bytes (a few sizes, made once each: compressing is slow)."""
    return gzip.compress(bytes(size), 9, mtime=0)


def mutate_shard(rng, spec: dict, data: bytes, keys: list[int]) -> tuple[bytes | None, str]:
    """A byte-level or structured mutation of a valid shard file."""
    end, size = index_end(spec), len(data)
    tables = minishard_tables(spec, data)
    rel = np.frombuffer(data[:end], U64).reshape(-1, 2)
    hot = [(0, end)] + [(end + int(a), end + int(b)) for a, b in rel.tolist() if a != b]
    kind = pick(rng, ["bytes", "bytes", "index field", "table field", "entries", "bomb",
                      "bad gzip"])
    if kind == "bytes" or not tables:
        return mutate_bytes(rng, data, hot)
    m = pick(rng, sorted(tables)) if rng.random() < 0.8 else int(rng.integers(len(rel)))
    if kind == "index field":
        fields = np.frombuffer(data[:end], U64).copy()
        i = 2 * m + int(rng.integers(2))
        other = int(fields[int(rng.integers(len(fields)))])
        fields[i] = pick(rng, edge_values(rng, int(fields[i]), size, end, other))
        return fields.tobytes() + data[end:], "index field"
    table = tables.get(m, np.zeros((3, 0), np.uint64))
    if kind == "table field" and table.size:
        table = table.copy()
        r, c = int(rng.integers(3)), int(rng.integers(table.shape[1]))
        other = int(table.flat[int(rng.integers(table.size))])
        table[r, c] = pick(rng, edge_values(rng, int(table[r, c]), size, end, other))
        if spec["minishard_index_encoding"] == "raw" and rng.random() < 0.5:
            a = end + int(rel[m, 0])  # in place: same size
            return data[:a] + table.tobytes() + data[a + table.nbytes:], "table field"
        return with_table(spec, data, m, table), "table field"
    entries = absolute(table, end)
    if kind == "entries" and entries:
        return with_table(spec, data, m, delta(edit_entries(rng, entries, keys, end, size), end)), \
            "entries"
    if kind == "bomb":
        bomb = gzip_bomb(int(pick(rng, [1, 3, 24, 25])) << int(rng.integers(8, 20)))
        if spec["data_encoding"] == "gzip" and entries and rng.random() < 0.6:
            return replace_chunk(spec, data, pick(rng, entries)[0], bomb), "bomb"
        if spec["minishard_index_encoding"] == "gzip":
            return repoint(spec, data, m, bomb), "bomb"
    if kind == "bad gzip" and spec["data_encoding"] == "gzip" and entries:
        k, start, n = pick(rng, entries)
        old = data[start:start + n]
        value = gzip.decompress(old)
        cut = int(rng.integers(len(value) + 1))
        payload = pick(rng, [old + rng.bytes(int(rng.integers(1, 9))), old[:-1 - int(
            rng.integers(min(8, len(old) - 1)))], rng.bytes(n),
            encode(value[:cut], "gzip") + encode(value[cut:], "gzip")])
        return replace_chunk(spec, data, k, payload), "bad gzip"
    return mutate_bytes(rng, data, hot)


def edit_entries(rng, entries: list, keys: list[int], end: int, size: int) -> list:
    """Entries of one minishard edited as a whole: duplicated, moved, aliased, reordered."""
    entries = list(entries)
    i = int(rng.integers(len(entries)))
    k, start, n = entries[i]
    how = int(rng.integers(6))
    if how == 0 and len(entries) > 1:  # a key twice
        j = (i + 1) % len(entries)
        entries[j] = (k, *entries[j][1:])
    elif how == 1:  # a key that belongs elsewhere, or is absent
        entries[i] = (pick(rng, keys + [int(rng.integers(0, 1 << 62))]), start, n)
    elif how == 2 and len(entries) > 1:  # two keys share bytes
        entries[i] = (k, *entries[(i + 1) % len(entries)][1:])
    elif how == 3:  # unsorted
        rng.shuffle(entries)
    elif how == 4:
        del entries[i]
    else:  # a range anywhere: into the index, over the end, empty
        a = pick(rng, [0, end - 8, end, size - 1, size, int(rng.integers(size + 1))])
        entries[i] = (k, a, pick(rng, [0, 1, 8, size - a, size - a + 1, n]) & MASK)
    return entries


def mutate_chunk(rng, data: bytes, encoding: str, channels: int) -> tuple[bytes | None, str]:
    """A byte-level or encoding-aware mutation of one encoded volume chunk."""
    if rng.random() < 0.4 or not data:
        return mutate_bytes(rng, data, [(0, 64)])
    if encoding == "compressed_segmentation" and len(data) >= 4:
        words = np.frombuffer(data[:len(data) // 4 * 4], "<u4").copy()
        header = min(len(words), channels + 2 * int(rng.integers(1, 9)))
        i = int(rng.integers(header)) if rng.random() < 0.8 else int(rng.integers(len(words)))
        old = int(words[i])
        bits = pick(rng, [0, 1, 2, 3, 4, 5, 8, 16, 31, 32, 33, 64, 255])
        words[i] = pick(rng, [0, 1, 0xFFFFFFFF, len(words), len(words) - 1, len(words) + 1,
                              (old & 0xFFFFFF) | bits << 24, (old + 1) & 0xFFFFFFFF,
                              (old - 1) & 0xFFFFFFFF, old ^ 1 << int(rng.integers(32)),
                              int(rng.integers(1 << 32))])
        return words.tobytes() + data[len(words) * 4:], "cseg word"
    if encoding == "png":
        return mutate_png(rng, data)
    if encoding == "jpeg":
        b = bytearray(data)
        how = int(rng.integers(3))
        if how == 0:  # cut near the end (the end marker lost, or more)
            return bytes(b[:len(b) - int(rng.integers(1, 40))]), "jpeg cut"
        markers = [i for i in range(len(b) - 1) if b[i] == 0xFF and b[i + 1] not in (0, 0xFF)]
        i = pick(rng, markers) if markers else 0
        if how == 1 and markers:
            b[i + 1] = pick(rng, [0xD8, 0xD9, 0xDA, 0xDB, 0xC0, 0xC2, 0xC4, 0xDD, 0xE0, 0x01])
        elif b[i + 1:i + 2] in (b"\xc0", b"\xc2") and i + 9 < len(b):  # frame size, components
            j = i + pick(rng, [5, 6, 7, 8, 9])
            b[j] = pick(rng, [0, 1, 3, 0xFF, b[j] ^ 1])
        else:
            return mutate_bytes(rng, data, [(0, min(len(data), 700))])
        return bytes(b), "jpeg marker"
    return mutate_bytes(rng, data)


def png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def mutate_png(rng, data: bytes) -> tuple[bytes, str]:
    """Damage past the CRCs: fields of IHDR, the inflated image data, the chunk sequence."""
    chunks, pos = [], 8
    while pos + 12 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        chunks.append([data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]])
        pos += 12 + n
    if not chunks or chunks[0][0] != b"IHDR":
        return mutate_bytes(rng, data)
    how = int(rng.integers(4))
    if how == 0:  # IHDR: width, height, bit depth, colour type, compression, filter, interlace
        body = bytearray(chunks[0][1])
        j = pick(rng, [3, 7, 8, 9, 10, 11, 12])
        body[j] = pick(rng, [0, 1, 2, 3, 4, 6, 8, 16, 0xFF, body[j] ^ 1, (body[j] + 1) & 0xFF])
        chunks[0][1] = bytes(body)
    elif how == 1:  # the image data, inflated: filter types, pixels, length
        raw = bytearray(zlib.decompress(b"".join(c[1] for c in chunks if c[0] == b"IDAT")))
        if raw and rng.random() < 0.7:
            raw[int(rng.integers(len(raw)))] = pick(rng, [0, 1, 2, 3, 4, 5, 0xFF,
                                                          int(rng.integers(256))])
        else:
            raw = raw[:int(rng.integers(len(raw) + 1))] if rng.random() < 0.5 else \
                raw + bytes(int(rng.integers(1, 64)))
        idat = zlib.compress(bytes(raw))
        parts = np.array_split(np.frombuffer(idat, np.uint8), int(rng.integers(1, 4)))
        chunks = [chunks[0]] + [[b"IDAT", p.tobytes()] for p in parts] + \
            [c for c in chunks[1:] if c[0] != b"IDAT"]
    elif how == 2:  # the sequence: drop, repeat or add a chunk
        i = int(rng.integers(len(chunks)))
        if rng.random() < 0.4:
            del chunks[i]
        elif rng.random() < 0.5:
            chunks.insert(i, list(chunks[i]))
        else:
            kinds = [b"tEXt", b"gAMA", b"PLTE", b"tRNS", b"sBIT", b"bKGD", b"pHYs", b"tIME",
                     b"zzZz", b"ZZZZ"]  # not those whose contents ngshard does not check
            chunks.insert(i, [pick(rng, kinds), rng.bytes(int(rng.integers(0, 12)))])
    else:  # any byte of a chunk's body, its CRC made right
        c = pick(rng, chunks)
        if c[1]:
            body = bytearray(c[1])
            body[int(rng.integers(len(body)))] ^= 1 << int(rng.integers(8))
            c[1] = bytes(body)
    return data[:8] + b"".join(png_chunk(k, b) for k, b in chunks), "png " + \
        ["ihdr", "idat", "chunks", "body"][how]


# --- the stores -------------------------------------------------------------------------------

def random_spec(rng) -> dict:
    return {"@type": SHARD_TYPE,
            "preshift_bits": int(pick(rng, [0, 0, 1, 2, 3, 63, 64] if rng.random() < 0.1
                                      else [0, 1, 2, 3])),
            "hash": pick(rng, ["identity", "murmurhash3_x86_128"]),
            "minishard_bits": int(rng.integers(0, 4)), "shard_bits": int(rng.integers(0, 3)),
            "minishard_index_encoding": pick(rng, ["raw", "gzip"]),
            "data_encoding": pick(rng, ["raw", "gzip"])}


def random_keys(rng, n: int) -> list[int]:
    pools = [lambda: int(rng.integers(0, 64)), lambda: int(rng.integers(0, 1 << 16)),
             lambda: int(rng.integers(0, 1 << 63)) * 2 + int(rng.integers(2)),
             lambda: pick(rng, [0, MASK, 1 << 63, MASK - 1])]
    return [pick(rng, pools)() for _ in range(n)]


@dataclass
class Store:
    """A small store written once per group; its cases each damage one file of it."""

    kind: str  # "kv" or "volume"
    root: Path
    spec: dict | None  # sharding spec (None: a volume with a file per chunk)
    keys: list[int] = field(default_factory=list)  # the keys stored (a volume's chunk IDs)
    absent: list[int] = field(default_factory=list)  # kv: keys to read that are not stored
    volume: dict = field(default_factory=dict)  # encoding, dtype, channels, shape, scale key
    originals: dict[str, bytes] = field(default_factory=dict)  # file -> bytes
    dirty: set[str] = field(default_factory=set)
    analyses: dict[str, Damage] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.root / self.volume["key"] if self.kind == "volume" else self.root

    def files(self) -> list[str]:
        return sorted(self.originals)

    def restore(self) -> None:
        self.analyses.clear()
        for name in self.dirty:
            (self.data_dir / name).write_bytes(self.originals[name])
        self.dirty.clear()

    def put(self, name: str, data: bytes | None) -> None:
        self.analyses.pop(name, None)
        self.dirty.add(name)
        path = self.data_dir / name
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)

    def read(self, name: str) -> bytes:
        path = self.data_dir / name
        return path.read_bytes() if path.exists() else b""

    def damage(self, name: str) -> Damage:
        """What is wrong in a shard file now (computed once per state of the file)."""
        if name not in self.analyses:
            self.analyses[name] = analyze(self.spec, self.read(name))
        return self.analyses[name]


def make_kv(rng, root: Path) -> Store:
    spec = random_spec(rng)
    keys = sorted(set(random_keys(rng, int(rng.integers(1, 51)))))
    values = {}
    for k in keys:
        n = int(pick(rng, [0, 1, 7, 24, int(rng.integers(0, 300))]))
        values[k] = rng.bytes(n) if rng.random() < 0.5 else bytes([k & 0xFF]) * n
    ngshard.write_kv(root, spec, values)
    absent = [k for k in random_keys(rng, 12) + [(k + 1) & MASK for k in keys[:4]]
              if k not in values]
    store = Store("kv", root, spec, keys, absent)
    store.originals = {p.name: p.read_bytes() for p in root.glob("*.shard")}
    return store


def morton(position: tuple[int, ...], grid: tuple[int, ...]) -> int:
    """Compressed Morton code of a chunk position (DESIGN: Format facts)."""
    bits = [max(0, math.ceil(math.log2(g))) for g in grid]
    code, out = 0, 0
    for i in range(max(bits)):
        for d in range(3):
            if i < bits[d]:
                code |= ((position[d] >> i) & 1) << out
                out += 1
    return code


def make_volume(rng, root: Path, encodings: tuple[str, ...] = ()) -> Store:
    kinds = [k for k in VOLUME_KINDS if not encodings or k[0] in encodings]
    encoding, dtype, channel_counts = pick(rng, kinds)
    c = int(pick(rng, channel_counts))
    chunk = [int(rng.integers(1, 9)) for _ in range(3)]
    grid = [int(pick(rng, [1, 1, 2, 3])) for _ in range(3)]
    shape = [max(1, g * n - int(rng.integers(0, n))) for g, n in zip(grid, chunk)]
    offset = [int(pick(rng, [0, 0, 3, -5])) for _ in range(3)]
    spec = random_spec(rng) if rng.random() < 0.5 else None
    if spec:
        spec["preshift_bits"] = min(spec["preshift_bits"], 3)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        data = rng.normal(size=(*shape, c)).astype(dt)
    elif encoding in ("jpeg", "png") or rng.random() < 0.3:
        ramp = np.add.outer(np.arange(shape[0]), np.arange(shape[1]) * 3)[..., None, None]
        noise = rng.integers(0, 16, (*shape, c))
        data = ((ramp * 5 + noise) % (1 << min(16, 8 * dt.itemsize))).astype(dt)
    else:
        labels = np.array(random_keys(rng, 6), np.uint64).astype(dt)
        data = labels[rng.integers(0, len(labels), (*shape, c))]
    block = [int(rng.integers(1, 5)) for _ in range(3)]
    with ngshard.create_volume(root, dtype=dtype, shape=(*shape, c), chunk_size=chunk,
                               encoding=encoding, voxel_offset=offset, sharding=spec,
                               compressed_segmentation_block_size=block) as vol:
        vol[:] = data
    key = vol.scale.key
    grid = tuple(-(-s // n) for s, n in zip(shape, chunk))
    keys = [morton((x, y, z), grid) for x in range(grid[0]) for y in range(grid[1])
            for z in range(grid[2])]
    store = Store("volume", root, spec, keys=keys, volume={
        "encoding": encoding, "dtype": dtype, "channels": c, "shape": shape, "key": key,
        "offset": offset})
    store.originals = {p.name: p.read_bytes() for p in (root / key).iterdir()}
    return store


# --- reading with both ------------------------------------------------------------------------

@dataclass
class Outcome:
    kind: str  # "value", "missing", "error", "foreign"
    value: object = None

    def __str__(self) -> str:
        if self.kind == "value":
            v = self.value
            text = repr(bytes(v)[:24]) if isinstance(v, bytes) else \
                f"array {getattr(v, 'shape', '?')}" if isinstance(v, np.ndarray) else repr(v)
            return f"value {text[:120]}"
        return self.kind if self.value is None else f"{self.kind} {str(self.value)[:300]}"

    def same(self, other: Outcome) -> bool:
        if self.kind != other.kind:
            return False
        if self.kind != "value":
            return True
        a, b = self.value, other.value
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            a, b = np.asarray(a), np.asarray(b)
            return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
        return a == b


def ng_call(fn) -> Outcome:
    try:
        return Outcome("value", fn())
    except KeyError:
        return Outcome("missing")
    except ngshard.NgShardError as e:  # the message only: a traceback holds the read's buffers
        return Outcome("error", str(e))
    except Exception as e:  # a foreign exception: always a bug
        where = traceback.extract_tb(e.__traceback__)[-1]
        return Outcome("foreign", f"{type(e).__name__}: {e} at {where.filename}:{where.lineno}")


def ts_call(fn) -> Outcome:
    try:
        return Outcome("value", fn())
    except TimeoutError:
        raise  # tensorstore hung: the run fails, this is no outcome to compare
    except Exception as e:
        return Outcome("error", str(e))


class Memory:
    """Peak RSS growth during the ngshard steps of a case: /proc/self/clear_refs resets the
    high-water mark, so each step is measured on its own, not hidden by an earlier peak."""

    def __init__(self) -> None:
        try:
            self._reset()
            self.exact = True
        except OSError:
            self.exact = False
        self.growth = 0  # KiB, worst step of the current case

    @staticmethod
    def _reset() -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")

    @staticmethod
    def _status(field_name: str) -> int:
        with open("/proc/self/status") as f:
            return int(re.search(rf"{field_name}:\s+(\d+)", f.read()).group(1))

    def __enter__(self):
        if self.exact:
            self._reset()
            self._before = self._status("VmRSS")
        else:
            self._before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return self

    def __exit__(self, *exc) -> None:
        if self.exact:
            after = self._status("VmHWM")
        else:
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.growth = max(self.growth, after - self._before)


@dataclass
class Read:
    """One comparison: what was read, each side's outcome, and the verdict."""

    what: str
    ng: Outcome
    ts: Outcome
    verdict: str = ""  # preset for ngshard's internal consistency checks
    key: int | None = None  # the key read from a kv store
    index: tuple = ()  # the box read from a volume


def contains_agrees(contains: Outcome, read: Outcome) -> bool:
    """``k in kv`` against ``kv[k]``: True for a value, False when missing; it reads no chunk
    data, so a key whose data is damaged may be True as well as an error."""
    if read.kind == "error":
        return contains.kind == "error" or contains.value is True
    return contains.kind == "value" and contains.value is (read.kind == "value")


def check_kv(store: Store, case: Case, rng, mem: Memory) -> list[Read]:
    spec, reads = store.spec, []
    tstore = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                              "base": f"file://{store.root}/", "metadata": spec},
                             context=ts.Context()).result(timeout=PEER_TIMEOUT)
    ts_list = ts_call(lambda: sorted(int.from_bytes(k, "big")
                                     for k in tstore.list().result(timeout=PEER_TIMEOUT)))
    with mem:
        kv = ngshard.open_kv(store.root, spec)
        ng_list = ng_call(lambda: sorted(kv.keys_array().tolist()))
    reads.append(Read("list", ng_list, ts_list))
    listed = {k for o in (ng_list, ts_list) if o.kind == "value" for k in o.value}
    extra = sorted(listed - set(store.keys) - set(store.absent))
    keys = store.keys + store.absent + [pick(rng, extra) for _ in range(min(8, len(extra)))]
    keys = list(dict.fromkeys(keys))
    futures = [tstore.read(k.to_bytes(8, "big")) for k in keys]
    theirs = [ts_call(lambda f=f: f.result(timeout=PEER_TIMEOUT)) for f in futures]
    theirs = [o if o.kind == "error" else Outcome("missing") if o.value.state == "missing"
              else Outcome("value", bytes(o.value.value)) for o in theirs]
    with mem:
        many, ours = ng_per_key(kv, keys, spec)
        for i in rng.choice(len(keys), min(3, len(keys)), replace=False).tolist():
            k = keys[i]
            single = ng_call(lambda k=k: kv[k])
            contains = ng_call(lambda k=k: k in kv)
            reads.append(Read(f"kv[{k}] against get_many", single, ours[i], "internal", k))
            if ours[i].kind != "foreign" and not contains_agrees(contains, ours[i]):
                reads.append(Read(f"{k} in kv", contains, ours[i], "internal: contains", k))
    if many.kind == "error" and all(o.kind != "error" for o in ours):
        reads.append(Read("get_many", many, Outcome("value", "every single read succeeds"),
                          "internal: get_many"))
    reads += [Read(f"key {k}", o, t, key=k) for k, o, t in zip(keys, ours, theirs)]
    return reads


def ng_per_key(kv, keys: list[int], spec: dict) -> tuple[Outcome, list[Outcome]]:
    """get_many of all keys, and ngshard's outcome for each key: from that batch, or where it
    fails, from one batch per minishard, and where that fails, from one read per key (ngshard
    refuses whole minishards, or single chunks)."""
    def batch(group: list[int]) -> tuple[Outcome, dict[int, Outcome] | None]:
        many = ng_call(lambda: kv.get_many(group))
        if many.kind == "error":
            return many, None
        return many, {k: many if many.kind == "foreign" else Outcome("value", many.value[k])
                      if k in many.value else Outcome("missing") for k in group}

    many, out = batch(keys)
    if out is None:
        out, groups = {}, {}
        for k in keys:
            groups.setdefault(locate(spec, k), []).append(k)
        for group in groups.values():
            got = batch(group)[1] if len(group) > 1 else None
            out.update(got or {k: ng_call(lambda k=k: kv[k]) for k in group})
    return many, [out[k] for k in keys]


def check_volume(store: Store, case: Case, rng, mem: Memory) -> list[Read]:
    shape, offset = store.volume["shape"], store.volume["offset"]
    lo = [int(rng.integers(n)) for n in shape]
    # voxel coordinates (from voxel_offset), as both libraries index
    box = tuple(slice(o + a, o + int(rng.integers(a + 1, n + 1)))
                for a, n, o in zip(lo, shape, offset))
    if store.volume["encoding"] == "png":
        case.hazard = png_hazard(case.chunk, store.volume["dtype"])
    reads = []
    for what, index in (("volume[:]", ()), (f"volume{[(s.start, s.stop) for s in box]}", box)):
        with mem:
            ours = ng_call(lambda index=index: np.asarray(ngshard.open_volume(store.root)[index]))
        if case.hazard == "png crash":
            reads.append(Read(what, ours, Outcome("error", "not read"), "known: png crash"))
        else:
            reads.append(Read(what, ours, ts_volume(store, index), index=index))
    return reads


def png_hazard(data: bytes, dtype: str) -> str | None:
    """"png crash" where libpng would write past tensorstore's buffer (16 bits with tRNS, which
    its png_set_expand_16 expands to an alpha channel, or 16 bits in a uint8 volume); "png bit
    depth" where tensorstore returns the bytes of samples of another size."""
    pos, depth, trns = 8, None, False
    while pos + 17 <= len(data) and data[pos + 4:pos + 8] != b"IDAT":
        if data[pos + 4:pos + 8] == b"IHDR" and depth is None:
            depth = data[pos + 16]
        trns |= data[pos + 4:pos + 8] == b"tRNS"
        pos += 12 + int.from_bytes(data[pos:pos + 4], "big")
    if depth == 16 and (trns or dtype == "uint8"):
        return "png crash"
    return "png bit depth" if depth and (depth == 16) != (dtype == "uint16") else None


def ts_volume(store: Store, index: tuple) -> Outcome:
    def read():
        vol = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{store.root}/"},
                      context=ts.Context(), read=True).result(timeout=PEER_TIMEOUT)
        return vol[index].read().result(timeout=PEER_TIMEOUT)

    return ts_call(read)


# --- verdicts ---------------------------------------------------------------------------------

def file_named(store: Store, message: str) -> str | None:
    names = [n for n in store.files() if f"/{n}" in message]
    return max(names, key=len) if names else None


def explain_strict(store: Store, message: str, case: Case) -> str | None:
    """The known class when ngshard refuses what tensorstore reads: the file ngshard names holds
    the defect its message names."""
    if case.hazard == "png bit depth" and "does not hold" in message:
        return case.hazard
    if store.kind == "volume" and "inflates past the" in message:
        return "inflation limit"
    name = file_named(store, message)
    if name is None or store.spec is None:
        return None
    dmg = store.damage(name)
    m = re.search(r"\(minishard (\d+) index", message)
    for pattern, defects in STRICT:
        if pattern in message:
            for d in defects:
                if dmg.has(d, int(m.group(1)) if m else None):
                    return d
    return None


def explain_lenient(store: Store, read: Read, case: Case) -> str | None:
    """The known class when tensorstore refuses what ngshard reads."""
    message = str(read.ts.value)
    if "Interlace handling should be turned on" in message:
        return "interlaced png"
    name = file_named(store, message)
    if "Premature end of JPEG file" in message:
        if case.redo:  # the chunk damaged on its own: tensorstore reads it with an end marker
            if case.chunk.endswith(b"\xff\xd9"):
                return None
            store.put(case.name, case.redo(case.chunk + b"\xff\xd9"))
            try:
                again = ts_volume(store, read.index)
            finally:
                store.put(case.name, case.data)
            return "jpeg cut" if again.same(read.ng) else None
        chunk = re.search(r"chunk (\d+) in minishard", message)  # cut by a damaged index
        data = chunk and name and stored_chunk(store.spec, store.read(name), int(chunk[1]))
        return "jpeg cut" if data and not data.endswith(b"\xff\xd9") else None
    if store.spec is None:
        return None
    m = re.search(r"for minishard (\d+)", message)
    if m and name and store.kind == "volume":
        shard = int(name.split(".")[0], 16) if store.spec["shard_bits"] else 0
        needed = {locate(store.spec, k)[1] for k in store.keys
                  if locate(store.spec, k)[0] == shard}
        if int(m.group(1)) not in needed:
            return "unneeded minishard"
    return None


def diagnose(store: Store, read: Read) -> str:
    """The cause of a mismatch, where it is a known bug rather than a deliberate difference."""
    if store.spec is not None:
        for name in store.files():
            cross = store.damage(name).cross
            if cross and (read.key is None or read.key in cross):
                return " [a key also under another minishard of its shard: ShardReader._lookup]"
    return ""


def verdict(store: Store, read: Read, case: Case) -> str:
    ng, them = read.ng, read.ts
    if read.verdict.startswith("known") and ng.kind != "foreign":
        return read.verdict
    if read.verdict.startswith("internal"):
        if read.verdict == "internal" and ng.same(them):
            return "agree"
        return f"mismatch: {read.verdict}{diagnose(store, read)}"
    if ng.kind == "foreign":
        return "foreign"
    if ng.same(them):
        return {"value": "equal", "missing": "both missing", "error": "both error"}[ng.kind]
    known = explain_strict(store, str(ng.value), case) if ng.kind == "error" else \
        explain_lenient(store, read, case) if them.kind == "error" else None
    if known:
        return f"known: {known}"
    return f"mismatch: ngshard {ng.kind}, tensorstore {them.kind}{diagnose(store, read)}" \
        if ng.kind != them.kind else f"mismatch: different values{diagnose(store, read)}"


# --- running ----------------------------------------------------------------------------------

@dataclass
class Case:
    number: int
    name: str = ""  # the damaged file
    mutation: str = ""
    data: bytes | None = None
    chunk: bytes = b""  # a volume chunk's damaged bytes, and how to store others in its place
    redo: object = None
    hazard: str | None = None  # why tensorstore cannot be trusted with this chunk


def damage(rng, store: Store, case: Case) -> None:
    case.name = pick(rng, store.files())
    original = store.originals[case.name]
    enc, channels = store.volume.get("encoding"), store.volume.get("channels")
    if store.kind == "kv":
        case.data, case.mutation = mutate_shard(rng, store.spec, original, store.keys)
    elif store.spec is None:
        case.data, case.mutation = mutate_chunk(rng, original, enc, channels)
        case.chunk, case.redo = case.data or b"", lambda chunk: chunk
    elif rng.random() < 0.5:
        case.data, case.mutation = mutate_shard(rng, store.spec, original, store.keys)
    else:
        spec = store.spec
        key = pick(rng, [k for m in minishard_tables(spec, original).values()
                         for k, _, _ in absolute(m, index_end(spec))])
        chunk, case.mutation = mutate_chunk(rng, stored_chunk(spec, original, key), enc,
                                            channels)
        case.chunk = chunk or b""
        case.redo = lambda c: replace_chunk(spec, original, key, encode(c, spec["data_encoding"]))
        case.data = case.redo(case.chunk)
        case.mutation = "chunk: " + case.mutation
    store.put(case.name, case.data)


@dataclass
class Summary:
    cases: int = 0
    seconds: float = 0.0
    by_kind: Counter = field(default_factory=Counter)
    case_outcomes: Counter = field(default_factory=Counter)
    reads: Counter = field(default_factory=Counter)
    mutations: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # verdict -> first case number
    mismatches: list = field(default_factory=list)  # printed lines
    worst_growth: tuple = (0, -1, 0)  # KiB, case, largest file

    @property
    def failures(self) -> int:
        """Cases with a mismatch, a foreign exception or memory over the bound."""
        return sum(n for v, n in self.case_outcomes.items()
                   if not v.startswith(("agree", "known")))

    def merge(self, other: Summary) -> None:
        """Add the counts of another run (of other cases)."""
        self.cases += other.cases
        for name in ("by_kind", "case_outcomes", "reads", "mutations"):
            getattr(self, name).update(getattr(other, name))
        for verdict_, number in other.examples.items():
            self.examples[verdict_] = min(self.examples.get(verdict_, number), number)
        self.mismatches += other.mismatches
        self.worst_growth = max(self.worst_growth, other.worst_growth)


def run_parallel(seed: int, cases: int, start: int, jobs: int, out=None, **kwargs) -> Summary:
    """:func:`run` in ``jobs`` processes, on pieces of whole groups (each run gives the same
    counts as one process would)."""
    step = 20 * GROUP
    edges = sorted({start, start + cases, *range(-(-start // step) * step, start + cases, step)})
    summary, t0 = Summary(), time.perf_counter()
    spawn = multiprocessing.get_context("spawn")  # tensorstore's threads and fork do not mix
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
        pieces = [pool.submit(run, seed, b - a, a, **kwargs) for a, b in zip(edges, edges[1:])]
        for done in concurrent.futures.as_completed(pieces):
            piece = done.result(timeout=PEER_TIMEOUT)
            for line in piece.mismatches if out else ():
                print(line, file=out, flush=True)
            summary.merge(piece)
    summary.seconds = time.perf_counter() - t0
    return summary


def run(seed: int, cases: int, start: int = 0, kinds: tuple[str, ...] = ("kv", "volume"),
        encodings: tuple[str, ...] = (), workdir: str | None = None, out=None,
        replay: bool = False) -> Summary:
    """Run cases ``start .. start + cases - 1`` of ``seed``; mismatches are printed to ``out``."""
    base = tempfile.mkdtemp(prefix="ngshard-fuzz-", dir=workdir or (
        "/dev/shm" if os.path.isdir("/dev/shm") else None))
    summary, mem, store, group = Summary(), Memory(), None, None
    t0 = time.perf_counter()
    try:
        for number in range(start, start + cases):
            if number // GROUP != group:
                group = number // GROUP
                grng = np.random.default_rng([seed, 1, group])
                kind = kinds[0] if len(kinds) == 1 else ("kv" if grng.random() < 0.7
                                                         else "volume")
                root = Path(base) / str(group)
                store = make_kv(grng, root) if kind == "kv" else \
                    make_volume(grng, root, encodings)
                if group > 0:
                    shutil.rmtree(Path(base) / str(group - 1), ignore_errors=True)
            store.restore()
            rng = np.random.default_rng([seed, 2, number])
            case = Case(number)
            damage(rng, store, case)
            mem.growth = 0
            reads = (check_kv if store.kind == "kv" else check_volume)(store, case, rng, mem)
            record(summary, store, case, reads, mem, seed, out, replay)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary.seconds = time.perf_counter() - t0
    return summary


RANK = {"equal": 0, "both missing": 0, "agree": 0, "both error": 1}


def case_outcome(verdicts: list[str]) -> str:
    """The worst verdict of a case's reads: agreement, then known differences, then failures."""
    def rank(v: str) -> int:
        return RANK.get(v, 2 if v.startswith("known") else 3)

    worst = max(verdicts, key=rank, default="equal")
    return {0: "agree, no error", 1: "agree, both error somewhere"}.get(rank(worst), worst)


def record(summary: Summary, store: Store, case: Case, reads: list[Read], mem: Memory,
           seed: int, out, replay: bool) -> None:
    summary.cases += 1
    summary.by_kind[store.kind if store.kind == "kv" else
                    f"volume {store.volume['encoding']}{' sharded' if store.spec else ''}"] += 1
    summary.mutations[case.mutation] += 1
    for read in reads:
        v = read.verdict = verdict(store, read, case)
        summary.reads[v] += 1
        if v.startswith(("mismatch", "foreign", "known")):
            summary.examples.setdefault(v, case.number)
        if replay or v.startswith(("mismatch", "foreign")):
            line = (f"{v}: seed={seed} case={case.number} file={case.name} "
                    f"mutation={case.mutation!r} read={read.what} ngshard={read.ng} "
                    f"tensorstore={read.ts}")
            summary.mismatches.append(line)
            if out:
                print(line, file=out, flush=True)
    outcome = case_outcome([r.verdict for r in reads])
    largest = max(len(store.read(n)) for n in store.files())
    bound = (64 * largest + 64 * MiB) // 1024
    if mem.growth > bound:
        outcome = "memory over bound"
        if out:
            print(f"memory: seed={seed} case={case.number} grew {mem.growth} KiB, bound {bound}",
                  file=out, flush=True)
    if mem.growth > summary.worst_growth[0]:
        summary.worst_growth = (mem.growth, case.number, largest)
    summary.case_outcomes[outcome] += 1


def report(s: Summary, seed: int, start: int) -> str:
    rate = s.cases / s.seconds if s.seconds else 0
    lines = [f"seed {seed}, cases {start}..{start + s.cases - 1}: {s.cases} cases in "
             f"{s.seconds:.0f} s ({rate:.0f}/s)",
             "stores: " + ", ".join(f"{k} {n}" for k, n in sorted(s.by_kind.items())),
             "case outcomes (worst read of each case):"]
    lines += [f"  {n:8d}  {v}" for v, n in s.case_outcomes.most_common()]
    lines.append("reads compared:")
    lines += [f"  {n:8d}  {v}" + (f"  (e.g. case {s.examples[v]})" if v in s.examples else "")
              for v, n in s.reads.most_common()]
    lines.append("mutations: " + ", ".join(f"{k} {n}" for k, n in s.mutations.most_common()))
    growth, case, largest = s.worst_growth
    lines.append(f"largest peak RSS growth during an ngshard read: {growth / 1024:.1f} MiB "
                 f"(case {case}, largest file {largest} bytes, bound "
                 f"{(64 * largest + 64 * MiB) / MiB:.1f} MiB)")
    lines.append(f"mismatches + foreign exceptions + memory: {s.failures} cases")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cases", type=int, default=1000)
    p.add_argument("--start", type=int, default=0, help="number of the first case")
    p.add_argument("--replay", type=int, help="run this one case, printing every read")
    p.add_argument("--kinds", default="kv,volume", help="kv, volume or both")
    p.add_argument("--encodings", default="", help="volume encodings to use (default all)")
    p.add_argument("--dir", help="where to write the stores (default /dev/shm)")
    p.add_argument("--jobs", type=int, default=1, help="processes to run cases in")
    p.add_argument("--surfaces", help="fuzz these format surfaces instead (or 'all'): "
                   "see tools/fuzz_surfaces.py")
    args = p.parse_args(argv)
    if args.surfaces:
        import fuzz_surfaces

        names = ",".join(fuzz_surfaces.SURFACES) if args.surfaces == "all" else args.surfaces
        return fuzz_surfaces.main(["--surfaces", names, "--seed", str(args.seed), "--cases",
                                   str(args.cases), "--jobs", str(args.jobs)])
    start, cases = (args.replay, 1) if args.replay is not None else (args.start, args.cases)
    options = {"kinds": tuple(args.kinds.split(",")),
               "encodings": tuple(e for e in args.encodings.split(",") if e),
               "workdir": args.dir}
    if args.jobs > 1 and args.replay is None:
        s = run_parallel(args.seed, cases, start, args.jobs, sys.stdout, **options)
    else:
        s = run(args.seed, cases, start, out=sys.stdout, replay=args.replay is not None,
                **options)
    print(report(s, args.seed, start))
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
