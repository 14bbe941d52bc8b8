"""``ngshard verify`` on a sharded volume lists every damaged shard, not just the first."""

from __future__ import annotations

import numpy as np

from ngshard.cli import main
from ngshard.volume import create_volume


def test_verify_names_every_truncated_shard(tmp_path, capsys):
    # 256 chunks of 1 KiB, at most 16 KiB a shard: 16 box shards of 16 chunks
    data = np.random.default_rng(0).integers(0, 2**16, (64, 64, 32), dtype=np.uint16)
    with create_volume(tmp_path, dtype="uint16", shape=data.shape, chunk_size=(8, 8, 8),
                       sharding="auto", shard_bytes=16 << 10) as vol:
        vol[:] = data
    shards = sorted((tmp_path / "1_1_1").glob("*.shard"))
    assert len(shards) == 16
    url = str(tmp_path)
    assert main(["verify", url, "-q"]) == 0
    assert "256 chunks decoded" in capsys.readouterr().out

    # one cut inside its shard index, one cut short of its end (the minishard indices)
    early, late = shards[3], shards[11]
    early.write_bytes(early.read_bytes()[:20])
    late.write_bytes(late.read_bytes()[:-100])
    assert main(["verify", url, "-q"]) == 1
    out = capsys.readouterr().out
    assert str(early) in out and str(late) in out
    assert "problem(s)" in out
    # the 14 intact shards were still checked: their 224 chunks decoded
    assert "224 chunks decoded" in out
