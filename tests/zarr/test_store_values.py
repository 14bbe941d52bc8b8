"""PrecomputedStore value for value: precomputed volumes written by ngshard and by
tensorstore, read through zarr-python, dask and xarray, equal what ``Volume`` and tensorstore
read; the OME-Zarr group of a multiscale layer; batching; listing; bad input."""

from __future__ import annotations

import json
import pickle
import warnings

import dask.array as da
import numpy as np
import pytest
import tensorstore as ts
import xarray as xr
import zarr
from peers import PEER_TIMEOUT
from test_volume import CHUNK, OFFSET, SIZE, ts_spec  # edge chunks on every axis
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import _collect_aiterator, sync

from ngshard import create_volume, open_volume
from ngshard.errors import CorruptDataError, NotFoundError, SpecError
from ngshard.zarr import PrecomputedStore

CASES = [  # id, dtype, channels, encoding, sharding
    ("uint8-raw-unsharded", "uint8", 1, "raw", None),
    ("uint8-raw-sharded", "uint8", 1, "raw", "auto"),
    ("uint16-2ch-raw-sharded", "uint16", 2, "raw", "auto"),
    ("uint64-cseg-sharded", "uint64", 1, "compressed_segmentation", "auto"),
    ("uint32-2ch-cseg-unsharded", "uint32", 2, "compressed_segmentation", None),
    ("uint8-jpeg-sharded", "uint8", 1, "jpeg", "auto"),
    ("uint8-3ch-jpeg-unsharded", "uint8", 3, "jpeg", None),
    ("uint8-png-sharded", "uint8", 1, "png", "auto"),
    ("float32-3ch-raw-unsharded", "float32", 3, "raw", None),
]
PROTO = default_buffer_prototype()


