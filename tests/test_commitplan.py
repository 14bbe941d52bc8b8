"""Every plan() returns one CommitPlan: a volume's (sharded or a file per chunk), a staged zarr
array's, a ShardedKV's. Printed, a big change is a summary of a few lines (what is read,
encoded, written, per action); the detail is one attribute away (``.shards``, ``.changes``)."""

from __future__ import annotations

import numpy as np
import pytest

import ngshard
from ngshard.commitplan import CommitPlan, ShardPlan
from ngshard.staged import ChangesPlan
from ngshard.zarr import create_array

MAX_LINES = 10


def check_summary(plan: CommitPlan, entries: int, encode: int) -> str:
    text = str(plan)
    assert isinstance(plan, CommitPlan) and len(text.splitlines()) <= MAX_LINES, text
    assert len(plan.shards) == entries and all(isinstance(s, ShardPlan) for s in plan.shards)
    assert plan.encode == encode and f"encode {encode} chunks" in text
    assert isinstance(plan.changes, ChangesPlan) and plan.changes.encode_count == encode
    assert f"write {plan.write_bytes} B" in text and "plan.shards" in text
    return text


@pytest.mark.parametrize("sharded", [True, False])
def test_a_volume_plan_is_a_summary(tmp_path, sharded):
    chunk = 16 ** 3
    vol = ngshard.create_volume(tmp_path, dtype="uint8", shape=(256, 256, 64),
                                chunk_size=(16, 16, 16), sharding="auto" if sharded else None,
                                shard_bytes=8 * chunk)
    vol[...] = 1
    vol.resize((250, 256, 64))
    plan = vol.plan()
    # unsharded, the edge chunks' files are named anew: the old names deleted
    text = check_summary(plan, 128 if sharded else 1024 + 64, 1024)
    assert plan.actions() == ({"create": 128} if sharded else {"delete": 64, "write": 1024})
    assert plan.unit == ("shard" if sharded else "file")
    assert text.splitlines()[-1] == "then the info: scale 1_1_1 size (250, 256, 64)"
    vol.commit()
    assert ngshard.open_volume(tmp_path).shape == (250, 256, 64, 1)


@pytest.mark.parametrize("shards", [(32, 32, 32), None])
def test_a_staged_zarr_plan_is_a_summary(tmp_path, shards):
    a = create_array(tmp_path / "a", (64, 256, 256), "uint8", (16, 16, 16), shards=shards)
    with a.staged() as s:
        s[...] = 1
        plan = s.plan()
        check_summary(plan, 128 if shards else 1024, 1024)
        assert plan.actions() == {"write": len(plan.shards)}  # whole: nothing read
        assert plan.unit == ("shard" if shards else "chunk object")
    assert (a[...] == 1).all()


def test_a_sharded_kv_plan_lists_a_few_shards_and_counts_many(tmp_path):
    spec = ngshard.ShardingSpec(hash="identity", preshift_bits=0, minishard_bits=0,
                                shard_bits=8)
    kv = ngshard.open_kv(tmp_path, spec, mode="w")
    kv.update({k: b"x" * 10 for k in range(3)})
    few = kv.plan()
    assert isinstance(few, CommitPlan) and len(few.shards) == 3
    assert all(s.name in str(few) for s in few.shards)  # a row each
    kv.update({k: b"x" * 10 for k in range(200)})
    many = kv.plan()
    assert len(str(many).splitlines()) <= MAX_LINES and len(many.shards) == 200
    assert many.actions() == {"create": 200} and many.write_bytes > 200 * 10
    assert kv.commit(many).shards == many.shards
    assert np.array_equal(np.sort(ngshard.open_kv(tmp_path).keys_array()), np.arange(200))
