"""ChunkGrid: voxel bounds, chunk names, Morton codes and shard boxes, checked against
tensorstore's neuroglancer_precomputed driver (the reference) where it has an opinion."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from peers import PEER_TIMEOUT

import ngshard
from ngshard import ShardingSpec, SpecError
from ngshard.volume.grid import ChunkGrid

SIZE, CHUNK, OFFSET = (20, 13, 7), (8, 4, 3), (5, -3, 2)  # grid (3, 4, 3): all edges clipped
GRID = ChunkGrid(SIZE, CHUNK, OFFSET)


def all_positions(grid: ChunkGrid) -> np.ndarray:
    return np.indices(grid.shape).reshape(3, -1).T


def reference_morton(pos, bits) -> int:
    """The format's definition, one position and one bit at a time."""
    code, j = 0, 0
    for i in range(max(bits)):
        for d in range(3):
            if i < bits[d]:
                code |= ((int(pos[d]) >> i) & 1) << j
                j += 1
    return code


def sharding(hash_="identity", p=0, m=0, s=0, enc="raw") -> dict:
    return {"@type": "neuroglancer_uint64_sharded_v1", "hash": hash_, "preshift_bits": p,
            "minishard_bits": m, "shard_bits": s, "minishard_index_encoding": enc,
            "data_encoding": enc}


# --- construction, bounds, boxes ---------------------------------------------------------------

def test_shape_bits_bounds():
    assert (GRID.shape, GRID.num_chunks, GRID.bits) == ((3, 4, 3), 36, (2, 2, 2))
    assert ChunkGrid((5, 1, 64), (8, 1, 64)).bits == (0, 0, 0)
    starts, stops = GRID.bounds([[0, 0, 0], [2, 3, 2]])
    assert starts.tolist() == [[0, 0, 0], [16, 12, 6]]
    assert stops.tolist() == [[8, 4, 3], [20, 13, 7]]  # the edge chunk is clipped
    with pytest.raises(SpecError, match="outside the grid"):
        GRID.bounds([[3, 0, 0]])


@pytest.mark.parametrize("kwargs, field", [
    (dict(size=(0, 1, 1), chunk_size=(1, 1, 1)), "size"),
    (dict(size=(1, 1, 1), chunk_size=(1.5, 1, 1)), "chunk_size"),
    (dict(size=(1, 1, 1), chunk_size=(1, 1, 1), voxel_offset=(1, 2)), "voxel_offset"),
    (dict(size=(True, 1, 1), chunk_size=(1, 1, 1)), "size"),
])
def test_invalid_grid(kwargs, field):
    with pytest.raises(SpecError, match=f"^{field} "):
        ChunkGrid(**kwargs)


@pytest.mark.parametrize("start, stop, expected", [
    ((0, 0, 0), SIZE, all_positions(GRID).tolist()),         # whole volume, C order
    ((17, 12, 6), SIZE, [[2, 3, 2]]),                        # touches the volume's end
    ((16, 0, 0), (100, 4, 3), [[2, 0, 0]]),                  # past the end: clipped
    ((-5, -5, -5), (1, 1, 1), [[0, 0, 0]]),                  # before the start: clipped
    ((8, 4, 3), (16, 8, 6), [[1, 1, 1]]),                    # exactly one chunk
    ((9, 0, 0), (9, 13, 7), []),                             # empty, inside a chunk
    ((8, 0, 0), (8, 13, 7), []),                             # empty, on a chunk boundary
    ((20, 0, 0), (30, 13, 7), []),                           # entirely past the end
])
def test_positions_in_edges(start, stop, expected):
    got = GRID.positions_in(start, stop)
    assert got.shape == (len(expected), 3) and got.tolist() == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 24), min_size=6, max_size=6))
def test_positions_in_is_exactly_the_overlapping_chunks(coords):
    start, stop = np.array(coords[:3]), np.array(coords[3:])
    starts, stops = GRID.bounds(all_positions(GRID))
    overlap = (starts < stop).all(1) & (stops > start).all(1) & (start < stop).all()
    assert GRID.positions_in(start, stop).tolist() == all_positions(GRID)[overlap].tolist()


# --- chunk names -------------------------------------------------------------------------------

def test_chunk_names_round_trip():
    names = GRID.chunk_names(all_positions(GRID))
    assert names[0] == "5-13_-3-1_2-5" and names[-1] == "21-25_9-10_8-9"
    assert [GRID.parse_chunk_name(n) for n in names] == [tuple(p) for p in
                                                           all_positions(GRID).tolist()]


