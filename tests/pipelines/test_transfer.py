"""``ngshard.transfer``: the unsharded layers cloud-volume wrote (fixtures/) into sharded
layers that cloud-volume (a child process), tensorstore and ngshard read back equal to the
source; re-chunked, re-encoded,
cut to a box, with a pyramid in the same job; and back to a file per chunk."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tensorstore as ts
from cloudvolume_peer import read_images
from convert_helpers import files
from peers import PEER_TIMEOUT

import ngshard

FIXTURES = Path(__file__).parents[2] / "fixtures" / "cloudvolume_volumes"
# the encodings tensorstore reads (it has no compresso, crackle or jxl)
TENSORSTORE = ("raw", "jpeg", "png", "compressed_segmentation")
UNSHARDED = sorted(p.name for p in FIXTURES.iterdir() if (p / "info").exists() and
                   "sharding" not in json.loads((p / "info").read_text())["scales"][0])


def _ts(path, i=0):
    return ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                    "scale_index": i}).result(timeout=PEER_TIMEOUT)


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(2) as pool:
        yield pool


@pytest.fixture(scope="module")
def transferred(tmp_path_factory, pool):
    """Every unsharded fixture transferred to sharded: {name: (stats, output path)}."""
    root = tmp_path_factory.mktemp("transferred")
    return {name: (ngshard.transfer(FIXTURES / name, root / name, executor=pool,
                                    progress=False), root / name) for name in UNSHARDED}


@pytest.mark.parametrize("name", UNSHARDED)
def test_unsharded_fixtures_to_sharded(transferred, name):
    src = FIXTURES / name
    stats, path = transferred[name]
    out = ngshard.open_volume(path)
    source = ngshard.open_volume(src)
    assert out.scale.sharding is not None and stats["chunks"] > 0
    assert out.bounds == source.bounds and out.scale.encoding == source.scale.encoding
    np.testing.assert_array_equal(out[...], source[...])
    if source.scale.encoding in TENSORSTORE:  # (it reads no .br/.xz/.bz2 chunk files)
        np.testing.assert_array_equal(
            _ts(path).read().result(timeout=PEER_TIMEOUT), source[...])


def test_cloud_volume_reads_every_transferred_fixture(transferred, tmp_path):
    """cloud-volume reads each sharded output equal to the unsharded source it wrote (its
    own decoders on both sides: lossy jpeg and jxl decode alike), images and
    segmentations, every encoding of the fixtures; lossless ones equal ngshard's values."""
    got = read_images(tmp_path / "cv.npz", *((transferred[n][1], 0) for n in UNSHARDED),
                      *((FIXTURES / n, 0) for n in UNSHARDED))
    for name, out, src in zip(UNSHARDED, got, got[len(UNSHARDED):]):
        np.testing.assert_array_equal(out, src, err_msg=name)
        encoding = ngshard.open_volume(FIXTURES / name).scale.encoding
        if encoding not in ("jpeg", "jxl") or "lossless" in name:
            np.testing.assert_array_equal(out, ngshard.open_volume(FIXTURES / name)[...],
                                          err_msg=name)


def test_rechunk_reencode_box_and_pyramid(tmp_path, pool):
    src = FIXTURES / "raw_zstd"  # a uint32 segmentation of raw chunks, 16^3
    source = ngshard.open_volume(src)
    off = np.array(source.scale.voxel_offset)
    lo, hi = off + (3, 5, 2), off + source.scale.size - 1
    ngshard.transfer(src, tmp_path / "out", executor=pool, progress=False,
                     chunk_size=(8, 8, 8), encoding="compressed_segmentation",
                     bbox=(lo, hi), downsample=2)
    out = _ts(tmp_path / "out")
    info = ngshard.open_volume(tmp_path / "out").info
    assert [s.encoding for s in info.scales] == ["compressed_segmentation"] * 3
    assert info.scales[0].chunk_size == (8, 8, 8) and info.scales[0].voxel_offset == \
        tuple(lo.tolist())
    want = source[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]  # (zstd files: no tensorstore)
    np.testing.assert_array_equal(out.read().result(timeout=PEER_TIMEOUT), want)
    for i in (1, 2):  # the pyramid: tensorstore's mode of the level above
        above, scale = info.scales[i - 1], info.scales[i]
        factor = [round(b / a) for a, b in zip(above.resolution, scale.resolution)]
        want = ts.downsample(_ts(tmp_path / "out", i - 1), factor + [1], "mode")
        np.testing.assert_array_equal(_ts(tmp_path / "out", i).read().result(timeout=PEER_TIMEOUT),
                                      want.read().result(timeout=PEER_TIMEOUT))


