"""ShardedKV over real storage: local files, fsspec memory, and HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=2,
                            minishard_index_encoding="gzip", data_encoding="gzip")


def make_items(n: int = 500, seed: int = 0) -> dict[int, bytes]:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)).tolist()
    keys[:2] = [0, 2**64 - 1]
    return {k: rng.bytes(int(rng.integers(0, 100))) for k in keys}


def absent_keys(items: dict[int, bytes], n: int = 50) -> list[int]:
    rng = np.random.default_rng(1)
    return [k for k in rng.integers(0, 2**63, n).tolist() if k not in items]


def check_store(kv: ngshard.ShardedKV, items: dict[int, bytes]) -> None:
    assert kv.get_many(list(items) + absent_keys(items)) == items
    for k in list(items)[:40]:
        assert kv[k] == items[k]
        assert k in kv
    for k in absent_keys(items)[:10]:
        assert k not in kv
        assert kv.get(k) is None
        with pytest.raises(KeyError):
            kv[k]
    assert sorted(kv) == sorted(items)
    assert len(kv) == len(items)


@pytest.fixture(params=["local", "file-url", "memory"])
def url(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "store")
    if request.param == "file-url":
        return f"file://{tmp_path}/store"
    return f"memory://ngshard-test-{uuid.uuid4().hex}/store"


def test_write_and_read_back(url):
    items = make_items()
    ngshard.write_kv(url, SPEC, items)
    check_store(ngshard.open_kv(url, SPEC), items)


def test_mode_w_context_manager_commits_on_exit(url):
    items = make_items(200)
    with ngshard.open_kv(url, SPEC, mode="w") as kv:
        kv.update(items)
        del kv[0]
        assert kv[2**64 - 1] == items[2**64 - 1]
        assert 0 not in kv
    del items[0]
    check_store(ngshard.open_kv(url, SPEC), items)


def test_exception_in_with_block_writes_nothing(tmp_path):
    with pytest.raises(RuntimeError), ngshard.open_kv(tmp_path, SPEC, mode="w") as kv:
        kv[1] = b"x"
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_read_only_store_rejects_writes(tmp_path):
    ngshard.write_kv(tmp_path, SPEC, {1: b"a"})
    kv = ngshard.open_kv(tmp_path, SPEC)
    with pytest.raises(ngshard.ReadOnlyError):
        kv[2] = b"b"
    with pytest.raises(ngshard.ReadOnlyError):
        del kv[1]


def test_iterable_of_pairs_last_duplicate_wins(tmp_path):
    ngshard.write_kv(tmp_path, SPEC, [(5, b"old"), (6, b"six"), (5, b"new")])
    assert dict(ngshard.open_kv(tmp_path, SPEC).items()) == {5: b"new", 6: b"six"}


def test_empty_store_and_missing_shards(tmp_path):
    ngshard.write_kv(tmp_path, SPEC, {})
    kv = ngshard.open_kv(tmp_path, SPEC)
    assert len(kv) == 0 and list(kv) == [] and kv.get_many([1, 2]) == {}
    # one key: every other shard file is missing and reads as absent
    ngshard.write_kv(tmp_path, SPEC, {7: b"seven"}, overwrite=True)
    assert sorted(os.listdir(tmp_path)) == [SPEC.shard_filename(SPEC.locate([7])[0][0]), "info"]
    kv = ngshard.open_kv(tmp_path, SPEC)
    assert kv.get_many(range(100)) == {7: b"seven"}


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, "3", None, True])
def test_bad_keys(tmp_path, bad):
    ngshard.write_kv(tmp_path, SPEC, {1: b"a"})
    kv = ngshard.open_kv(tmp_path, SPEC)
    with pytest.raises(ngshard.InvalidKeyError):
        kv[bad]
    with pytest.raises(ngshard.InvalidKeyError):
        kv.get_many([1, bad])
    with pytest.raises(ngshard.InvalidKeyError):
        ngshard.write_kv(tmp_path, SPEC, {bad: b"x"})


def test_values_must_be_bytes(tmp_path):
    with pytest.raises(TypeError, match="key 3"):
        ngshard.write_kv(tmp_path, SPEC, {3: "text"})
    ngshard.write_kv(tmp_path, SPEC, {3: bytearray(b"ab"), 4: memoryview(b"cd")})
    assert ngshard.open_kv(tmp_path, SPEC).get_many([3, 4]) == {3: b"ab", 4: b"cd"}


def test_spec_from_info_and_from_parent_scale(tmp_path):
    ngshard.write_kv(tmp_path / "skel", SPEC, {9: b"nine"})
    (tmp_path / "skel" / "info").write_text(json.dumps(
        {"@type": "neuroglancer_skeletons", "sharding": SPEC.to_json()}))
    assert ngshard.open_kv(tmp_path / "skel")[9] == b"nine"
    # a sharded volume scale: the spec lives in the parent's info, under the scale's key
    ngshard.write_kv(tmp_path / "vol" / "8_8_8", SPEC, {1: b"chunk"})
    (tmp_path / "vol" / "info").write_text(json.dumps(
        {"scales": [{"key": "4_4_4"}, {"key": "8_8_8", "sharding": SPEC.to_json()}]}))
    assert ngshard.open_kv(tmp_path / "vol" / "8_8_8")[1] == b"chunk"
    with pytest.raises(ngshard.NotFoundError, match="no such directory"):
        ngshard.open_kv(tmp_path / "nothing")
    (tmp_path / "nothing").mkdir()
    with pytest.raises(ngshard.SpecError, match="no info file"):
        ngshard.open_kv(tmp_path / "nothing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "info").write_text("{not json")
    with pytest.raises(ngshard.SpecError, match="not valid JSON"):
        ngshard.open_kv(tmp_path / "bad")
    (tmp_path / "bad" / "info").write_text('{"@type": "neuroglancer_skeletons"}')
    with pytest.raises(ngshard.SpecError, match="sharding"):
        ngshard.open_kv(tmp_path / "bad")


def test_a_missing_spec_is_asked_for_the_python_way(tmp_path, capsys):
    """Python callers are asked for spec= (the command line for --spec); a volume root is
    told where its sharded stores are; a store in an annotation layer's index folder finds
    its spec in the layer's info, and a commit there writes no info of its own."""
    from ngshard.cli import main

    (tmp_path / "bare").mkdir()
    from ngshard.errors import SpecMissingError

    with pytest.raises(SpecMissingError, match=r"no info file: give the sharding "
                       r"spec \(spec=\)") as raised:
        ngshard.open_kv(tmp_path / "bare")
    assert "--" not in str(raised.value)
    assert main(["ls", str(tmp_path / "bare")]) == 1
    assert "give the sharding spec with --spec JSON|FILE" in capsys.readouterr().err
    (tmp_path / "vol").mkdir()
    (tmp_path / "vol" / "info").write_text(json.dumps(
        {"type": "image", "scales": [{"key": "4_4_4"}, {"key": "8_8_8",
                                                       "sharding": SPEC.to_json()}]}))
    with pytest.raises(ngshard.SpecError, match="sharded stores are in its folders 8_8_8") \
            as raised:
        ngshard.open_kv(tmp_path / "vol")
    assert "--" not in str(raised.value) and "volume" not in str(raised.value)
    (tmp_path / "ann").mkdir()
    (tmp_path / "ann" / "info").write_text(json.dumps(
        {"@type": "neuroglancer_annotations_v1", "by_id": {"key": "by_id",
                                                           "sharding": SPEC.to_json()}}))
    (tmp_path / "ann" / "by_id").mkdir()
    with ngshard.open_kv(tmp_path / "ann" / "by_id", mode="a") as kv:
        kv[5] = b"five"
    assert ngshard.open_kv(tmp_path / "ann" / "by_id")[5] == b"five"
    assert not (tmp_path / "ann" / "by_id" / "info").exists()


