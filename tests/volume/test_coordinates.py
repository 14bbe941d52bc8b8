"""A volume is indexed in its own voxel coordinates, ``[voxel_offset, voxel_offset + size)``,
as tensorstore (whose neuroglancer_precomputed domain is in global coordinates) and
cloud-volume index it: the same index reads the same voxels through both, sharded or not,
raw or compressed_segmentation, with offsets positive and negative; a 0-based index on an
offset layer is an IndexError naming the bounds, never a shifted read."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard
from ngshard import Bounds, NotFoundError, SpecError, create_volume, open_volume

SIZE, CHUNK = (37, 21, 11), (8, 8, 4)
OFFSET, NEGATIVE = (1000, 2000, 30), (-20, -5, -13)
IDENTITY = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
            "minishard_bits": 2, "shard_bits": 2, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}
MURMUR = dict(IDENTITY, hash="murmurhash3_x86_128", preshift_bits=0, data_encoding="raw")
CASES = [  # id, dtype, encoding, sharding
    ("raw-unsharded", "uint16", "raw", None),
    ("raw-identity", "uint16", "raw", IDENTITY),
    ("cseg-unsharded", "uint64", "compressed_segmentation", None),
    ("cseg-murmur", "uint32", "compressed_segmentation", MURMUR),
]
OUTSIDE = re.escape("is outside the volume's bounds [1000, 1037) x [2000, 2021) x [30, 41) "
                    "(voxel coordinates, from voxel_offset; vol.translate_to[0] indexes from 0)")


def ts_open(path, offset=OFFSET, dtype="uint16", encoding="raw", sharding=None,
            create=False):
    spec = {"driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(path)}}
    if create:
        scale = {"size": list(SIZE), "chunk_size": list(CHUNK), "voxel_offset": list(offset),
                 "resolution": [4, 4, 40], "encoding": encoding}
        if sharding:
            scale["sharding"] = sharding
        if encoding == "compressed_segmentation":
            scale["compressed_segmentation_block_size"] = [4, 4, 2]
        spec.update(create=True, scale_metadata=scale, multiscale_metadata={
            "data_type": dtype, "num_channels": 1,
            "type": "segmentation" if encoding == "compressed_segmentation" else "image"})
    return ts.open(spec).result(timeout=PEER_TIMEOUT)


def sample(dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    labels = rng.integers(1, 2**15, 12).astype(dtype)
    return labels[rng.integers(0, 12, (*SIZE, 1))]


def shifted(index: tuple, offset) -> tuple:
    """A coordinate index (slices and integers over x, y, z) as the 0-based numpy index of
    the data (for the expected values)."""
    out = []
    for i, o in zip(index, (*offset, 0)):
        if isinstance(i, slice):
            start = None if i.start is None else i.start - o
            stop = None if i.stop is None or i.stop - o < 0 else i.stop - o
            out.append(slice(start, stop, i.step))
        else:
            out.append(i - o)
    return tuple(out)


def indices(o) -> list[tuple]:
    """Indices in the coordinates of a layer at offset ``o``: voxels, slices with steps of
    both signs and open ends, the last voxel."""
    x, y, z = o
    return [(x + 10, y + 20, z + 5, 0), (x, y, z, 0), (x + 36, y + 20, z + 10, 0),
            (slice(x + 3, x + 30, 4), slice(None, None, -3), slice(z + 7, z + 8), slice(None)),
            (slice(x + 20, None, -2), slice(y + 17, y + 2, -5), slice(None, z + 4), slice(None)),
            (slice(x + 8, x + 16), slice(y, y + 8), slice(z + 4, z + 8), slice(None)),
            (slice(x + 30, x - 1, -7), slice(y + 5, y + 6), slice(z, z + 11, 3), slice(None))]


@pytest.mark.parametrize("offset", [OFFSET, NEGATIVE], ids=["offset", "negative"])
@pytest.mark.parametrize("dtype, encoding, sharding", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_reads_what_tensorstore_reads_at_the_same_coordinates(tmp_path, offset, dtype,
                                                              encoding, sharding):
    data = sample(dtype)
    store = ts_open(tmp_path, offset, dtype, encoding, sharding, create=True)
    # tensorstore's domain is the layer's coordinates
    store.write(data).result(timeout=PEER_TIMEOUT)
    vol = open_volume(tmp_path)
    start = tuple(int(v) for v in store.domain.inclusive_min[:3])
    assert vol.bounds == Bounds(offset, tuple(a + n for a, n in zip(offset, SIZE))) and \
        vol.bounds.start == start and vol.bounds.shape == SIZE and vol.shape == (*SIZE, 1)
    for index in indices(offset):
        theirs = store[index].read().result(timeout=PEER_TIMEOUT)
        np.testing.assert_array_equal(vol[index], theirs, err_msg=str(index))
        np.testing.assert_array_equal(theirs, data[shifted(index, offset)], err_msg=str(index))
    # orthogonal: integer arrays are coordinates (any order, repeated), a mask covers the axis
    x, y, z = offset
    index = ([x + 3, x, x + 36, x], y + 2, [z + 10, z], 0)
    np.testing.assert_array_equal(vol[index],
                                  store.oindex[index].read().result(timeout=PEER_TIMEOUT))
    # (tensorstore takes a mask as the index array of its nonzero() positions, from 0)
    mask = np.arange(SIZE[1]) % 3 == 1
    np.testing.assert_array_equal(vol[x + 1, mask, z + 2:z + 5],
                                  store.oindex[x + 1, np.flatnonzero(mask) + y,
                                               z + 2:z + 5].read().result(timeout=PEER_TIMEOUT))
    np.testing.assert_array_equal(vol.read_box((x + 5, y + 1, z), (x + 20, y + 9, z + 3)),
                                  store[x + 5:x + 20, y + 1:y + 9, z:z + 3].read()
                                  .result(timeout=PEER_TIMEOUT))


def test_negative_numbers_are_coordinates_not_from_the_end(tmp_path):
    data = sample("uint16")
    ts_open(tmp_path, NEGATIVE, create=True).write(data).result(timeout=PEER_TIMEOUT)
    vol = open_volume(tmp_path)
    assert vol[-1, -1, -3, 0] == data[19, 4, 10, 0]  # x -20 + 19, y -5 + 4, z -13 + 10
    np.testing.assert_array_equal(vol[-20:-10, -5, -13:-11], data[:10, 0, :2])
    with pytest.raises(IndexError, match=r"z index -1 is outside .* x \[-13, -2\)"):
        vol[-1, -1, -1]  # the last voxel on numpy's terms: not a voxel here


@pytest.mark.parametrize("dtype, encoding, sharding",
                         [c[1:] for c in CASES if c[0] in ("raw-unsharded", "cseg-murmur")],
                         ids=["raw-unsharded", "cseg-murmur"])
def test_writes_at_coordinates_tensorstore_reads_there(tmp_path, dtype, encoding, sharding):
    block = sample(dtype, seed=1)[:17, :16, :7]
    with create_volume(tmp_path, dtype=dtype, shape=SIZE, chunk_size=CHUNK, encoding=encoding,
                       voxel_offset=OFFSET, sharding=sharding,
                       compressed_segmentation_block_size=(4, 4, 2)) as vol:
        vol[1003:1020, 2005:, 32:39] = block
        vol[1036, 2000, 40] = 5  # the corner voxels, by coordinates
        vol[[1000, 1001], 2000, 30] = [7, 8]
    store = ts_open(tmp_path)
    np.testing.assert_array_equal(
        store[1003:1020, 2005:2021, 32:39].read().result(timeout=PEER_TIMEOUT), block)
    assert store[1036, 2000, 40, 0].read().result(timeout=PEER_TIMEOUT) == 5
    np.testing.assert_array_equal(
        store[1000:1002, 2000, 30, 0].read().result(timeout=PEER_TIMEOUT), [7, 8])
    expect = np.zeros((*SIZE, 1), dtype)
    expect[3:20, 5:, 2:9], expect[36, 0, 10], expect[:2, 0, 0, 0] = block, 5, [7, 8]
    np.testing.assert_array_equal(store.read().result(timeout=PEER_TIMEOUT), expect)


def test_zero_based_indices_on_an_offset_layer_raise_naming_the_bounds(tmp_path):
    data = sample("uint16")
    ts_open(tmp_path, create=True).write(data).result(timeout=PEER_TIMEOUT)
    vol = open_volume(tmp_path, mode="r+")
    assert vol[1010, 2020, 35, 0] == data[10, 20, 5, 0]  # the voxel cloud-volume means
    for index in [(slice(0, 10), slice(0, 10), slice(0, 10)), (0, 0, 0), (-1,),
                  (slice(1000, 1040),), (slice(None), slice(1990, 2005)), (1010, 2020, 41),
                  ([1000, 999], 2000, 30), (slice(1036, 998, -1),)]:
        with pytest.raises(IndexError, match=OUTSIDE):
            vol[index]
        with pytest.raises(IndexError, match="outside the volume's bounds"):
            vol[index] = 1
    with pytest.raises(IndexError, match=r"x index 0:512 is outside"):
        vol.read_box((0, 0, 0), (512, 512, 64))
    # an index inside the layer's size but not its coordinates used to read a shifted box
    with pytest.raises(IndexError, match=r"y index 5:10"):
        vol[1005:1010, 5:10, 30:35]
    np.testing.assert_array_equal(vol[1005:1010, 2005:2010, 30:35], data[5:10, 5:10, :5])
    assert not vol.array.changed_positions().size  # no failed assignment staged anything


def test_translate_to_zero_is_the_zero_based_view_sharing_staged_changes(tmp_path):
    data = sample("uint16")
    ts_open(tmp_path, sharding=IDENTITY, create=True).write(data).result(timeout=PEER_TIMEOUT)
    vol = open_volume(tmp_path, mode="r+")
    zero = vol.translate_to[0]
    assert zero.bounds == Bounds((0, 0, 0), SIZE) and vol.bounds.start == OFFSET
    assert str(zero.bounds) == "[0, 37) x [0, 21) x [0, 11)"
    for index in [(slice(3, 30, 4), slice(None, None, -3), 7), (Ellipsis, 0), (36, 20, 10),
                  (slice(8, 16), slice(0, 8), slice(4, 8))]:
        np.testing.assert_array_equal(zero[index], data[index])
    np.testing.assert_array_equal(zero[[5, 1, 5], 2:9, [0]], data[[5, 1, 5]][:, 2:9][:, :, [0]])
    with pytest.raises(IndexError, match=r"a view translated to \(0, 0, 0\)"):
        zero[-1]
    assert vol.translate_to[(1, 2, 3)].bounds == Bounds((1, 2, 3), (38, 23, 14))
    assert vol.translate_to[0].translate_to[OFFSET].bounds == vol.bounds
    with pytest.raises(SpecError, match="translate_to origin"):
        vol.translate_to[(1, 2)]
    # one set of staged changes: what one stages the other reads, commits and aborts
    zero[0, 0, 0] = 7
    assert vol[1000, 2000, 30, 0] == 7
    vol.abort()
    assert zero[0, 0, 0, 0] == data[0, 0, 0, 0]
    vol[1001, 2001, 31] = 9
    zero.commit()
    assert open_volume(tmp_path)[1001, 2001, 31, 0] == 9
    assert ts_open(tmp_path)[1001, 2001, 31, 0].read().result(timeout=PEER_TIMEOUT) == 9


def test_chunk_positions_and_their_boxes(tmp_path):
    data = sample("uint16")
    ts_open(tmp_path, sharding=IDENTITY, create=True).write(data).result(timeout=PEER_TIMEOUT)
    vol = open_volume(tmp_path)
    boxes = vol.chunk_bounds([[0, 0, 0], [1, 2, 1], [4, 2, 2]])
    assert boxes[0] == Bounds((1000, 2000, 30), (1008, 2008, 34))
    assert boxes[2] == Bounds((1032, 2016, 38), (1037, 2021, 41))  # clipped at the edge
    chunks = vol.read_chunks([[0, 0, 0], [1, 2, 1], [4, 2, 2]])  # grid positions
    for chunk, box in zip(chunks, boxes):
        np.testing.assert_array_equal(chunk, vol.read_box(box.start, box.stop))
    assert vol.translate_to[0].chunk_bounds([4, 2, 2]) == [Bounds((32, 16, 8), (37, 21, 11))]
    with pytest.raises(SpecError, match="outside the grid"):
        vol.chunk_bounds([5, 0, 0])


@pytest.mark.parametrize("sharding", [None, IDENTITY], ids=["unsharded", "sharded"])
def test_fill_missing_false_names_the_absent_chunk(tmp_path, sharding):
    with create_volume(tmp_path, dtype="uint16", shape=SIZE, chunk_size=CHUNK,
                       voxel_offset=OFFSET, sharding=sharding) as vol:
        vol[1008:1016, 2000:2008, 30:34] = 3  # chunk (1, 0, 0) only
    assert not open_volume(tmp_path)[1000:1008, 2000:2008, 30:34].any()  # filled, by default
    strict = open_volume(tmp_path, fill_missing=False)
    assert (strict[1008:1016, 2000:2008, 30:34] == 3).all()  # present chunks read
    where = "1000-1008_2000-2008_30-34"  # its file; or its shard, chunk ID and position
    if sharding is not None:
        spec = ngshard.ShardingSpec.from_json(sharding)
        where = re.escape(f"{spec.shard_filename(int(spec.locate(0)[0]))} chunk 0 at grid "
                          f"position (0, 0, 0)")
    with pytest.raises(NotFoundError, match=where):
        strict[1004, 2004, 32]
    with pytest.raises(NotFoundError, match="fill_missing=False"):
        strict[...]
    with pytest.raises(NotFoundError, match="fill_missing=False"):
        strict.read_chunks([[0, 0, 0]])
    with pytest.raises(NotFoundError, match="fill_missing=False"):
        ngshard.open(tmp_path, fill_missing=False)[1000:1010, 2000, 30]
    assert not ngshard.open(tmp_path)[1000:1008, 2000, 30].any()
    # writing is unaffected: a partial write into an absent chunk fills the rest with 0
    with open_volume(tmp_path, mode="r+", fill_missing=False) as vol:
        vol[1001, 2001, 31] = 4
        assert vol[1000:1002, 2001, 31, 0].tolist() == [0, 4]  # staged now: present
    again = open_volume(tmp_path, fill_missing=False)
    assert again[1000:1002, 2001, 31, 0].tolist() == [0, 4]
    with pytest.raises(NotFoundError):
        again[1000, 2008, 30]


def test_bounds_follow_a_staged_resize(tmp_path):
    with create_volume(tmp_path, dtype="uint16", shape=SIZE, chunk_size=CHUNK,
                       voxel_offset=OFFSET) as vol:
        vol[...] = 1
    vol = open_volume(tmp_path, mode="r+")
    vol.resize((40, 21, 11))
    assert vol.bounds == Bounds(OFFSET, (1040, 2021, 41))
    vol[1037:1040] = 2
    vol.commit()
    theirs = ts_open(tmp_path)
    assert theirs[1039, 2020, 40, 0].read().result(timeout=PEER_TIMEOUT) == 2
    assert theirs[1036, 2020, 40, 0].read().result(timeout=PEER_TIMEOUT) == 1


def test_cli_info_prints_the_bounds(tmp_path, capsys):
    from ngshard.cli import main

    create_volume(tmp_path, dtype="uint8", shape=SIZE, chunk_size=CHUNK, voxel_offset=NEGATIVE)
    main(["info", str(tmp_path)])
    assert "bounds       [-20, 17) x [-5, 16) x [-13, -2) (voxel coordinates" in \
        capsys.readouterr().out
