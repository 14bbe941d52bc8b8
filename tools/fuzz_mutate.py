"""Mutations of the fuzzer: bytes, shard files (index fields, minishard tables, entries, gzip
bombs) and encoded volume chunks (compressed_segmentation words, jpeg markers, png chunks)."""

from __future__ import annotations

import functools
import gzip
import struct
import zlib

import numpy as np
from fuzz_shardfmt import (
    MASK,
    U64,
    absolute,
    delta,
    encode,
    index_end,
    minishard_tables,
    replace_chunk,
    repoint,
    with_table,
)

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
