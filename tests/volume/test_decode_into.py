"""Decoding a chunk straight into a given array (``decode_chunk(out=)``, what a volume read
does with compressed_segmentation chunks): the same values as decode-then-copy, into any
strides, nothing outside the target touched, and every header still validated; a chunk of a
large result is written with streaming stores, to the same values."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ngshard
from ngshard.errors import CorruptDataError
from ngshard.limits import STREAM_BYTES
from ngshard.volume.cseg import decoder
from ngshard.volume.encodings import decode_chunk, encode_chunk

CS = "compressed_segmentation"


def labels(rng, shape, dtype, distinct):
    pool = rng.integers(0, np.iinfo(dtype).max, distinct, dtype=dtype, endpoint=True)
    return pool[rng.integers(0, distinct, shape)]


def target(shape, dtype, order, step, rng):
    """A view of ``shape`` inside a larger array of ``order`` filled with noise, every axis
    taken with ``step`` from an offset: (the larger array, the view)."""
    big_shape = tuple(2 + n * step + 3 for n in shape)
    big = np.asarray(rng.integers(0, 2**32, big_shape), dtype)
    big = np.asfortranarray(big) if order == "F" else np.ascontiguousarray(big)
    view = big[tuple(slice(2, 2 + n * step, step) for n in shape)]
    assert view.shape == shape
    return big, view


@settings(max_examples=150, deadline=None)
@given(st.tuples(st.integers(1, 19), st.integers(1, 13), st.integers(1, 9)), st.integers(1, 3),
       st.sampled_from(["uint32", "uint64"]),
       st.tuples(st.integers(1, 8), st.integers(1, 8), st.integers(1, 8)), st.integers(1, 300),
       st.sampled_from(["C", "F"]), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_decoding_into_any_strides_is_decode_then_copy(xyz, c, dtype, block, distinct, order,
                                                        step, seed):
    rng = np.random.default_rng(seed)
    a = labels(rng, (*xyz, c), dtype, distinct)
    data = encode_chunk(a, CS, block_size=block)
    big, view = target(a.shape, dtype, order, step, rng)
    want = big.copy()
    want[tuple(slice(2, 2 + n * step, step) for n in a.shape)] = \
        decode_chunk(data, CS, a.shape, dtype, block_size=block)
    got = decode_chunk(data, CS, a.shape, dtype, block_size=block, out=view)
    assert got is view
    assert np.array_equal(big, want)  # the chunk where it goes, nothing else touched


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([(8, 8), (16, 4), (4, 8), (5, 4), (16, 8)]),  # (bx, item): 64 B rows
       st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),  # whole blocks
       st.integers(0, 2), st.sampled_from([0, 64, 128, 8, 4]), st.integers(1, 70),
       st.integers(0, 2**32 - 1))
def test_streamed_decoding_gives_the_plain_values(block, grid, ragged, offset, distinct, seed):
    """The kernel's streaming stores (rows of whole cache lines at aligned addresses; others
    stored plainly) write the values of plain stores, and nothing else: into a page-aligned
    Fortran array at byte offsets that keep rows on cache lines or not, with edge blocks."""
    bx, item = block
    dtype = np.dtype(f"<u{item}")
    bs = (bx, 2, 3)
    xyz = (grid[0] * bx - ragged, grid[1] * bs[1], grid[2] * bs[2])
    if xyz[0] < 1:
        return
    rng = np.random.default_rng(seed)
    a = labels(rng, (*xyz, 1), dtype.name, distinct)
    words = np.frombuffer(encode_chunk(a, CS, block_size=bs), "<u4")
    plain = np.zeros(xyz, dtype, order="F")
    assert decoder.cseg_decode(words, 1, bs, item // 4, plain) == -1
    assert np.array_equal(plain, a[..., 0])
    pad = offset // item
    big = np.frombuffer(mmap.mmap(-1, 2 << 20), dtype)  # mapped: page aligned, zeros
    shape = (xyz[0] + 2 * pad + 3, xyz[1] + 1, xyz[2] + 1)
    room = big[:np.prod(shape)].reshape(shape, order="F")
    view = room[pad:pad + xyz[0], :xyz[1], :xyz[2]]
    assert decoder.cseg_decode(words, 1, bs, item // 4, view, True) == -1
    want = np.zeros(shape, dtype, order="F")
    want[pad:pad + xyz[0], :xyz[1], :xyz[2]] = plain
    assert np.array_equal(room, want) and not big[np.prod(shape):].any()


def test_a_large_compressed_segmentation_read_streams_and_reads_what_tensorstore_wrote(
        tmp_path, monkeypatch):
    """A whole read of 32 MiB of uint64 labels written by tensorstore decodes every stored
    chunk into the result with streaming stores (a chunk's items spread over STREAM_BYTES),
    and gives tensorstore's values, zeros where it wrote nothing; a read of one chunk's box
    does not stream."""
    import tensorstore as ts
    from peers import PEER_TIMEOUT

    shape, chunk = (256, 256, 64), (64, 64, 64)
    rng = np.random.default_rng(7)
    data = np.repeat(rng.integers(0, 2**40, (32, 256, 64), dtype=np.uint64), 8, axis=0)
    scale = {"size": list(shape), "chunk_size": list(chunk), "resolution": [1, 1, 1],
             "encoding": CS, "compressed_segmentation_block_size": [8, 8, 8],
             "voxel_offset": [0, 0, 0]}
    store = ts.open({"driver": "neuroglancer_precomputed",
                     "kvstore": {"driver": "file", "path": str(tmp_path / "ts")},
                     "create": True, "scale_metadata": scale,
                     "multiscale_metadata": {"data_type": "uint64", "num_channels": 1,
                                             "type": "segmentation"}}).result(PEER_TIMEOUT)
    store[:, :192].write(data[:, :192, :, None]).result(timeout=PEER_TIMEOUT)  # 12 of 16 chunks
    streamed, kernel = [], decoder.cseg_decode

    def spy(words, start, bs, entry, out, stream=False):
        streamed.append(stream)
        return kernel(words, start, bs, entry, out, stream)

    monkeypatch.setattr(decoder, "cseg_decode", spy)
    vol = ngshard.open_volume(str(tmp_path / "ts"))
    got = vol[:]
    want = data.copy()
    want[:, 192:] = 0
    assert got.nbytes >= STREAM_BYTES and np.array_equal(got[..., 0], want)
    assert streamed == [True] * 12
    streamed.clear()
    assert np.array_equal(vol[64:128, 0:64, :][..., 0], data[64:128, 0:64, :])
    assert streamed == [False]


@pytest.mark.parametrize("encoding, dtype", [("raw", "uint16"), ("png", "uint8")])
def test_other_encodings_fill_out_too(encoding, dtype):
    a = labels(np.random.default_rng(1), (7, 5, 3, 1), dtype, 9)
    big, view = target(a.shape, dtype, "C", 2, np.random.default_rng(2))
    got = decode_chunk(encode_chunk(a, encoding), encoding, a.shape, dtype, out=view)
    assert got is view and np.array_equal(view, a)


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
def test_decoding_into_still_validates_every_header(dtype):
    shape = (6, 5, 3, 2)
    a = labels(np.random.default_rng(3), shape, dtype, 5)
    data = encode_chunk(a, CS, block_size=(4, 4, 4))
    out = np.zeros((10, 10, 10, 3), dtype)[1:7, 2:7, 3:6, 1:3]
    for n in range(0, len(data), 3):  # truncations
        with pytest.raises(CorruptDataError):
            decode_chunk(data[:n], CS, shape, dtype, block_size=(4, 4, 4), out=out)
    words = np.frombuffer(data, "<u4")
    start = int(words[1])  # channel 1's block headers
    for i, value, match in [(start, 3 << 24, "header of block 0"),
                            (start + 7, 0xFFFFFF, "header of block 3"), (0, 10**6, "offsets")]:
        w = words.copy()
        w[i] = value
        with pytest.raises(CorruptDataError, match=match):
            decode_chunk(w.tobytes(), CS, shape, dtype, block_size=(4, 4, 4), out=out)
    # an index past its table (one block of 3 labels, 2 bits) is caught in the kernel
    w = np.frombuffer(encode_chunk(labels(np.random.default_rng(4), (4, 4, 4, 1), dtype, 3),
                                   CS, block_size=(4, 4, 4)), "<u4").copy()
    w[1 + w[2]] = 0xFFFFFFFF
    with pytest.raises(CorruptDataError, match="past its table"):
        decode_chunk(w.tobytes(), CS, (4, 4, 4, 1), dtype, block_size=(4, 4, 4),
                     out=np.zeros((4, 4, 4, 1), dtype, order="F"))


def test_out_of_another_shape_or_dtype_is_refused():
    a = labels(np.random.default_rng(5), (4, 4, 4, 1), "uint32", 3)
    data = encode_chunk(a, CS, block_size=(4, 4, 4))
    for out in (np.zeros((4, 4, 3, 1), "uint32"), np.zeros((4, 4, 4, 1), "uint64")):
        with pytest.raises(ValueError, match="cannot decode"):
            decode_chunk(data, CS, a.shape, "uint32", block_size=(4, 4, 4), out=out)


@pytest.mark.parametrize("channels", [1, 2])
def test_volume_reads_of_compressed_segmentation(tmp_path, channels):
    """Whole, partial, stepped and many-box reads of a volume with edge chunks: every chunk a
    read takes whole is decoded into the result, the others through a copy; all agree with
    the array written (and reading again gives fresh arrays)."""
    rng = np.random.default_rng(6)
    data = labels(rng, (37, 29, 21, channels), "uint64", 40)
    with ngshard.create_volume(str(tmp_path / "v"), dtype="uint64", shape=data.shape[:3],
                               num_channels=channels, chunk_size=(16, 8, 8),
                               encoding=CS, compressed_segmentation_block_size=(4, 4, 2)
                               ) as vol:
        vol[:] = data
    vol = ngshard.open_volume(str(tmp_path / "v"))
    for index in (np.s_[:], np.s_[3:35, 1:28, 5:21], np.s_[::2, 1::3], np.s_[16:32, 8:16, 0:8],
                  np.s_[5, :, 3:]):
        assert np.array_equal(vol[index], data[index]), index
    first = vol[:]
    first[...] = 0
    assert np.array_equal(vol[:], data)
    boxes = [np.s_[0:16, 0:8, 0:8], np.s_[0:16, 0:8, 0:8], np.s_[10:30, 2:20, 1:9]]
    for got, index in zip(vol.array.read_many(boxes), boxes):
        assert np.array_equal(got, data[index])
    for got, position in zip(vol.read_chunks([[0, 0, 0], [2, 3, 2], [0, 0, 0]]),
                             [[0, 0, 0], [2, 3, 2], [0, 0, 0]]):
        lo = np.array(position) * (16, 8, 8)
        assert np.array_equal(got, data[lo[0]:lo[0] + 16, lo[1]:lo[1] + 8, lo[2]:lo[2] + 8])
