"""The small honest stores the fuzzer damages: sharded key-value stores and precomputed volumes
of every encoding, sharded or not, written by ngshard once per group of cases."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from fuzz_mutate import mutate_chunk, mutate_shard, pick
from fuzz_shardfmt import (
    MASK,
    SHARD_TYPE,
    Damage,
    absolute,
    analyze,
    encode,
    index_end,
    minishard_tables,
    replace_chunk,
    stored_chunk,
)

import ngshard

VOLUME_KINDS = [  # (encoding, dtype, channel counts)
    ("raw", "uint8", (1, 2)), ("raw", "uint16", (1,)), ("raw", "uint64", (1, 2)),
    ("raw", "float32", (1,)), ("compressed_segmentation", "uint32", (1, 2)),
    ("compressed_segmentation", "uint64", (1, 2)), ("jpeg", "uint8", (1, 3)),
    ("png", "uint8", (1, 2, 3, 4)), ("png", "uint16", (1,))]

#: The differences counted apart from mismatches: ngshard's deliberate checks and leniencies,

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
