"""ZarrArray.read_many: many boxes in one batch, each granule decoded once, value for value
what tensorstore and zarr-python read, at shard and inner-chunk edges, in partial shards and
where granules are missing (the fill value); after another writer replaces a shard, the new
values; a corrupt granule named in the error; only the planes of a zstd chunk that the boxes
reach decoded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
import zarr
import zstandard
from peers import PEER_TIMEOUT

from ngshard import CorruptDataError
from ngshard.limits import STREAM_BYTES
from ngshard.staged import copy
from ngshard.staged.copy import stream_copy
from ngshard.threads import WORKERS
from ngshard.zarr import handle, open_array

SHAPE, SHARD, INNER, FILL = (21, 17, 13), [8, 8, 8], [4, 4, 4], 7

BOXES = [
    (slice(7, 9), slice(0, 17), slice(3, 5)),  # across a shard edge and an inner chunk edge
    (slice(3, 5), slice(3, 5), slice(3, 5)),  # eight inner chunks of one shard, 2^3 points
    (slice(16, 21), slice(15, 17), slice(8, 13)),  # the partial shards at the far edges
    (slice(0, 4), slice(0, 4), slice(0, 4)),  # one inner chunk, whole
    (5, slice(None), 12),  # a line through a missing region and a partial shard
    (slice(None), slice(None), slice(None)),  # everything
    (slice(1, 20, 3), [0, 9, 16], slice(2, 11, 4)),  # steps and an orthogonal index array
    (slice(9, 9), slice(None), slice(None)),  # empty
    (slice(3, 5), slice(3, 5), slice(3, 5)),  # a box again: the same granules
]


def ts_array(path: Path, create: bool = False):
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    if create:
        spec["metadata"] = {
            "shape": list(SHAPE), "data_type": "uint16", "fill_value": FILL,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": SHARD}},
            "codecs": [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": INNER, "codecs": [
                    {"name": "bytes", "configuration": {"endian": "little"}},
                    {"name": "zstd", "configuration": {"level": 3}}]}}]}
    return ts.open(spec, create=create, open=not create).result(timeout=PEER_TIMEOUT)


@pytest.fixture
def written(tmp_path):
    """An array tensorstore wrote in part: whole shards and inner chunks left missing."""
    store = ts_array(tmp_path, create=True)
    rng = np.random.default_rng(3)
    expected = np.full(SHAPE, FILL, np.uint16)
    for box in [(slice(0, 10), slice(2, 17), slice(0, 13)), (slice(14, 21), slice(9, 17),
                                                             slice(6, 13))]:
        values = rng.integers(0, 60000, expected[box].shape, dtype=np.uint16)
        store[box].write(values).result(timeout=PEER_TIMEOUT)
        expected[box] = values
    return tmp_path, expected


def peers_read(path: Path, box: tuple) -> tuple[np.ndarray, np.ndarray]:
    store = ts_array(path)
    by_ts = store.oindex[box].read().result(timeout=PEER_TIMEOUT)
    by_zarr = zarr.open_array(str(path), mode="r").oindex[box]
    return np.asarray(by_ts), np.asarray(by_zarr)


def test_boxes_read_as_the_peers_read_them(written):
    path, expected = written
    got = open_array(path).read_many(BOXES)
    assert len(got) == len(BOXES)
    for box, values in zip(BOXES, got):
        by_ts, by_zarr = peers_read(path, box)
        np.testing.assert_array_equal(values, by_ts)
        np.testing.assert_array_equal(values, by_zarr)
        np.testing.assert_array_equal(values, open_array(path)[box])  # one at a time
    assert got[4].shape == (17,) and got[7].shape == (0, 17, 13)
    assert (got[4][:2] == FILL).all()  # a missing inner chunk reads as the fill value


def test_many_random_boxes_against_numpy(written):
    path, expected = written
    rng = np.random.default_rng(11)
    boxes = []
    for _ in range(60):
        lo = [int(rng.integers(0, n)) for n in SHAPE]
        boxes.append(tuple(slice(a, int(rng.integers(a, n)) + 1) for a, n in zip(lo, SHAPE)))
    for box, values in zip(boxes, open_array(path).read_many(boxes)):
        np.testing.assert_array_equal(values, expected[box])


def test_a_shard_replaced_by_another_writer_reads_new(written):
    path, expected = written
    arr = open_array(path)
    box = (slice(0, 8), slice(0, 8), slice(0, 8))
    np.testing.assert_array_equal(arr.read_many([box])[0], expected[box])  # index cached
    new = np.arange(8 ** 3, dtype=np.uint16).reshape(8, 8, 8)
    ts_array(path)[box].write(new).result(timeout=PEER_TIMEOUT)  # the whole shard again
    first, second = arr.read_many([box, (slice(2, 5), slice(6, 9), slice(7, 8))])
    np.testing.assert_array_equal(first, new)
    expected[box] = new
    np.testing.assert_array_equal(second, expected[2:5, 6:9, 7:8])


def test_a_corrupt_granule_is_named(written):
    path, _ = written
    shard = path / "c" / "0" / "0" / "0"
    data = bytearray(shard.read_bytes())
    data[8:40] = bytes(32)  # inside the first inner chunk's zstd frame (the index is at the end)
    shard.write_bytes(bytes(data))
    with pytest.raises(CorruptDataError, match=r"c/0/0/0 inner chunk at \(0, 0, 0\)"):
        open_array(path).read_many([(slice(1, 3), slice(0, 2), slice(5, 6)),
                                    (slice(0, 2), slice(2, 3), slice(1, 2))])


def test_a_bad_index_raises_before_reading(written):
    path, _ = written
    with pytest.raises(IndexError):
        open_array(path).read_many([(slice(0, 2),) * 3, (30, 0, 0)])


def test_decoding_reuses_a_zstd_decompressor_per_thread(written, monkeypatch):
    # a new decompressor allocates and warms its context: about a tenth of a large chunk's
    # decoding; each thread keeps one (the pool's threads may hold theirs from before)
    path, expected = written
    made = []
    real = zstandard.ZstdDecompressor

    def counted(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(zstandard, "ZstdDecompressor", counted)
    array = open_array(path, chunk_cache_bytes=0)
    for _ in range(3):
        np.testing.assert_array_equal(array[...], expected)
    assert len(made) <= WORKERS + 1  # the pool's threads and this one, once each


def test_boxes_decode_only_the_planes_they_reach(tmp_path, monkeypatch):
    # 64^3 uint8 inner chunks are two zstd blocks each: a box that reaches only a chunk's
    # first planes decodes the blocks that hold them, not the rest (and a damaged block that
    # no box reaches goes unread); one that reaches the damage is refused, named
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path)},
            "metadata": {"shape": [128, 64, 64], "data_type": "uint8",
                         "chunk_grid": {"name": "regular",
                                        "configuration": {"chunk_shape": [128, 64, 64]}},
                         "codecs": [{"name": "sharding_indexed", "configuration": {
                             "chunk_shape": [64, 64, 64], "codecs": [
                                 {"name": "bytes"}, {"name": "zstd", "configuration": {
                                     "level": 3}}]}}]}}
    expected = np.random.default_rng(5).integers(0, 4, (128, 64, 64), dtype=np.uint8)
    ts.open(spec, create=True).result(timeout=PEER_TIMEOUT)[...].write(expected).result(
        timeout=PEER_TIMEOUT)
    boxes = [(slice(60, 70), slice(3, 9), slice(0, 64)),  # the first chunk's tail, the
             (slice(64, 66), slice(0, 5), slice(7, 8))]  # second's first planes
    wanted = []
    real = handle.zstd_prefix
    monkeypatch.setattr(handle, "zstd_prefix", lambda data, size, n: (
        wanted.append(n // 4096), real(data, size, n))[1])
    for box, values in zip(boxes, open_array(tmp_path, chunk_cache_bytes=0).read_many(boxes)):
        np.testing.assert_array_equal(values, expected[box])
    assert wanted == [6]  # the second chunk, to its plane 6: once, for both boxes
    whole = (slice(0, 128), 7, 7)
    np.testing.assert_array_equal(open_array(tmp_path, chunk_cache_bytes=0).read_many(
        [whole])[0], expected[whole])
    assert wanted == [6]  # every plane of both: decoded whole
    shard = tmp_path / "c" / "0" / "0" / "0"
    data = bytearray(shard.read_bytes())
    index = np.frombuffer(data[-36:-4], "<u8").reshape(2, 2)  # (offset, size) of each chunk
    second = int(index[1, 0])
    data[second + int(index[1, 1]) - 40:second + int(index[1, 1]) - 8] = bytes(32)
    shard.write_bytes(bytes(data))  # the second chunk's last block damaged
    first_planes = (slice(64, 66), slice(0, 5), slice(7, 8))
    got = open_array(tmp_path, chunk_cache_bytes=0).read_many([first_planes])[0]
    np.testing.assert_array_equal(got, expected[first_planes])
    with pytest.raises(CorruptDataError, match=r"c/0/0/0 inner chunk at \(1, 0, 0\)"):
        open_array(tmp_path, chunk_cache_bytes=0).read_many([(slice(126, 128), 0, 0)])


def test_a_checksummed_zstd_chunk_is_decoded_whole(tmp_path, monkeypatch):
    # its checksum covers all of it: a prefix would leave the checksum unchecked
    expected = np.random.default_rng(6).integers(0, 4, (128, 16, 16), dtype=np.uint8)
    z = zarr.create_array(str(tmp_path), shape=expected.shape, chunks=(64, 16, 16),
                          dtype="uint8", compressors=[zarr.codecs.ZstdCodec(checksum=True)])
    z[...] = expected
    monkeypatch.setattr(handle, "zstd_prefix", lambda *a: pytest.fail("a prefix decoded"))
    box = (slice(64, 66), slice(0, 5), slice(7, 8))
    np.testing.assert_array_equal(
        open_array(tmp_path, chunk_cache_bytes=0).read_many([box, box])[0], expected[box])


def test_a_read_into_a_large_result_streams_its_rows_and_reads_what_tensorstore_reads(
        tmp_path, monkeypatch):
    """A read whose result is STREAM_BYTES or more writes the chunks' rows of whole cache
    lines past the cache (``stream_copy``); a smaller one does not; both read tensorstore's
    values, the fill value where a shard or an inner chunk is missing."""
    shape = (256, 256, 272)  # 17 MiB of uint8; the last shard along x is partial
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp_path)},
            "metadata": {
                "shape": list(shape), "data_type": "uint8", "fill_value": 9,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [128] * 3}},
                "codecs": [{"name": "sharding_indexed", "configuration": {
                    "chunk_shape": [64] * 3,
                    "codecs": [{"name": "bytes"}, {"name": "zstd"}]}}]}}
    store = ts.open(spec, create=True).result(timeout=PEER_TIMEOUT)
    rng = np.random.default_rng(5)
    store[:, :, :128].write(rng.integers(0, 255, (256, 256, 128), np.uint8)).result(
        timeout=PEER_TIMEOUT)
    store[:64, :64, 128:192].write(rng.integers(0, 255, (64, 64, 64), np.uint8)).result(
        timeout=PEER_TIMEOUT)  # one inner chunk of a shard; its other chunks absent
    expected = np.asarray(store.read().result(timeout=PEER_TIMEOUT))
    streamed = []
    monkeypatch.setattr(copy, "stream_copy",
                        lambda dst, src: (streamed.append(dst.shape), stream_copy(dst, src)))
    array = open_array(tmp_path)
    assert expected.nbytes >= STREAM_BYTES
    np.testing.assert_array_equal(array[...], expected)
    assert streamed.count((64, 64, 64)) == 4 * 4 * 2 + 1  # every stored chunk's rows
    streamed.clear()
    box = (slice(0, 100), slice(0, 100), slice(0, 200))  # 2 MB: no stream
    np.testing.assert_array_equal(array.read_many([box])[0], expected[box])
    assert not streamed