def test_spec_as_json_text_and_file(tmp_path):
    ngshard.write_kv(tmp_path / "s", json.dumps(SPEC.to_json()), {4: b"four"})
    (tmp_path / "spec.json").write_text(json.dumps(SPEC.to_json()))
    assert ngshard.open_kv(tmp_path / "s", str(tmp_path / "spec.json"))[4] == b"four"


def test_replaced_shard_is_reread_not_read_at_stale_offsets(tmp_path):
    spec = ngshard.ShardingSpec(minishard_bits=1)
    ngshard.write_kv(tmp_path, spec, {k: b"old-%d" % k for k in range(100)})
    kv = ngshard.open_kv(tmp_path, spec)
    assert kv[50] == b"old-50" and len(kv) == 100
    ngshard.write_kv(tmp_path, spec, {k: b"brand-new-value-%d" % k for k in range(0, 100, 2)},
                     overwrite=True)
    assert kv[50] == b"brand-new-value-50"
    assert 51 not in kv
    assert kv.get_many(range(100)) == {k: b"brand-new-value-%d" % k for k in range(0, 100, 2)}


def test_index_cache_is_bounded(tmp_path):
    items = make_items(3000)
    ngshard.write_kv(tmp_path, SPEC, items)
    kv = ngshard.open_kv(tmp_path, SPEC, cache_bytes=20_000)
    assert kv.get_many(items) == items
    # the budget holds, beyond the indices of the one shard in use (at most a whole shard's)
    assert kv.reader.cached_bytes <= 20_000 + SPEC.shard_index_size + 24 * len(items)
    assert 0 < kv.reader.cached_shards < SPEC.num_shards