@pytest.mark.parametrize("name", ["05-13_-3-1_2-5", "5-12_-3-1_2-5", "6-14_-3-1_2-5",
                                  "29-37_-3-1_2-5", "21-29_9-10_8-9", "5-13_-3-1_2-5.gz",
                                  "5-13/-3-1/2-5", "0-8_0-4_0-3", ""])
def test_parse_chunk_name_rejects(name):
    with pytest.raises(SpecError):
        GRID.parse_chunk_name(name)


# --- Morton codes ------------------------------------------------------------------------------

def test_design_example():
    grid = ChunkGrid((8, 8, 2), (1, 1, 1))
    assert grid.bits == (3, 3, 1)
    assert grid.morton([5, 5, 0]) == 0b1100011
    assert grid.unmorton([0b1100011]).tolist() == [[5, 5, 0]]


dims = st.one_of(st.just(1), st.integers(1, 2**10))


@settings(max_examples=300, deadline=None)
@given(st.tuples(dims, dims, dims), st.tuples(*[st.integers(1, 5)] * 3), st.data())
def test_morton_round_trip(shape, chunk, data):
    size = [(n - 1) * c + data.draw(st.integers(1, c)) for n, c in zip(shape, chunk)]
    grid = ChunkGrid(size, chunk)
    assert grid.shape == shape
    positions = np.array(data.draw(st.lists(st.tuples(*[st.integers(0, n - 1) for n in shape]),
                                            min_size=1, max_size=50)))
    codes = grid.morton(positions)
    assert codes.dtype == np.uint64
    assert codes.tolist() == [reference_morton(p, grid.bits) for p in positions]
    assert (codes < 2 ** sum(grid.bits)).all()
    assert np.array_equal(grid.unmorton(codes), positions)


@settings(max_examples=100, deadline=None)
@given(st.tuples(*[st.integers(1, 33)] * 3))
def test_morton_codes_unique(shape):
    grid = ChunkGrid(shape, (1, 1, 1))
    codes = grid.morton(all_positions(grid))
    assert len(np.unique(codes)) == grid.num_chunks
    assert (codes < 2 ** sum(grid.bits)).all()
    power_of_2 = all(n & (n - 1) == 0 for n in shape)
    assert (grid.num_chunks == 2 ** sum(grid.bits)) == power_of_2  # onto range(2**bits) iff


def test_morton_errors():
    with pytest.raises(SpecError, match="outside the grid"):
        GRID.morton([[0, 4, 0]])
    with pytest.raises(SpecError, match="integers"):
        GRID.morton([[0.0, 1.0, 0.0]])
    with pytest.raises(SpecError, match="64"):
        ChunkGrid((2**22,) * 3, (1, 1, 1)).morton([[0, 0, 0]])
    missing = sorted(set(range(2 ** sum(GRID.bits))) - set(GRID.morton(all_positions(GRID))
                                                           .tolist()))
    with pytest.raises(SpecError, match="outside grid"):
        GRID.unmorton([0, missing[0]])
    with pytest.raises(SpecError, match="bits"):
        GRID.unmorton([2**6])


# --- shards ------------------------------------------------------------------------------------

SHARD_CASES = [  # grid shape, (preshift, minishard, shard bits)
    ((3, 4, 3), (0, 1, 5)), ((3, 4, 3), (1, 2, 3)), ((3, 4, 3), (0, 2, 4)),
    ((3, 4, 3), (0, 0, 6)), ((3, 4, 3), (2, 3, 1)), ((8, 1, 5), (0, 1, 9)),
    ((16, 16, 2), (3, 3, 3)), ((5, 7, 1), (0, 4, 2)), ((1, 1, 1), (0, 0, 1)),
]


@pytest.mark.parametrize("shape, pms", SHARD_CASES)
def test_shards_are_aligned_boxes(shape, pms):
    grid = ChunkGrid(shape, (1, 1, 1))
    spec = ShardingSpec(hash="identity", preshift_bits=pms[0], minishard_bits=pms[1],
                        shard_bits=pms[2])
    box = grid.shard_shape(spec)
    positions = all_positions(grid)
    shard = grid.morton(positions) >> np.uint64(pms[0] + pms[1])
    assert np.array_equal(grid.shard_of(positions, spec)[0], shard)
    corner = positions // np.array(box)  # which aligned box each chunk is in
    pairs = np.unique(np.column_stack([shard, corner]), axis=0)
    assert len(pairs) == len(np.unique(shard)) == len(np.unique(corner, axis=0))  # 1:1
    counts = np.unique(shard, return_counts=True)[1]
    sizes = np.minimum(box, np.array(shape) - pairs[:, 1:] * box).prod(axis=1)
    assert counts.tolist() == sizes.tolist()  # each shard fills its box


