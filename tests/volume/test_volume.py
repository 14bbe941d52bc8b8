"""Precomputed volumes against tensorstore: what it writes ngshard reads, and the reverse,
value for value, over dtypes, channels, ragged sizes, offsets, encodings and sharding."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard
import ngshard.progress
from ngshard.volume import ScaleHandle, VolumeInfo, create_volume, open_volume
from ngshard.volume.downsample import downsample_mode

IDENTITY = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 1,
            "minishard_bits": 2, "shard_bits": 2, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}
MURMUR = dict(IDENTITY, hash="murmurhash3_x86_128", preshift_bits=0, data_encoding="raw")

CASES = [  # id, dtype, channels, encoding, sharding
    ("uint8-raw-unsharded", "uint8", 1, "raw", None),
    ("uint16-2ch-identity", "uint16", 2, "raw", IDENTITY),
    ("uint32-cseg-murmur", "uint32", 1, "compressed_segmentation", MURMUR),
    ("uint32-2ch-cseg-identity", "uint32", 2, "compressed_segmentation", IDENTITY),
    ("uint64-cseg-unsharded", "uint64", 1, "compressed_segmentation", None),
    ("uint64-raw-identity", "uint64", 1, "raw", IDENTITY),
    ("float32-3ch-murmur", "float32", 3, "raw", MURMUR),
]
SIZE, CHUNK, OFFSET = (37, 21, 11), (8, 8, 4), (5, -3, 100)


def ts_spec(path, dtype, channels, encoding, sharding, create=False) -> dict:
    scale = {"size": list(SIZE), "chunk_size": list(CHUNK), "voxel_offset": list(OFFSET),
             "resolution": [4, 4, 40], "encoding": encoding}
    if sharding:
        scale["sharding"] = sharding
    if encoding == "compressed_segmentation":
        scale["compressed_segmentation_block_size"] = [4, 4, 2]
    spec = {"driver": "neuroglancer_precomputed",
            "kvstore": {"driver": "file", "path": str(path)}}
    if create:
        spec.update(create=True, scale_metadata=scale, multiscale_metadata={
            "data_type": dtype, "num_channels": channels,
            "type": "segmentation" if encoding == "compressed_segmentation" else "image"})
    return spec


def sample(dtype, channels, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (*SIZE, channels)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    hi = min(np.iinfo(dtype).max, 2**63 - 1)
    labels = rng.integers(0, hi, 12, dtype=np.int64, endpoint=True).astype(dtype)
    return labels[rng.integers(0, 12, shape)]  # few labels, as segmentations have


@pytest.mark.parametrize("dtype, channels, encoding, sharding",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_tensorstore_writes_ngshard_reads(tmp_path, dtype, channels, encoding, sharding):
    data = sample(dtype, channels)
    store = ts.open(ts_spec(tmp_path, dtype, channels, encoding, sharding, create=True)
                    ).result(timeout=PEER_TIMEOUT)
    store.write(data).result(timeout=PEER_TIMEOUT)  # its domain: the layer's voxel coordinates
    vol = open_volume(tmp_path)
    assert vol.shape == (*SIZE, channels) and vol.dtype == np.dtype(dtype)
    assert vol.voxel_offset == OFFSET and vol.chunk_size == CHUNK
    np.testing.assert_array_equal(vol[:], data)
    # the same voxel coordinates as tensorstore's, x from 5, y from -3, z from 100
    for index in [(slice(8, 35, 4), slice(None, None, -3), 107), (Ellipsis, 0), (41, 17, 110),
                  (slice(13, 21), slice(-3, 5), slice(104, 108)), (5, -1, 100)]:
        np.testing.assert_array_equal(vol[index], store[index].read().result(timeout=PEER_TIMEOUT))
    np.testing.assert_array_equal(vol[13:21, -3:5, 104:108], data[8:16, 0:8, 4:8])


@pytest.mark.parametrize("dtype, channels, encoding, sharding",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ngshard_writes_tensorstore_reads(tmp_path, dtype, channels, encoding, sharding):
    data = sample(dtype, channels, seed=1)
    vol = create_volume(tmp_path, dtype=dtype, shape=(*SIZE, channels), chunk_size=CHUNK,
                        encoding=encoding, resolution=(4, 4, 40), voxel_offset=OFFSET,
                        sharding=sharding, compressed_segmentation_block_size=(4, 4, 2))
    # voxel coordinates: x from 5, z from 100; partial chunks first: read-modify-write later
    vol[:15, :, :105] = data[:10, :, :5]
    vol[15:] = data[10:]
    vol[:15, :, 105:] = data[:10, :, 5:]
    np.testing.assert_array_equal(vol[:], data)  # reads see staged chunks
    vol.commit()
    store = ts.open(ts_spec(tmp_path, dtype, channels, encoding, sharding)
                    ).result(timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(store.read().result(timeout=PEER_TIMEOUT), data)
    np.testing.assert_array_equal(store[15:30, -1:9, 102].read().result(timeout=PEER_TIMEOUT),
                                  vol[15:30, -1:9, 102])
    np.testing.assert_array_equal(open_volume(tmp_path)[:], data)


def test_absent_chunks_read_as_zero_and_updates_merge(tmp_path):
    with create_volume(tmp_path, dtype="uint16", shape=SIZE, chunk_size=CHUNK,
                       sharding="auto") as vol:
        vol[1:3, 2, 3] = 7
    vol = open_volume(tmp_path, mode="r+")
    expect = np.zeros((*SIZE, 1), np.uint16)
    expect[1:3, 2, 3] = 7
    np.testing.assert_array_equal(vol[:], expect)
    vol[2:5, 2, 3, 0] = [9, 9, 9]
    vol.commit()
    expect[2:5, 2, 3] = 9
    np.testing.assert_array_equal(open_volume(tmp_path)[:], expect)


def test_auto_sharding_bits():
    auto = ngshard.volume.auto_sharding
    spec = auto((1024, 1024, 512), (64, 64, 64), 64**3, 64 * 64**3)
    assert spec.hash == "identity"
    assert (spec.preshift_bits, spec.minishard_bits, spec.shard_bits) == (3, 3, 5)  # 64 per shard
    # at most the target: 100 chunks fit, 64 are taken
    assert auto((1024, 1024, 512), (64, 64, 64), 64**3, 100 * 64**3).shard_bits == 5
    # small chunks: the shard index stops at 2**11 entries (32 KiB) and minishards grow
    spec = auto((4096,) * 3, (32,) * 3, 32**3)
    assert (spec.preshift_bits, spec.minishard_bits, spec.shard_bits) == (5, 11, 5)
    # a volume smaller than one shard, and one chunk larger than the target
    assert auto((100,) * 3, (64,) * 3, 64**3).to_json()["shard_bits"] == 0
    spec = auto((4096,) * 3, (64,) * 3, 64**3, shard_bytes=1000)
    assert (spec.preshift_bits, spec.minishard_bits, spec.shard_bits) == (0, 0, 18)


@pytest.mark.parametrize("encoding,data_encoding", [
    ("raw", "gzip"), ("compressed_segmentation", "gzip"), ("compresso", "gzip"),
    ("crackle", "gzip"), ("jpeg", "raw"), ("png", "raw"), ("jxl", "raw")])
def test_auto_sharding_gzips_as_igneous(encoding, data_encoding):
    """Shards hold gzip'd chunks unless the chunk encoding is an image codec, as igneous
    chooses (compressed_segmentation shrinks several times more under gzip)."""
    spec = ngshard.volume.auto_sharding((256,) * 3, (64,) * 3, 8 * 64**3, encoding=encoding)
    assert spec.data_encoding == data_encoding


def test_auto_sharded_compressed_segmentation_is_gzipd_and_tensorstore_reads_it(tmp_path):
    labels = (np.arange(96 * 80 * 40, dtype=np.uint64).reshape(96, 80, 40) // 1000) << 33
    vol = create_volume(tmp_path, shape=labels.shape, dtype="uint64", chunk_size=(32, 32, 16),
                        encoding="compressed_segmentation", layer_type="segmentation",
                        sharding="auto")
    vol[:] = labels
    vol.commit()
    assert json.loads((tmp_path / "info").read_text())["scales"][0]["sharding"][
        "data_encoding"] == "gzip"
    store = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}/"}
                    ).result(timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(store.read().result(timeout=PEER_TIMEOUT)[..., 0], labels)
    np.testing.assert_array_equal(open_volume(tmp_path)[..., 0], labels)


def test_several_scales_by_index_and_key(tmp_path):
    create_volume(tmp_path, dtype="uint8", shape=SIZE, chunk_size=CHUNK)
    info = json.loads((tmp_path / "info").read_text())
    coarse = dict(info["scales"][0], key="coarse", size=[19, 11, 6], resolution=[8, 8, 80])
    info["scales"].append(coarse)
    (tmp_path / "info").write_text(json.dumps(info))
    handle = ScaleHandle(ngshard.storage.open_storage(str(tmp_path)),
                         VolumeInfo.from_json(info), "coarse", "r+")
    with ngshard.volume.Volume(handle) as vol:
        vol[:] = 3
    assert open_volume(tmp_path, 1).shape == (19, 11, 6, 1)
    assert (open_volume(tmp_path, "coarse")[:] == 3).all()
    assert (open_volume(tmp_path, 0)[:] == 0).all()
    assert [s.key for s in open_volume(tmp_path).scales] == ["1_1_1", "coarse"]


@pytest.mark.parametrize("change, message", [
    (lambda i: i.update(type="mesh"), "type"),
    (lambda i: i.update(data_type="complex64"), "data_type"),
    (lambda i: i.update(num_channels=0), "num_channels"),
    (lambda i: i["scales"][0].update(size=[1, 2]), r"scales\[0\]: size"),
    (lambda i: i["scales"][0].update(encoding="zip"), "encoding"),
    (lambda i: i["scales"][0].update(chunk_sizes=[[8, 8, 4], [4, 4, 4]],
                                     sharding=IDENTITY), "exactly one chunk size"),
    (lambda i: i.update(scales=[]), "scales"),
    (lambda i: i["scales"][0].update(encoding="compressed_segmentation",
                                     compressed_segmentation_block_size=[8, 8, 8]),
     r"scales\[0\]: encoding 'compressed_segmentation' does not support data type uint8"),
    (lambda i: i.update(num_channels=2) or i["scales"][0].update(encoding="jpeg"),
     r"scales\[0\]: .*jpeg.* 2 channels"),
])
def test_bad_info_names_the_member(tmp_path, change, message):
    create_volume(tmp_path, dtype="uint8", shape=SIZE, chunk_size=CHUNK)
    info = json.loads((tmp_path / "info").read_text())
    change(info)
    (tmp_path / "info").write_text(json.dumps(info))
    with pytest.raises(ngshard.SpecError, match=message):
        open_volume(tmp_path)


def test_bad_indices_values_and_chunks(tmp_path):
    with create_volume(tmp_path, dtype="uint8", shape=SIZE, chunk_size=CHUNK) as vol:
        vol[:] = 1
    vol = open_volume(tmp_path, mode="r+")
    with pytest.raises(IndexError):
        vol[37]
    with pytest.raises(IndexError):
        vol[0, 0, 0, 0, 0]
    with pytest.raises(TypeError):
        vol[0, 0, 0] = 1.5
    with pytest.raises(ValueError, match="do not fit"):
        vol[0, 0, 0] = 300
    with pytest.raises(ValueError, match="shape"):
        vol[0:2, 0, 0] = [1, 2, 3]
    with pytest.raises(ngshard.NgShardError, match="read-only"):
        open_volume(tmp_path)[0, 0, 0] = 1
    chunk = next(p for p in (tmp_path / "1_1_1").iterdir() if p.name.startswith("0-8_"))
    chunk.write_bytes(chunk.read_bytes()[:-1])
    with pytest.raises(ngshard.CorruptDataError, match=chunk.name):
        open_volume(tmp_path)[:]


def test_xyz_arrays_fill_a_single_channel(tmp_path):
    labels = np.arange(16 * 8 * 4, dtype=np.uint64).reshape(16, 8, 4)
    with create_volume(tmp_path, dtype="uint64", shape=(16, 8, 4), chunk_size=(8, 8, 4),
                       encoding="compressed_segmentation", sharding="auto") as vol:
        vol[:] = labels
    np.testing.assert_array_equal(open_volume(tmp_path)[..., 0], labels)


def test_add_scale_mean_for_images_mode_for_segmentation(tmp_path):
    rng = np.random.default_rng(3)
    image = rng.integers(0, 200, (21, 13, 6, 1)).astype(np.uint8)
    with create_volume(tmp_path / "img", dtype="uint8", shape=image.shape, chunk_size=(8, 8, 4),
                       resolution=(4, 4, 40), sharding="auto") as vol:
        vol[:] = image
    coarse = open_volume(tmp_path / "img").add_scale((2, 2, 1))
    assert coarse.shape == (11, 7, 6, 1) and coarse.resolution == (8, 8, 40)
    padded = np.pad(image, [(0, 1), (0, 1), (0, 0), (0, 0)], mode="edge").astype(float)
    means = padded.reshape(11, 2, 7, 2, 6, 1).mean(axis=(1, 3))
    np.testing.assert_array_equal(open_volume(tmp_path / "img", "8_8_40")[:],
                                  np.rint(means).astype(np.uint8))
    store = ts.open({"driver": "neuroglancer_precomputed", "scale_index": 1,
                     "kvstore": {"driver": "file", "path": str(tmp_path / "img")}}
                    ).result(timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(store[ts.d[:].translate_to[0]].read().result(timeout=PEER_TIMEOUT),
                                  open_volume(tmp_path / "img", 1)[:])

    labels = np.zeros((4, 4, 2, 1), np.uint64)
    labels[0:2, 0:2, 0, 0] = [[7, 7], [9, 9]]  # first block: 7 and 9 twice each, 0 four times
    labels[2:4, 0:2, :, 0] = 5
    labels[2, 0, 0, 0] = 2**63
    with create_volume(tmp_path / "seg", dtype="uint64", shape=labels.shape,
                       chunk_size=(4, 4, 2), encoding="compressed_segmentation") as vol:
        vol[:] = labels
    mode = open_volume(tmp_path / "seg").add_scale((2, 2, 2))[:]
    assert mode.shape == (2, 2, 1, 1)
    assert mode[0, 0, 0, 0] == 0 and mode[1, 0, 0, 0] == 5 and mode[1, 1, 0, 0] == 0

    # chunk by chunk, each in slabs on threads: the same as the whole array at once
    labels = sample("uint64", 1)
    with create_volume(tmp_path / "seg2", dtype="uint64", shape=labels.shape, chunk_size=CHUNK,
                       encoding="compressed_segmentation", sharding="auto") as vol:
        vol[:] = labels
    for factor in [(2, 2, 2), (3, 1, 2)]:
        got = open_volume(tmp_path / "seg2").add_scale(factor)[:]
        np.testing.assert_array_equal(got, downsample_mode(labels, factor))


def test_numpy_reads_the_whole_scale(tmp_path):
    data = sample("uint16", 2)
    with create_volume(tmp_path, dtype="uint16", shape=data.shape, chunk_size=CHUNK) as vol:
        vol[:] = data
    vol = open_volume(tmp_path)
    np.testing.assert_array_equal(np.asarray(vol), data)
    assert np.asarray(vol, dtype=np.float32).dtype == np.float32
    assert float(np.mean(vol)) == pytest.approx(float(data.mean()))


def test_read_chunks_in_one_batch(tmp_path):
    data = sample("uint16", 2)
    with create_volume(tmp_path, dtype="uint16", shape=(*SIZE, 2), chunk_size=CHUNK,
                       sharding="auto") as vol:
        vol[:20] = data[:20]
    vol = open_volume(tmp_path)
    got = vol.read_chunks([[0, 0, 0], [4, 2, 2], [1, 1, 1]])  # the middle one is absent
    np.testing.assert_array_equal(got[0], data[:8, :8, :4])
    assert got[1].shape == (5, 5, 3, 2) and not got[1].any()  # clipped edge chunk
    np.testing.assert_array_equal(got[2], data[8:16, 8:16, 4:8])


def test_reads_and_writes_of_many_chunks_go_in_batches(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ngshard.progress, "DELAY", 0)  # bars show at once, not after 1 s
    data = sample("uint8", 1)
    with create_volume(tmp_path, dtype="uint8", shape=data.shape, chunk_size=(2, 2, 2),
                       sharding="auto", progress=True) as vol:
        vol[:] = 7
        vol[1:, 1:] = data[1:, 1:]  # 1254 chunks, more than one batch; most partly covered
    assert "writing chunks" in capsys.readouterr().err
    vol = open_volume(tmp_path, progress=True)
    expect = data.copy()
    expect[0], expect[:, 0] = 7, 7
    np.testing.assert_array_equal(vol[:], expect)
    assert "reading chunks" in capsys.readouterr().err


def test_large_raw_volume_both_ways(tmp_path):
    """Reads big enough to go in threaded pieces into a shared buffer, and whole-chunk writes
    cut from a C-ordered array, agree with tensorstore."""
    spec = dict(IDENTITY, preshift_bits=3, minishard_bits=6, shard_bits=0, data_encoding="raw")
    data = np.random.default_rng(2).integers(0, 256, (320, 256, 128, 1), dtype=np.uint8)
    scale = {"size": [320, 256, 128], "chunk_size": [32, 32, 32], "resolution": [1, 1, 1],
             "encoding": "raw", "sharding": spec}
    store = ts.open({"driver": "neuroglancer_precomputed", "create": True,
                     "kvstore": {"driver": "file", "path": str(tmp_path / "ts")},
                     "scale_metadata": scale, "multiscale_metadata": {
                         "data_type": "uint8", "num_channels": 1, "type": "image"}}
                    ).result(timeout=PEER_TIMEOUT)
    store.write(data).result(timeout=PEER_TIMEOUT)
    theirs = open_volume(tmp_path / "ts")
    np.testing.assert_array_equal(theirs[:], data)
    np.testing.assert_array_equal(theirs[5:300, 40:, 17], data[5:300, 40:, 17])
    with create_volume(tmp_path / "ng", dtype="uint8", shape=data.shape, chunk_size=(32,) * 3,
                       sharding=spec) as vol:
        vol[:] = data
    ours = ts.open({"driver": "neuroglancer_precomputed",
                    "kvstore": {"driver": "file", "path": str(tmp_path / "ng")}}
                   ).result(timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(ours.read().result(timeout=PEER_TIMEOUT), data)


def test_unsharded_volume_over_http_reads_chunks_all_at_once(http_server):
    """Chunk files of a batch are requested together (missing ones, and their .gz twins,
    too), so a remote read pays a round trip per batch, not per chunk."""
    data = sample("uint16", 2)
    store = ts.open(ts_spec(http_server.root, "uint16", 2, "raw", None, create=True)
                    ).result(timeout=PEER_TIMEOUT)
    store.write(data).result(timeout=PEER_TIMEOUT)
    key = json.loads((http_server.root / "info").read_text())["scales"][0]["key"]
    (http_server.root / key / "13-21_5-13_104-108").unlink()  # absent chunks read as 0
    data[8:16, 8:16, 4:8] = 0
    http_server.delay = 0.3
    np.testing.assert_array_equal(open_volume(http_server.base)[:], data)
    chunks = np.prod([-(-s // c) for s, c in zip(SIZE, CHUNK)])
    assert http_server.at_once > chunks // 2  # 45 here; two at a time before