def test_stats(tmp_path):
    items = make_items(300)
    ngshard.write_kv(tmp_path, SPEC, items)
    stats = ngshard.open_kv(tmp_path, SPEC).stats()
    assert sum(s["keys"] for s in stats) == len(items)
    assert {s["name"]: s["bytes"] for s in stats} == {
        n: os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path) if n.endswith(".shard")}


def test_http_reads_are_batched(http_dir):
    root, base, requests = http_dir
    items = make_items(2000)
    ngshard.write_kv(root / "kv", SPEC, items)
    kv = ngshard.open_kv(f"{base}/kv", SPEC)
    requests.clear()
    assert kv.get_many(items) == items
    gets = [r for r in requests if r[0] == "GET"]
    shards = len([n for n in os.listdir(root / "kv") if n.endswith(".shard")])
    # one GET per shard index, and one per shard for its (adjacent) minishard indices with
    # its values: these small shards hold less than 128 KiB before their minishard indices,
    # read with them
    assert len(gets) == 2 * shards
    assert sorted(kv) == sorted(items)
    sample = list(items)[:20]
    assert {k: kv[k] for k in sample} == {k: items[k] for k in sample}


def test_http_stats_of_a_batch_go_out_together(http_server):
    """The generation checks after a batch's range reads (one HEAD per shard) are all in
    flight at once, so a batch pays one round trip for them, not one per shard."""
    spec = ngshard.ShardingSpec(minishard_bits=1, shard_bits=3)
    items = {k: b"v%d" % k for k in range(400)}
    ngshard.write_kv(http_server.root / "kv", spec, items)
    kv = ngshard.open_kv(f"{http_server.base}/kv", spec)
    http_server.delay = 0.3
    assert kv.get_many(range(400)) == items
    assert http_server.at_once > spec.num_shards // 2  # 8 here; two at a time before


def test_http_spec_from_info_and_missing_shards(http_dir):
    root, base, _ = http_dir
    ngshard.write_kv(root / "kv", SPEC, {3: b"three"})
    (root / "kv" / "info").write_text(json.dumps({"sharding": SPEC.to_json()}))
    kv = ngshard.open_kv(f"{base}/kv")
    assert kv.get_many(range(50)) == {3: b"three"}
    assert kv[3] == b"three"


def test_get_many_copies_unless_asked_not_to(tmp_path):
    """With ``copy=False`` values may be views into the batch's read buffers: on local files
    those of a batch of more than 8 MiB of one file (read merged, in pieces on threads).
    Smaller batches are read value by value as bytes, which need no copy either way."""
    spec = ngshard.ShardingSpec(minishard_bits=0)
    want = {k: bytes([k]) * (500_000 if k < 20 else 1000) for k in range(40)}
    ngshard.write_kv(tmp_path, spec, want)
    kv = ngshard.open_kv(tmp_path, spec)
    assert all(type(v) is bytes for v in kv.get_many(range(40)).values())
    views = kv.get_many(range(40), copy=False)
    assert {k: bytes(v) for k, v in views.items()} == want
    assert all(isinstance(views[k], memoryview) for k in range(20))
    small = kv.get_many(range(20, 40), copy=False)
    assert all(type(v) is bytes for v in small.values())
    assert small == {k: want[k] for k in range(20, 40)}


def test_writers_remove_what_dead_writers_left_and_readers_do_not(tmp_path):
    """(Which names count as left by the dead: tests/storage/test_local.py.)"""
    spec = ngshard.ShardingSpec(minishard_bits=0)
    ngshard.write_kv(tmp_path, spec, {1: b"one"})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=PEER_TIMEOUT)
    stale = f".0.shard~{dead.pid}@{socket.gethostname()}~{'a' * 32}.tmp"
    (tmp_path / stale).write_bytes(b"partial")
    ngshard.open_kv(tmp_path, spec).get_many([1, 2])
    assert (tmp_path / stale).exists()
    with ngshard.open_kv(tmp_path, spec, "a") as kv:
        kv[2] = b"two"
    assert sorted(os.listdir(tmp_path)) == ["0.shard", "info"]
    assert ngshard.open_kv(tmp_path, spec).get_many([1, 2]) == {1: b"one", 2: b"two"}