@pytest.mark.parametrize("spec, expected", [
    (ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=1, shard_bits=5), None),
    (ShardingSpec(hash="identity", minishard_bits=1, shard_bits=2), None),  # too few bits
    (ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3), (3, 4, 3)),  # one shard
    (ShardingSpec(hash="identity", preshift_bits=1, minishard_bits=2, shard_bits=3), (2, 2, 2)),
    (ShardingSpec(hash="identity", minishard_bits=5, shard_bits=1), (3, 4, 2)),  # x clipped
])
def test_shard_shape(spec, expected):
    assert GRID.shard_shape(spec) == expected


# --- tensorstore -------------------------------------------------------------------------------

def ts_volume(path, spec: dict | None = None, size=SIZE) -> tuple:
    """Write random nonzero uint16 voxels with tensorstore; (data, tensorstore, scale dir)."""
    ts = pytest.importorskip("tensorstore")
    scale = {"size": list(size), "chunk_size": list(CHUNK), "encoding": "raw",
             "voxel_offset": list(OFFSET), "resolution": [1, 1, 1]}
    if spec is not None:
        scale["sharding"] = spec
    store = ts.open({"driver": "neuroglancer_precomputed",
                     "kvstore": {"driver": "file", "path": str(path)}, "scale_metadata": scale,
                     "multiscale_metadata": {"data_type": "uint16", "num_channels": 1,
                                             "type": "image"},
                     "create": True, "dtype": "uint16"}).result(timeout=PEER_TIMEOUT)
    data = np.random.default_rng(1).integers(1, 2**16, (*size, 1), dtype=np.uint16)
    store.write(data).result(timeout=PEER_TIMEOUT)
    key = json.loads((path / "info").read_text())["scales"][0]["key"]
    return data, store, path / key


def check_chunk_bytes(grid: ChunkGrid, data: np.ndarray, blobs: list[bytes]) -> None:
    starts, stops = grid.bounds(all_positions(grid))
    for blob, a, b in zip(blobs, starts, stops):
        chunk = np.frombuffer(blob, "<u2").reshape((*(b - a), 1), order="F")
        assert np.array_equal(chunk, data[a[0]:b[0], a[1]:b[1], a[2]:b[2]])


@pytest.mark.parametrize("spec", [sharding("identity", 0, 1, 2), sharding("identity", 1, 2, 3),
                                  sharding("murmurhash3_x86_128", 0, 2, 2, "gzip")],
                         ids=["identity_few_bits", "identity_boxes", "murmur"])
def test_tensorstore_sharded(tmp_path, spec):
    data, store, scale_dir = ts_volume(tmp_path, spec)
    spec = ShardingSpec.from_json(spec)
    codes = GRID.morton(all_positions(GRID))
    kv = ngshard.open_kv(scale_dir, spec)
    assert np.array_equal(np.sort(kv.keys_array()), np.sort(codes))
    assert sorted(p.name for p in scale_dir.iterdir()) == sorted(
        {spec.shard_filename(s) for s in GRID.shard_of(all_positions(GRID), spec)[0].tolist()})
    blobs = kv.get_many(codes)
    check_chunk_bytes(GRID, data, [blobs[c] for c in codes.tolist()])
    # tensorstore's write chunk is the shard's box, or the whole grid when shards are not boxes
    box = GRID.shard_shape(spec) or GRID.shape
    assert store.chunk_layout.write_chunk.shape[:3] == tuple(np.multiply(box, CHUNK).tolist())


def test_tensorstore_unsharded(tmp_path):
    data, _, scale_dir = ts_volume(tmp_path)
    names = GRID.chunk_names(all_positions(GRID))
    assert sorted(p.name for p in scale_dir.iterdir()) == sorted(names)
    check_chunk_bytes(GRID, data, [(scale_dir / n).read_bytes() for n in names])


@pytest.mark.parametrize("shape, pms", SHARD_CASES)
def test_tensorstore_write_chunk_is_shard_shape(shape, pms):
    ts = pytest.importorskip("tensorstore")
    grid = ChunkGrid(np.multiply(shape, CHUNK), CHUNK)
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "memory"},
                     "scale_metadata": {"size": list(grid.size), "chunk_size": list(CHUNK),
                                        "encoding": "raw", "resolution": [1, 1, 1],
                                        "sharding": sharding("identity", *pms)},
                     "multiscale_metadata": {"data_type": "uint8", "num_channels": 1,
                                             "type": "image"},
                     "create": True, "dtype": "uint8"}).result(timeout=PEER_TIMEOUT)
    box = grid.shard_shape(ShardingSpec.from_json(sharding("identity", *pms)))
    assert store.chunk_layout.write_chunk.shape[:3] == tuple(np.multiply(box, CHUNK).tolist())
