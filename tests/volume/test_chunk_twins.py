"""Unsharded chunk files and their compressed twins (``.gz``, ``.br``, ``.zstd``, ``.xz``,
``.bz2``, as cloud-files writes them): which one a read takes, how many batched reads it costs
locally and over HTTP, what writes leave behind, and damaged or hostile twins."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os

import brotli
import numpy as np
import pytest
import zstandard

import ngshard
from ngshard import CorruptDataError, SpecError
from ngshard.verify import verify_volume

ENCODE = {".gz": gzip.compress, ".br": brotli.compress, ".xz": lzma.compress,
          ".bz2": bz2.compress, ".zstd": zstandard.ZstdCompressor().compress}
DATA = np.arange(24 * 20 * 10, dtype=np.uint16).reshape(24, 20, 10, 1)


def make(path, compress=None, **kw):
    with ngshard.create_volume(path, dtype="uint16", shape=DATA.shape[:3], chunk_size=(16, 16, 8),
                               voxel_offset=(100, -20, 3), compress=compress, **kw) as vol:
        vol[...] = DATA
    return path / "1_1_1"


def stored(scale_dir) -> list[str]:
    return sorted(os.listdir(scale_dir))


@pytest.mark.parametrize("suffix", list(ENCODE))
def test_every_twin_reads(tmp_path, suffix):
    """A volume whose chunks are only twins of one kind (compressed by the standard
    packages, not ngshard) reads whole (before: zeros for all but .gz)."""
    scale = make(tmp_path / "v")
    for name in stored(scale):
        raw = (scale / name).read_bytes()
        (scale / f"{name}{suffix}").write_bytes(ENCODE[suffix](raw))
        os.remove(scale / name)
    vol = ngshard.open_volume(tmp_path / "v")
    np.testing.assert_array_equal(np.asarray(vol), DATA)
    assert len(vol.chunk_positions()) == 8
    report = verify_volume(vol)
    assert (report.keys, report.problems) == (8, [])


def test_plain_file_wins_and_mixed_twins_read(tmp_path):
    """As cloud-files: the plain file first; chunks stored with different twins in one
    scale each read from theirs."""
    scale = make(tmp_path / "v")
    names = stored(scale)
    for name, suffix in zip(names, [".br", ".zstd", ".xz"]):
        (scale / f"{name}{suffix}").write_bytes(ENCODE[suffix]((scale / name).read_bytes()))
        os.remove(scale / name)
    stale = np.zeros_like(DATA[:16, :16, :8]).tobytes(order="F")
    (scale / f"{names[3]}.gz").write_bytes(gzip.compress(stale))  # hidden by the plain file
    np.testing.assert_array_equal(np.asarray(ngshard.open_volume(tmp_path / "v")), DATA)


@pytest.mark.parametrize("compress,suffix", [(None, ""), ("gzip", ".gz"), ("br", ".br"),
                                             ("zstd", ".zstd"), ("BR", ".br")])
def test_create_volume_writes_twins(tmp_path, compress, suffix):
    scale = make(tmp_path / "v", compress)
    assert {os.path.splitext(n)[1] if suffix else "" for n in stored(scale)} == {suffix}
    np.testing.assert_array_equal(np.asarray(ngshard.open_volume(tmp_path / "v")), DATA)


def test_compress_is_checked_before_anything_is_written(tmp_path):
    for bad in ("lz4", "xz", True, 1):
        with pytest.raises(SpecError, match="'gzip', 'br', 'zstd'"):
            ngshard.create_volume(tmp_path / "a", dtype="uint8", shape=(8, 8, 8), compress=bad)
    with pytest.raises(SpecError, match="data_encoding"):
        ngshard.create_volume(tmp_path / "b", dtype="uint8", shape=(8, 8, 8), sharding="auto",
                              compress="br")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    make(tmp_path / "s", sharding="auto")
    with pytest.raises(SpecError, match="data_encoding"):
        ngshard.open_volume(tmp_path / "s", mode="r+", compress="gzip")


def test_a_write_removes_the_other_twins(tmp_path):
    """Writing a chunk as one twin removes its others: a plain file left behind would hide
    the new twin from every reader (cloud-files reads the plain file first)."""
    scale = make(tmp_path / "v")  # plain files
    with ngshard.open_volume(tmp_path / "v", mode="r+", compress="br") as vol:
        vol[100:116, -20:-4, 3:11] = 7  # one whole chunk (voxel_offset (100, -20, 3))
    names = stored(scale)
    assert sum(n.endswith(".br") for n in names) == 1 and len(names) == 8
    want = DATA.copy()
    want[0:16, 0:16, 0:8] = 7
    np.testing.assert_array_equal(np.asarray(ngshard.open_volume(tmp_path / "v")), want)
    with ngshard.open_volume(tmp_path / "v", mode="r+") as vol:  # plain again
        vol[100:116, -20:-4, 3:11] = 9
        vol.resize((16, 20, 10))  # the chunks past x = 16 go, twins and all
    assert stored(scale) == sorted(["100-116_-20--4_3-11", "100-116_-4-0_3-11",
                                    "100-116_-20--4_11-13", "100-116_-4-0_11-13"])
    assert (np.asarray(ngshard.open_volume(tmp_path / "v"))[:, :16, :8] == 9).all()


@pytest.mark.parametrize("suffix", list(ENCODE))
def test_a_twin_that_does_not_decode_is_named(tmp_path, suffix):
    scale = make(tmp_path / "v")
    name = stored(scale)[0]
    good = ENCODE[suffix]((scale / name).read_bytes())
    os.remove(scale / name)
    for bad in (good[:len(good) // 2], b"not compressed at all", b"", good + b"junk"):
        (scale / f"{name}{suffix}").write_bytes(bad)
        with pytest.raises(CorruptDataError, match=f"{name}{suffix}".replace(".", r"\.")):
            np.asarray(ngshard.open_volume(tmp_path / "v"))


@pytest.mark.parametrize("suffix", list(ENCODE))
def test_a_twin_decoding_past_the_chunk_is_refused(tmp_path, suffix):
    """A bomb (a few KiB that decode to 64 MiB): refused once it passes the chunk's size,
    never inflated whole."""
    scale = make(tmp_path / "v")
    name = stored(scale)[0]
    os.remove(scale / name)
    (scale / f"{name}{suffix}").write_bytes(ENCODE[suffix](bytes(64 << 20)))
    with pytest.raises(CorruptDataError, match="past"):
        np.asarray(ngshard.open_volume(tmp_path / "v"))


def test_twins_cost_three_batched_reads_at_most(tmp_path, http_server):
    """Over HTTP, a batch of chunks costs one batched read of the plain names, one of the
    suffix found last and one of every other suffix: never a round trip per suffix per chunk.
    An absent chunk is asked for under each of its six names, in two rounds."""
    make(http_server.root / "v", "zstd")
    vol = ngshard.open_volume(f"{http_server.base}/v")
    calls = []
    storage = vol.encoded().storage
    original = storage.read_many
    storage.read_many = lambda names: calls.append(list(names)) or original(names)
    np.testing.assert_array_equal(np.asarray(vol), DATA)
    assert [len(c) for c in calls] == [8, 8 * 5]  # plain, then the five suffixes at once
    calls.clear()
    np.testing.assert_array_equal(np.asarray(vol), DATA)
    assert [len(c) for c in calls] == [8, 8]  # plain, then .zstd: found last
    for name in stored(http_server.root / "v" / "1_1_1"):
        os.remove(http_server.root / "v" / "1_1_1" / name)
    http_server.requests.clear()
    vol = ngshard.open_volume(f"{http_server.base}/v")
    storage = vol.encoded().storage
    original = storage.read_many
    storage.read_many = lambda names: calls.append(list(names)) or original(names)
    calls.clear()
    assert not np.asarray(vol).any()
    assert [len(c) for c in calls] == [8, 8 * 5]
    gets = {path for method, path, _ in http_server.requests if method == "GET"}
    assert len(gets) == 1 + 8 * 6  # the info, then each name