def test_sharded_back_to_files_and_a_scattered_spec(tmp_path, pool):
    src = FIXTURES / "sharded_cseg"
    ngshard.transfer(src, tmp_path / "files", sharding="none", executor=pool,
                     progress=False)
    spec = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
            "preshift_bits": 0, "minishard_bits": 1, "shard_bits": 2,
            "minishard_index_encoding": "gzip", "data_encoding": "gzip"}
    ngshard.transfer(tmp_path / "files", tmp_path / "murmur", sharding=json.dumps(spec),
                     executor=pool, progress=False)
    assert ngshard.open_volume(tmp_path / "files").scale.sharding is None
    assert ngshard.open_volume(tmp_path / "murmur").scale.sharding.hash == \
        "murmurhash3_x86_128"
    for out in ("files", "murmur"):
        np.testing.assert_array_equal(_ts(tmp_path / out).read().result(timeout=PEER_TIMEOUT),
                                      _ts(src).read().result(timeout=PEER_TIMEOUT))


def test_a_damaged_raw_chunk_stops_the_carrying(tmp_path, pool):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "raw_plain", src)
    chunk = next(p for p in sorted((src / "8_8_40").iterdir()) if p.is_file())
    chunk.write_bytes(chunk.read_bytes()[:-7])
    with pytest.raises(ngshard.CorruptDataError, match=chunk.name):
        ngshard.transfer(src, tmp_path / "out", executor=pool, progress=False)


def test_gzip_chunk_files_go_into_gzip_shards_as_stored(tmp_path, pool):
    """cloud-volume's .gz chunk files: each one-stream file's bytes are the shard's entry (not
    compressed again); a file of two streams is compressed again; all read back equal."""
    import gzip
    import shutil

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "raw_gzip", src)
    gz_files = sorted(p for p in (src / "8_8_40").iterdir() if p.suffix == ".gz")
    two = gzip.decompress(gz_files[0].read_bytes())
    gz_files[0].write_bytes(gzip.compress(two[:100]) + gzip.compress(two[100:]))
    ngshard.transfer(src, tmp_path / "out", executor=pool, progress=False)
    out = ngshard.open_volume(tmp_path / "out")
    assert out.scale.sharding.data_encoding == "gzip"
    shards = b"".join(p.read_bytes() for p in (tmp_path / "out" / "8_8_40").iterdir())
    assert gz_files[0].read_bytes() not in shards
    assert all(p.read_bytes() in shards for p in gz_files[1:])
    np.testing.assert_array_equal(_ts(tmp_path / "out").read().result(timeout=PEER_TIMEOUT),
                                  ngshard.open_volume(src)[...])


def _reshard_spec(minishard_bits: int) -> str:
    return json.dumps({"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity",
                       "preshift_bits": 0, "minishard_bits": minishard_bits, "shard_bits": 1,
                       "minishard_index_encoding": "gzip", "data_encoding": "gzip"})


@pytest.fixture
def gzip_shards(tmp_path, pool):
    """A gzip-sharded layer whose chunks are cloud-volume's gzip streams (zlib's, not the
    ones ngshard would write), and those streams."""
    import shutil

    src = tmp_path / "files"
    shutil.copytree(FIXTURES / "raw_gzip", src)
    ngshard.transfer(src, tmp_path / "sharded", sharding=_reshard_spec(0), executor=pool,
                     progress=False)
    return tmp_path / "sharded", [p.read_bytes() for p in (src / "8_8_40").glob("*.gz")]


