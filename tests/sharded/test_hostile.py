"""Hostile shards: memory bounded by the input, not by what the bytes claim, and every error a
CorruptDataError naming the file."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard
from ngshard.cli import main
from ngshard.compression import gzip_decompress

ONE = ngshard.ShardingSpec(minishard_bits=0, shard_bits=0, minishard_index_encoding="gzip")


def u64(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}Q", *(v % (1 << 64) for v in values))


def gzip_of_zeros(n: int) -> bytes:
    """A gzip stream of ``n`` zero bytes, made in pieces (a bomb costs little to build)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block, parts = bytes(1 << 20), []
    for _ in range(n >> 20):
        parts.append(c.compress(block))
    parts.append(c.compress(bytes(n & ((1 << 20) - 1))))
    parts.append(c.flush())
    return b"".join(parts)


def test_a_bomb_stops_one_byte_past_the_limit():
    bomb = gzip_of_zeros(64 << 20)
    with pytest.raises(ngshard.CorruptDataError, match="inflates past the 1000 bytes"):
        gzip_decompress(bomb, "here", 1000)
    assert gzip_decompress(gzip_of_zeros(1000), "here", 1000) == bytes(1000)


def test_a_minishard_index_bomb_is_refused_in_bounded_memory(tmp_path):
    """A 300 MB gzip bomb as the only minishard index: refused, peak memory far below it."""
    bomb = gzip_of_zeros(300 << 20)  # past the 256 MiB cap of one minishard index
    (tmp_path / "0.shard").write_bytes(u64(0, len(bomb)) + bomb)
    (tmp_path / "info").write_text(json.dumps({"sharding": ONE.to_json()}))
    code = textwrap.dedent(f"""
        import resource, ngshard
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            ngshard.open_kv({str(tmp_path)!r})[7]
        except ngshard.CorruptDataError as e:
            print("refused:", e)
        from ngshard.cli import main
        print("verify:", main(["verify", {str(tmp_path)!r}, "-q"]))
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=PEER_TIMEOUT).stdout.splitlines()
    assert out[0].startswith("refused:") and "0.shard" in out[0] and "inflates past" in out[0]
    assert "inflates past" in out[2] and out[-2] == "verify: 1"  # a problem, not a crash
    assert int(out[-1]) < 300, f"peak grew by {out[-1]} MiB"


def test_a_large_minishard_index_costs_little_more_than_its_bytes(tmp_path):
    """A 48 MiB minishard index under the cap (a bomb of zeros: every key 0, refused at the
    end): decoding it peaks near twice its size, not four times (the fuzzer's memory bound)."""
    bomb = gzip_of_zeros(48 << 20)
    (tmp_path / "0.shard").write_bytes(u64(0, len(bomb)) + bomb)
    (tmp_path / "info").write_text(json.dumps({"sharding": ONE.to_json()}))
    code = textwrap.dedent(f"""
        import resource, ngshard
        kv = ngshard.open_kv({str(tmp_path)!r})
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            kv[0]
        except ngshard.CorruptDataError as e:
            print("refused:", e)
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=PEER_TIMEOUT).stdout.splitlines()
    assert out[0].startswith("refused:") and "appears twice" in out[0]
    assert int(out[1]) < 2.5 * 48, f"peak grew by {out[1]} MiB"


def test_a_value_bomb_is_refused_past_max_value_bytes(tmp_path):
    spec = ngshard.ShardingSpec(minishard_bits=0, shard_bits=0, data_encoding="gzip")
    ngshard.write_kv(tmp_path, spec, {1: bytes(5 << 20)})  # gzip: 5 KiB on disk
    kv = ngshard.open_kv(tmp_path, max_value_bytes=1 << 20)
    for read in (lambda: kv[1], lambda: kv.get_many([1])):
        with pytest.raises(ngshard.CorruptDataError, match="0.shard.*inflates past"):
            read()
    assert len(ngshard.open_kv(tmp_path)[1]) == 5 << 20  # the default allows 256 MiB


@pytest.mark.parametrize("sharding", [None, "auto"])
def test_a_volume_chunk_inflates_at_most_to_its_size(tmp_path, sharding):
    with ngshard.create_volume(tmp_path, dtype="uint8", shape=(16, 16, 16),
                               chunk_size=(16, 16, 16), sharding=sharding) as vol:
        vol[:] = 1
    bomb = gzip_of_zeros(16**3 + 1)  # one byte more than the chunk holds
    if sharding is None:
        name = vol.grid.chunk_names([[0, 0, 0]])[0]
        (tmp_path / vol.scale.key / name).unlink()
        (tmp_path / vol.scale.key / f"{name}.gz").write_bytes(bomb)
    else:
        spec = vol.scale.sharding
        assert spec.data_encoding == "gzip"
        ngshard.write_kv(tmp_path / vol.scale.key, spec.to_json() | {"data_encoding": "raw"},
                         {0: bomb}, info=False, overwrite=True)
        raw = ngshard.ShardingSpec.from_json(spec.to_json() | {"data_encoding": "raw"})
        info = json.loads((tmp_path / "info").read_text())
        info["scales"][0]["sharding"] = raw.to_json()
        (tmp_path / "info").write_text(json.dumps(info))
        info["scales"][0]["sharding"] = spec.to_json()  # stored raw, read as gzip
        (tmp_path / "info").write_text(json.dumps(info))
    with pytest.raises(ngshard.CorruptDataError, match="inflates past the 4096 bytes"):
        ngshard.open_volume(tmp_path)[:]


def test_minishard_index_ranges_may_not_overlap(tmp_path, capsys):
    """Every shard index entry pointing at one index: refused at once, not decoded 4 times."""
    spec = ngshard.ShardingSpec(minishard_bits=2, shard_bits=0)
    index = u64(1, 0, 8)  # key 1 at [64, 72)
    body = bytes(8) + index
    entry = u64(8, 8 + len(index))
    (tmp_path / "0.shard").write_bytes(entry * 4 + body)
    (tmp_path / "info").write_text(json.dumps({"sharding": spec.to_json()}))
    kv = ngshard.open_kv(tmp_path)
    for read in (lambda: kv[1], lambda: kv.keys_array(), lambda: len(kv)):
        with pytest.raises(ngshard.CorruptDataError, match="0.shard: shard index entries 0 "
                                                           "and 1 claim overlapping"):
            read()
    assert main(["verify", str(tmp_path), "-q"]) == 1
    assert "overlapping" in capsys.readouterr().out


def test_a_chunk_before_the_end_of_the_shard_index_is_corrupt(tmp_path):
    """A start delta that wraps below the shard index (tensorstore: invalid byte range)."""
    index = u64(5, -16, 20)  # key 5 at [16 - 16, 20): over the shard index itself
    (tmp_path / "0.shard").write_bytes(u64(4, 4 + len(index)) + b"data" + index)
    raw = ngshard.ShardingSpec(minishard_bits=0, shard_bits=0)
    (tmp_path / "info").write_text(json.dumps({"sharding": raw.to_json()}))
    kv = ngshard.open_kv(tmp_path)
    for read in (lambda: kv[5], lambda: kv.get_many([5])):
        with pytest.raises(ngshard.CorruptDataError, match=r"0.shard.*outside \[16, "):
            read()


def test_an_empty_store_costs_nothing_whatever_its_minishard_bits(tmp_path):
    spec = ngshard.ShardingSpec(minishard_bits=32, shard_bits=0)
    ngshard.write_kv(tmp_path, spec, {})
    kv = ngshard.open_kv(tmp_path)
    assert len(kv) == 0 and kv.keys_array().size == 0 and kv.stats() == []
    assert np.asarray(kv.get_many([1, 2])).size == 0 or kv.get_many([1, 2]) == {}