def sample(dtype, channels, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (*SIZE, channels)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    labels = rng.integers(1, min(np.iinfo(dtype).max, 2**63 - 1), 12, dtype=np.int64)
    return labels.astype(dtype)[rng.integers(0, 12, shape)]


def write(path, dtype="uint8", channels=1, encoding="raw", sharding="auto", data=None):
    data = sample(dtype, channels) if data is None else data
    with create_volume(path, dtype=dtype, shape=data.shape, chunk_size=CHUNK,
                       encoding=encoding, resolution=(4, 4, 40), voxel_offset=OFFSET,
                       sharding=sharding, compressed_segmentation_block_size=(4, 4, 2)) as vol:
        vol[...] = data
    return data


def keys(store, prefix="") -> list[str]:
    return sorted(sync(_collect_aiterator(store.list_prefix(prefix))))


@pytest.mark.parametrize("dtype, channels, encoding, sharding", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_ngshard_volume_reads_through_zarr_and_dask(tmp_path, dtype, channels, encoding,
                                                    sharding):
    data = write(tmp_path, dtype, channels, encoding, sharding)
    expected = open_volume(tmp_path)[...]  # jpeg is lossy: the volume's own read is the truth
    if encoding != "jpeg":
        np.testing.assert_array_equal(expected, data)
    store = PrecomputedStore(tmp_path)
    arr = zarr.open_array(store=store)
    assert arr.shape == (*SIZE, channels) and arr.dtype == np.dtype(dtype)
    assert arr.chunks == (*CHUNK, channels) and arr.metadata.dimension_names == tuple("xyzc")
    np.testing.assert_array_equal(arr[...], expected)
    for index in [(slice(3, 30, 4), slice(None, None, 3), 7), (-1, -1, -1),
                  (slice(30, None), slice(15, None), slice(8, None))]:  # the corner chunk
        np.testing.assert_array_equal(arr[index], expected[index])
    np.testing.assert_array_equal(da.from_zarr(store).compute(), expected)


def test_whole_raw_chunks_pass_through_as_stored(tmp_path):
    write(tmp_path, "uint16", 2, "raw", None)
    stored = (tmp_path / "4_4_40" / "13-21_5-13_100-104").read_bytes()  # chunk (1, 1, 0)
    got = PrecomputedStore(tmp_path).get_sync("c/1/1/0/0")
    assert got.to_bytes() == stored


def test_edge_chunks_are_padded_with_zeros(tmp_path):
    data = write(tmp_path, "uint16", 2, "raw", "auto")
    got = PrecomputedStore(tmp_path).get_sync("c/4/2/2/0")  # x 32..37, y 16..21, z 8..11
    chunk = np.frombuffer(got.to_bytes(), "<u2").reshape((*CHUNK, 2), order="F")
    np.testing.assert_array_equal(chunk[:5, :5, :3], data[32:, 16:, 8:])
    assert not chunk[5:].any() and not chunk[:, 5:].any() and not chunk[:, :, 3:].any()


def test_absent_chunks_are_absent_keys(tmp_path):
    with create_volume(tmp_path, dtype="uint8", shape=SIZE, chunk_size=CHUNK,
                       sharding="auto") as vol:
        vol[8:16, 0:8, 4:8] = 7  # one chunk: (1, 0, 1)
        vol[36, 20, 10] = 9  # the corner chunk (4, 2, 2)
    store = PrecomputedStore(tmp_path)
    assert keys(store, "c/") == ["c/1/0/1/0", "c/4/2/2/0"]
    assert store.get_sync("c/0/0/0/0") is None and store.get_sync("c/1/0/1/0") is not None
    assert not sync(store.exists("c/0/0/0/0")) and sync(store.exists("c/1/0/1/0"))
    for bad in ["c/5/0/0/0", "c/1/0/1/1", "c/1/0/1", "c/01/0/1/0", "c/-1/0/1/0", "c/a/0/1/0"]:
        assert store.get_sync(bad) is None and not sync(store.exists(bad))  # no such chunk
    arr = zarr.open_array(store=store)
    expected = np.zeros(SIZE, np.uint8)
    expected[8:16, 0:8, 4:8], expected[36, 20, 10] = 7, 9
    np.testing.assert_array_equal(arr[..., 0], expected)
    assert arr.nchunks_initialized == 2


@pytest.mark.parametrize("sharding", [None, {
    "@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
    "preshift_bits": 0, "minishard_bits": 2, "shard_bits": 1,
    "minishard_index_encoding": "gzip", "data_encoding": "gzip"}], ids=["unsharded", "murmur"])
@pytest.mark.parametrize("dtype, encoding", [("uint64", "compressed_segmentation"),
                                             ("uint16", "raw")])
def test_tensorstore_volume_reads_through_zarr(tmp_path, dtype, encoding, sharding):
    tstore = ts.open(ts_spec(tmp_path, dtype, 1, encoding, sharding, create=True)
                     ).result(timeout=PEER_TIMEOUT)[ts.d[:].translate_to[0]]
    data = sample(dtype, 1, seed=3)
    data[:8, :8] = 0  # absent chunks, as tensorstore leaves them
    tstore.write(data).result(timeout=PEER_TIMEOUT)
    expected = tstore.read().result(timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(expected, data)
    arr = zarr.open_array(store=PrecomputedStore(tmp_path))
    np.testing.assert_array_equal(arr[...], expected)
    np.testing.assert_array_equal(arr[10:30, 3:17, 2:9, 0], expected[10:30, 3:17, 2:9, 0])


def test_multiscale_layer_is_an_ome_zarr_group(tmp_path):
    write(tmp_path, "uint8", 2, "raw", "auto")
    open_volume(tmp_path, mode="r+").add_scale((2, 2, 1))
    store = PrecomputedStore(tmp_path, scale=None)
    group = zarr.open_group(store=store, mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the layer's own files are not shown as odd members
        assert sorted(group.array_keys()) == ["s0", "s1"]
    ome = group.attrs["ome"]
    assert ome["version"] == "0.5"
    (ms,) = ome["multiscales"]
    assert [(a["name"], a["type"], a.get("unit")) for a in ms["axes"]] == [
        ("x", "space", "nanometer"), ("y", "space", "nanometer"), ("z", "space", "nanometer"),
        ("c", "channel", None)]
    assert ms["datasets"][1] == {"path": "s1", "coordinateTransformations": [
        {"type": "scale", "scale": [8.0, 8.0, 40.0, 1.0]},
        {"type": "translation", "translation": [8.0 * 2, 8.0 * -2, 40.0 * 100, 0.0]}]}
    for i, name in enumerate(["s0", "s1"]):
        vol = open_volume(tmp_path, scale=i)
        level = group[name]
        assert level.shape == vol.shape and level.attrs["precomputed"]["key"] == vol.scale.key
        np.testing.assert_array_equal(level[...], vol[...])
        # one scale alone, by index or key, is a root array
        alone = zarr.open_array(store=PrecomputedStore(tmp_path, scale=vol.scale.key))
        np.testing.assert_array_equal(alone[...], vol[...])
    assert PrecomputedStore(tmp_path, scale=1) == PrecomputedStore(tmp_path, scale="8_8_40")


def test_ome_translation_places_each_level_at_the_layers_voxel_coordinates(tmp_path):
    """zarr indexes from 0; each level's OME translation (voxel_offset x resolution) says
    where: its voxel i is the global voxel translation / scale + i, where the volume and
    tensorstore read the same values."""
    write(tmp_path, "uint16", 1, "raw", "auto")
    open_volume(tmp_path, mode="r+").add_scale((2, 2, 1))
    group = zarr.open_group(store=PrecomputedStore(tmp_path, scale=None), mode="r")
    (ms,) = group.attrs["ome"]["multiscales"]
    for i, dataset in enumerate(ms["datasets"]):
        scale, translation = (t[t["type"]] for t in dataset["coordinateTransformations"])
        origin = tuple(round(t / r) for t, r in zip(translation[:3], scale[:3]))
        assert all(o * r == t for o, r, t in zip(origin, scale, translation))  # whole voxels
        vol = open_volume(tmp_path, scale=i)
        assert origin == vol.bounds.start == tuple(o // f for o, f in zip(OFFSET, (i + 1,
                                                                                   i + 1, 1)))
        theirs = ts.open({"driver": "neuroglancer_precomputed", "scale_index": i,
                          "kvstore": {"driver": "file", "path": str(tmp_path)}}
                         ).result(timeout=PEER_TIMEOUT)
        level = group[dataset["path"]]
        x, y, z = origin
        for point in [(0, 0, 0), (3, 7, 2), tuple(n - 1 for n in level.shape[:3])]:
            at = tuple(o + p for o, p in zip(origin, point))
            theirs_at = theirs[(*at, 0)].read().result(timeout=PEER_TIMEOUT)
            assert level[(*point, 0)] == vol[(*at, 0)] == theirs_at
        np.testing.assert_array_equal(level[2:9, 1:4, 3], vol[x + 2:x + 9, y + 1:y + 4, z + 3])
        np.testing.assert_array_equal(level[...], theirs.read().result(timeout=PEER_TIMEOUT))


def test_xarray_reads_a_level(tmp_path):
    data = write(tmp_path, "uint16", 2, "raw", "auto")
    open_volume(tmp_path, mode="r+").add_scale((2, 2, 1))
    # the levels' sizes differ along the same named axes: xarray takes one level at a time
    ds = xr.open_zarr(PrecomputedStore(tmp_path, scale=None), consolidated=False,
                      drop_variables=["s1"])
    assert ds["s0"].dims == ("x", "y", "z", "c")
    np.testing.assert_array_equal(ds["s0"].isel(z=slice(2, 9)).values, data[:, :, 2:9])
    ds = xr.open_dataset(PrecomputedStore(tmp_path, scale=None), engine="zarr",
                         consolidated=False, drop_variables=["s0"])
    np.testing.assert_array_equal(ds["s1"].values, open_volume(tmp_path, scale=1)[...])


def test_byte_ranges_of_generated_keys(tmp_path):
    write(tmp_path, "uint16", 2, "raw", "auto")
    store = PrecomputedStore(tmp_path)
    for key in ["zarr.json", "c/1/1/1/0", "c/4/2/2/0"]:
        whole = store.get_sync(key).to_bytes()
        for request, part in [(RangeByteRequest(3, 17), whole[3:17]),
                              (OffsetByteRequest(100), whole[100:]),
                              (SuffixByteRequest(9), whole[-9:])]:
            assert sync(store.get(key, PROTO, request)).to_bytes() == part
        assert sync(store.getsize(key)) == len(whole)
    keys_ranges = [("c/1/1/1/0", RangeByteRequest(0, 4)), ("zarr.json", None),
                   ("c/0/0/0/0", SuffixByteRequest(2)), ("c/9/9/9/0", None)]
    got = sync(store.get_partial_values(PROTO, keys_ranges))
    assert got[0].to_bytes() == store.get_sync("c/1/1/1/0").to_bytes()[:4]
    assert json.loads(got[1].to_bytes())["shape"] == [*SIZE, 2]
    assert got[2].to_bytes() == store.get_sync("c/0/0/0/0").to_bytes()[-2:] and got[3] is None


def test_listing_shows_the_zarr_view_and_other_files(tmp_path):
    write(tmp_path, "uint64", 1, "compressed_segmentation", None)
    info = json.loads((tmp_path / "info").read_text())
    info["mesh"] = "mesh"
    (tmp_path / "info").write_text(json.dumps(info))
    (tmp_path / "mesh").mkdir()
    (tmp_path / "mesh" / "1:0").write_bytes(b"m")
    (tmp_path / "provenance").write_text("{}")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README").write_bytes(b"hello")
    store = PrecomputedStore(tmp_path)
    listed = keys(store)
    chunks = [k for k in listed if k.startswith("c/")]
    assert len(chunks) == 5 * 3 * 3  # every chunk of the grid, from the chunk files
    assert sorted(set(listed) - set(chunks)) == ["notes/README", "zarr.json"]
    assert sorted(sync(_collect_aiterator(store.list_dir("")))) == ["c", "notes", "zarr.json"]
    assert sorted(sync(_collect_aiterator(store.list_dir("c/4/")))) == ["0", "1", "2"]
    assert sync(_collect_aiterator(store.list_dir("c/4/2/1"))) == ("0",)
    assert store.get_sync("notes/README").to_bytes() == b"hello"
    for hidden in ["info", "provenance", "mesh/1:0", "4_4_40/5-13_-3-5_100-104"]:
        assert (tmp_path / hidden).is_file()
        assert store.get_sync(hidden) is None and not sync(store.exists(hidden))
    assert keys(store, "4_4_40/") == keys(store, "mesh") == keys(store, "info") == []
    copy = pickle.loads(pickle.dumps(store))  # as dask's distributed scheduler sends it
    assert copy == store and copy.get_sync("c/1/1/1/0") == store.get_sync("c/1/1/1/0")


def test_one_batch_of_reads_per_call_over_http(http_server):
    data = write(http_server.root, "uint8", 1, "raw", {
        "@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
        "minishard_bits": 0, "shard_bits": 0, "minishard_index_encoding": "raw",
        "data_encoding": "raw"})  # one shard, one minishard: 45 chunks laid out in order
    store = PrecomputedStore(http_server.base)
    chunk_keys = [f"c/{x}/{y}/{z}/0" for x in range(5) for y in range(3) for z in range(3)]
    http_server.requests.clear()
    got = sync(store.get_partial_values(PROTO, [(k, None) for k in chunk_keys]))
    assert all(g is not None for g in got)
    # every chunk of the one shard: the shard read whole, in one GET with no Range
    gets = [r for r in http_server.requests if r[0] == "GET"]
    assert gets == [("GET", gets[0][1], None)], gets
    # zarr asks for each chunk with its own get, concurrently: those are gathered too
    http_server.requests.clear()
    np.testing.assert_array_equal(zarr.open_array(store=store)[...], data)
    asks = [r for r in http_server.requests if r[1].endswith(".shard")]
    # zarr asks for 10 at a time: each batch one GET of the shard index (no HEAD: its
    # response confirms the cached index) and one of the data
    assert {r[0] for r in asks} == {"GET"} and len(asks) <= 2 * (45 // 10 + 1), asks


def test_wrong_places_and_bad_chunks(tmp_path):
    with pytest.raises(NotFoundError, match=str(tmp_path / "nowhere")):
        PrecomputedStore(tmp_path / "nowhere")
    with pytest.raises(NotFoundError, match="memory://no/such/layer"):
        PrecomputedStore("memory://no/such/layer")
    (tmp_path / "skel").mkdir()
    (tmp_path / "skel" / "info").write_text('{"@type": "neuroglancer_skeletons"}')
    with pytest.raises(SpecError, match="not a volume"):
        PrecomputedStore(tmp_path / "skel")
    write(tmp_path / "vol", "uint8", 1, "raw", None)
    with pytest.raises(SpecError, match=r"vol/info: .*scale"):
        PrecomputedStore(tmp_path / "vol", scale=3)
    with pytest.raises(SpecError, match="no scale with key"):
        PrecomputedStore(tmp_path / "vol", scale="1_1_1")
    chunk = tmp_path / "vol" / "4_4_40" / "13-21_5-13_100-104"
    chunk.write_bytes(chunk.read_bytes()[:-1])  # a raw chunk one byte short
    arr = zarr.open_array(store=PrecomputedStore(tmp_path / "vol"))
    with pytest.raises(CorruptDataError, match="13-21_5-13_100-104"):
        arr[...]
    # the others read: zarr's x 0..8 is the volume's voxel coordinates 5..13
    np.testing.assert_array_equal(arr[:8], open_volume(tmp_path / "vol")[5:13])


def test_unsupported_encoding_is_named(tmp_path):
    write(tmp_path, "uint8", 1, "raw", None)
    info = json.loads((tmp_path / "info").read_text())
    info["scales"][0]["encoding"] = "fpzip"  # cloud-volume's; jxl reads now
    (tmp_path / "info").write_text(json.dumps(info))
    with pytest.raises(SpecError, match="fpzip"):
        PrecomputedStore(tmp_path)