def test_gzip_shards_go_into_gzip_shards_as_stored(tmp_path, pool, gzip_shards):
    """Re-sharding gzip shards: every chunk's stream is carried as stored, not inflated
    and compressed again; tensorstore reads the result equal to the source."""
    src, streams = gzip_shards
    ngshard.transfer(src, tmp_path / "out", sharding=_reshard_spec(2), executor=pool,
                     progress=False)
    assert ngshard.open_volume(tmp_path / "out").scale.sharding.minishard_bits == 2
    shards = b"".join(p.read_bytes() for p in (tmp_path / "out" / "8_8_40").iterdir())
    assert streams and all(s in shards for s in streams)
    np.testing.assert_array_equal(_ts(tmp_path / "out").read().result(timeout=PEER_TIMEOUT),
                                  _ts(src).read().result(timeout=PEER_TIMEOUT))


def test_a_damaged_gzip_chunk_in_a_shard_stops_the_carrying(tmp_path, pool, gzip_shards):
    """A carried stream is checked (it inflates whole, to its CRC): a flipped byte in one
    is a CorruptDataError naming its shard, not a damaged chunk copied on."""
    src, streams = gzip_shards
    shard = next(p for p in (src / "8_8_40").iterdir() if streams[0] in p.read_bytes())
    data = bytearray(shard.read_bytes())
    at = data.find(streams[0]) + len(streams[0]) - 12  # in the deflate data's last bytes
    data[at] ^= 0x01
    shard.write_bytes(bytes(data))
    with pytest.raises(ngshard.CorruptDataError, match=shard.name):
        ngshard.transfer(src, tmp_path / "out", sharding=_reshard_spec(2), executor=pool,
                         progress=False)


def test_a_damaged_gzip_chunk_file_stops_the_carrying(tmp_path, pool):
    import shutil

    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "raw_gzip", src)
    chunk = next(p for p in sorted((src / "8_8_40").iterdir()) if p.suffix == ".gz")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(ngshard.CorruptDataError, match=chunk.name):
        ngshard.transfer(src, tmp_path / "out", executor=pool, progress=False)


def test_bad_options_are_spec_errors(tmp_path):
    with pytest.raises(ngshard.SpecError, match="bbox"):
        ngshard.transfer(FIXTURES / "raw_plain", tmp_path / "out", bbox=((0, 0), (1, 1)))
    with pytest.raises(ngshard.SpecError, match="misses"):
        ngshard.transfer(FIXTURES / "raw_plain", tmp_path / "out",
                         bbox=((0, 0, 0), (5, 5, 5)))


def test_command_line(tmp_path, capsys):
    from ngshard.cli import main

    src = FIXTURES / "png_plain"  # voxel_offset (-40, -7, 5)
    assert main(["transfer", str(src), str(tmp_path / "out"),
                 "--bbox=-38,-7,5,-10,20,20", "--encoding", "raw", "--downsample", "1",
                 "--workers", "1", "-q"]) == 0
    assert "transferred" in capsys.readouterr().out
    out, source = ngshard.open_volume(tmp_path / "out"), ngshard.open_volume(src)
    assert out.scale.voxel_offset == (-38, -7, 5) and len(out.info.scales) == 2
    np.testing.assert_array_equal(out[...], source[-38:-10, -7:20, 5:20])
    assert main(["transfer", str(src), str(tmp_path / "out")]) == 1
    assert "--force" in capsys.readouterr().err


def test_interrupt_and_resume(tmp_path, pool):
    from convert_helpers import Interrupting

    src = FIXTURES / "raw_plain"
    kw = {"chunk_size": (8, 8, 8), "task_bytes": 16 * 16 * 16, "downsample": 1,
          "progress": False}
    ngshard.transfer(src, tmp_path / "ref", executor=pool, **kw)
    with pytest.raises(RuntimeError, match="interrupted"):
        ngshard.transfer(src, tmp_path / "out", executor=Interrupting(pool, 3), **kw)
    stats = ngshard.transfer(src, tmp_path / "out", executor=pool, **kw)
    assert stats["skipped"] == 3 and stats["run"] == stats["tasks"] - 3

    assert files(tmp_path / "out") == files(tmp_path / "ref")