def corrupt_copy(tmp_path, edit) -> ngshard.ShardedKV:
    """A one-shard store of keys 0..99 with ``edit(bytearray)`` applied to its shard file."""
    spec = ngshard.ShardingSpec(minishard_bits=1, data_encoding="gzip",
                                minishard_index_encoding="gzip")
    ngshard.write_kv(tmp_path, spec, {k: b"v%d" % k for k in range(100)})
    path = tmp_path / "0.shard"
    data = bytearray(path.read_bytes())
    edit(data)
    path.write_bytes(bytes(data))
    return ngshard.open_kv(tmp_path, spec)


def _set_u64(data: bytearray, offset: int, value: int) -> None:
    data[offset:offset + 8] = value.to_bytes(8, "little")


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.__delitem__(slice(20, None)), "shorter than its 32-byte shard index"),
    (lambda d: d.__delitem__(slice(40, None)), "past the end of the 40-byte file"),
    (lambda d: _set_u64(d, 8, 2**62), "past the end"),
    (lambda d: _set_u64(d, 0, int.from_bytes(d[8:16], "little") + 1), "reversed"),
    (lambda d: d.__setitem__(slice(len(d) - 30, len(d) - 20), b"\xff" * 10), "gzip"),
    (lambda d: d.__setitem__(slice(40, 50), b"\x00" * 10), "gzip"),
])
def test_corrupt_shards_raise_corrupt_data_error_naming_the_file(tmp_path, edit, message):
    kv = corrupt_copy(tmp_path, edit)
    with pytest.raises(ngshard.CorruptDataError, match=message) as err:
        kv.get_many(range(100))
    assert "0.shard" in str(err.value)


def test_http_reader_sees_a_replaced_shard(http_dir):
    root, base, _ = http_dir
    spec = ngshard.ShardingSpec(minishard_bits=1)
    ngshard.write_kv(root / "kv", spec, {k: b"old-%d" % k for k in range(50)})
    kv = ngshard.open_kv(f"{base}/kv", spec)
    assert kv[7] == b"old-7" and kv.get_many([8]) == {8: b"old-8"}
    ngshard.write_kv(root / "kv", spec, {k: b"a longer new value %d" % k for k in range(50)},
                     overwrite=True)
    assert kv[7] == b"a longer new value 7"
    assert kv.get_many([8, 9]) == {8: b"a longer new value 8", 9: b"a longer new value 9"}


def test_batch_deletions_spills_pending_plans_and_byte_views(tmp_path):
    """What staged volumes use: delete_many (absent keys ignored), spill, plan(pending=...)
    and memoryview values kept as they are."""
    items = make_items(200)
    ngshard.write_kv(tmp_path, SPEC, items)
    kv = ngshard.open_kv(tmp_path, mode="r+")
    gone = list(items)[:30]
    kv.delete_many(gone + absent_keys(items, 20))
    view = memoryview(np.arange(64, dtype=np.uint8)).cast("B")
    kv.set_many([5, 6], [view, b"six"])
    kv.spill()  # out of memory, still read
    assert kv[5] == bytes(range(64)) and gone[0] not in kv
    plan = kv.plan(pending=(np.array([7], np.uint64), np.array([100])))
    assert sum(s.sets for s in plan.shards) == 3 and sum(s.deletes for s in plan.shards) == 30
    with pytest.raises(ngshard.NgShardError, match="changed since this plan"):
        kv.commit(plan)  # a plan counting values that are not staged cannot be carried out
    kv.commit()
    expect = {k: v for k, v in items.items() if k not in gone} | {5: bytes(range(64)), 6: b"six"}
    check_store(ngshard.open_kv(tmp_path), expect)


def test_get_many_of_keys_whose_minishards_are_all_empty(tmp_path):
    spec = ngshard.ShardingSpec(hash="identity", minishard_bits=3, shard_bits=0)
    ngshard.write_kv(tmp_path, spec, {8: b"eight"})  # minishard 0; minishards 1..7 empty
    kv = ngshard.open_kv(tmp_path)
    assert kv.get_many([1, 2, 3]) == {}
    assert kv.get_many([1, 8, 9]) == {8: b"eight"}
