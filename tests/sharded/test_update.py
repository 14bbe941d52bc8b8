"""Updating stores in place: staged changes, plans, append and rewrite, compaction, spilling,
conflicts, and the obsolete two-file layout. tensorstore reads every result."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard

SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=2,
                            minishard_index_encoding="gzip", data_encoding="gzip")


def items_of(n: int, seed: int = 0, size: int = 50) -> dict[int, bytes]:
    rng = np.random.default_rng(seed)
    keys = np.unique(rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)).tolist()
    return {k: rng.bytes(int(rng.integers(0, size))) for k in keys}


def ts_contents(path, spec: ngshard.ShardingSpec) -> dict[int, bytes]:
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{path}/",
                          "metadata": spec.to_json()}).result(timeout=PEER_TIMEOUT)
    keys = kv.list().result(timeout=PEER_TIMEOUT)
    futures = {int.from_bytes(k, "big"): kv.read(k) for k in keys}
    return {k: f.result(timeout=PEER_TIMEOUT).value for k, f in futures.items()}


def shard_files(path) -> dict[str, tuple[int, int]]:
    return {n: (os.stat(path / n).st_ino, os.stat(path / n).st_mtime_ns)
            for n in os.listdir(path) if n.endswith(".shard")}


@pytest.fixture(params=["append", "rewrite"])
def strategy(request):
    return request.param


@pytest.fixture
def store(tmp_path):
    items = items_of(400)
    ngshard.write_kv(tmp_path, SPEC, items)
    return tmp_path, items


def test_staged_changes_are_seen_by_reads_and_committed(store, strategy):
    path, items = store
    expected = dict(items)
    keys = list(items)
    with ngshard.open_kv(path, SPEC, "r+", strategy=strategy) as kv:
        kv[keys[0]] = b"replaced"
        kv[12345] = b"new key"
        del kv[keys[1]]
        kv.update({keys[2]: b"", 777: b"seven"})
        expected.update({keys[0]: b"replaced", 12345: b"new key", keys[2]: b"", 777: b"seven"})
        del expected[keys[1]]
        assert kv[keys[0]] == b"replaced" and kv[12345] == b"new key"
        assert keys[1] not in kv and 12345 in kv
        with pytest.raises(KeyError):
            kv[keys[1]]
        with pytest.raises(KeyError):
            del kv[999]  # absent
        assert kv.get_many(list(expected) + [keys[1]]) == expected
        assert sorted(kv) == sorted(expected) and len(kv) == len(expected)
        assert ngshard.open_kv(path, SPEC).get_many(items) == items  # nothing written yet
    assert ngshard.open_kv(path, SPEC).get_many(list(expected) + [keys[1]]) == expected
    assert ts_contents(path, SPEC) == expected


def test_commit_touches_only_changed_shards(store, strategy):
    path, items = store
    before = shard_files(path)
    key = next(iter(items))
    changed = SPEC.shard_filename(int(SPEC.locate(key)[0]))
    with ngshard.open_kv(path, SPEC, "r+", strategy=strategy) as kv:
        kv[key] = b"x"
    after = shard_files(path)
    assert {n for n in before if before[n] != after[n]} == {changed}


def test_abort_and_exception_leave_the_store_untouched(store, strategy):
    path, items = store
    before = shard_files(path)
    kv = ngshard.open_kv(path, SPEC, "r+", strategy=strategy)
    kv[1] = b"one"
    kv.abort()
    assert 1 not in kv
    kv.commit()
    with pytest.raises(RuntimeError), ngshard.open_kv(path, SPEC, "r+") as kv:
        kv[2] = b"two"
        raise RuntimeError
    assert shard_files(path) == before
    assert ngshard.open_kv(path, SPEC).get_many(items) == items


def test_deleting_the_last_key_of_a_shard_deletes_its_file(tmp_path, strategy):
    ngshard.write_kv(tmp_path, SPEC, {1: b"a", 2: b"b", 3: b"c"})
    nums = SPEC.locate([1, 2, 3])[0]
    assert nums[0] == nums[1] != nums[2]
    with ngshard.open_kv(tmp_path, SPEC, "r+", strategy=strategy) as kv:
        del kv[1]
        del kv[2]
    assert sorted(os.listdir(tmp_path)) == [SPEC.shard_filename(int(nums[2])), "info"]
    assert dict(ngshard.open_kv(tmp_path, SPEC).items()) == {3: b"c"}


def test_modes(tmp_path):
    with pytest.raises(FileNotFoundError, match="mode 'a' or 'w'"):
        ngshard.open_kv(tmp_path / "none", SPEC, "r+")
    with ngshard.open_kv(tmp_path / "new", SPEC, "a") as kv:  # "a" creates
        kv[5] = b"five"
    with ngshard.open_kv(tmp_path / "new", SPEC, "a") as kv:  # and then updates
        kv[6] = b"six"
    assert dict(ngshard.open_kv(tmp_path / "new", SPEC).items()) == {5: b"five", 6: b"six"}
    with ngshard.open_kv(tmp_path / "new", SPEC, "w") as kv:  # "w" starts over
        assert 5 not in kv and len(kv) == 0
        kv[7] = b"seven"
    assert dict(ngshard.open_kv(tmp_path / "new", SPEC).items()) == {7: b"seven"}
    with pytest.raises(ngshard.SpecError, match="mode"):
        ngshard.open_kv(tmp_path, SPEC, "x")
    with pytest.raises(ngshard.SpecError, match="append"):
        ngshard.open_kv("memory://ngshard-modes", SPEC, "a", strategy="append")


def test_mode_w_commit_twice_keeps_the_first(tmp_path):
    kv = ngshard.open_kv(tmp_path, SPEC, "w")
    kv[1] = b"one"
    kv.commit()
    kv[2] = b"two"
    kv.commit()
    assert dict(ngshard.open_kv(tmp_path, SPEC).items()) == {1: b"one", 2: b"two"}


def test_plan_says_what_commit_does(store):
    path, items = store
    keys = list(items)
    kv = ngshard.open_kv(path, SPEC, "r+", strategy="append")
    first = SPEC.shard_filename(int(SPEC.locate(keys[0])[0]))
    same_shard = [k for k in keys if SPEC.shard_filename(int(SPEC.locate(k)[0])) == first]
    for k in same_shard:
        del kv[k]
    kv[keys[-1]] = b"y" * 10
    plan = kv.plan()
    actions = {p.name: p for p in plan.shards}
    assert actions[first].action == "delete" and actions[first].deletes == len(same_shard)
    other = SPEC.shard_filename(int(SPEC.locate(keys[-1])[0]))
    if other != first:
        assert actions[other].action == "append" and actions[other].sets == 1
        assert actions[other].write_bytes < 1000
    text = str(plan)
    assert first in text and "delete" in text and "strategy append" in text
    assert kv.commit().shards == plan.shards
    assert not os.path.exists(path / first)


def test_append_writes_little_and_leaves_garbage_that_compaction_removes(tmp_path):
    items = items_of(2000, size=500)
    ngshard.write_kv(tmp_path, SPEC, items)
    sizes = {n: os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path) if n != "info"}
    keys = list(items)[:20]
    with ngshard.open_kv(tmp_path, SPEC, "r+", strategy="append", compact_ratio=None) as kv:
        for k in keys:
            kv[k] = b"updated"
    grown = sum(os.path.getsize(tmp_path / n) for n in sizes) - sum(sizes.values())
    # the new chunks and (raw size at most) the indices of the touched minishards, nothing more
    where = np.stack(SPEC.locate(list(items)), axis=1)
    touched = np.unique(np.stack(SPEC.locate(keys), axis=1), axis=0)
    entries = sum(int((where == t).all(axis=1).sum()) for t in touched)
    assert 0 < grown < 24 * entries + 20 * 100 < sum(sizes.values()) / 10
    expected = {**items, **{k: b"updated" for k in keys}}
    assert ts_contents(tmp_path, SPEC) == expected  # peers read shards with unused bytes
    kv = ngshard.open_kv(tmp_path, SPEC, "r+")
    assert max(s["garbage"] for s in kv.stats()) > 0
    plan = kv.compact()
    assert {p.action for p in plan.shards} == {"compact"}
    assert all(s["garbage"] == 0 for s in kv.stats())
    assert ngshard.open_kv(tmp_path, SPEC).get_many(expected) == expected
    assert ts_contents(tmp_path, SPEC) == expected


def test_automatic_compaction_past_the_garbage_ratio(tmp_path):
    spec = ngshard.ShardingSpec(minishard_bits=3)  # raw data: sizes are what they seem
    ngshard.write_kv(tmp_path, spec, {1: b"a" * 1000, 2: b"c"})
    kv = ngshard.open_kv(tmp_path, spec, "r+", compact_ratio=0.3)
    kv[2] = b"d"  # little garbage: appended
    assert kv.commit().shards[0].action == "append"
    kv[1] = b"b" * 1000  # replacing most of the file would leave > 30% garbage
    assert kv.plan().shards[0].action == "compact"
    kv.commit()
    assert os.path.getsize(tmp_path / "0.shard") < 1200
    assert ngshard.open_kv(tmp_path, spec).get_many([1, 2]) == {1: b"b" * 1000, 2: b"d"}


def test_staged_changes_spill_past_the_limit(tmp_path, strategy):
    items = items_of(300, size=200)
    ngshard.write_kv(tmp_path, SPEC, items)
    spill = tmp_path / "spill"
    spill.mkdir()
    kv = ngshard.open_kv(tmp_path / ".", SPEC, "r+", strategy=strategy, staged_bytes=2000,
                         spill_dir=str(spill))
    new = items_of(500, seed=5, size=200)
    keys = list(items)
    kv.update(new)
    kv[keys[0]] = b"late"  # newer than the spilled batch
    del kv[keys[1]]
    assert os.listdir(spill)  # spilled
    expected = {**items, **new, keys[0]: b"late"}
    del expected[keys[1]]
    assert kv[keys[0]] == b"late" and kv.get_many(expected) == expected
    kv.commit()
    assert os.listdir(spill) == []
    assert ngshard.open_kv(tmp_path, SPEC).get_many(list(expected) + [keys[1]]) == expected


def test_write_kv_from_an_iterator_larger_than_its_buffer(tmp_path):
    items = items_of(3000, size=300)

    def pairs():
        yield from items.items()
        yield next(iter(items)), b"last wins"

    ngshard.write_kv(tmp_path / "kv", SPEC, pairs(), buffer_bytes=20_000,
                     spill_dir=str(tmp_path))
    expected = {**items, next(iter(items)): b"last wins"}
    assert ngshard.open_kv(tmp_path / "kv", SPEC).get_many(expected) == expected
    assert sorted(os.listdir(tmp_path)) == ["kv"]  # spill files removed


RAW = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=2,
                           minishard_index_encoding="gzip", data_encoding="raw")


def shard_bytes(path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.shard"))}


@pytest.mark.parametrize("spill_dir", ["beside the shards", "elsewhere"])
def test_spilled_shards_are_laid_out_as_in_memory_ones(tmp_path, spill_dir):
    """Raw data past the buffer, repeated keys spilled twice and deletions: each shard holds
    its values in key order with no garbage, byte for byte what a write in memory gives."""
    items = items_of(3000, size=300)
    keys = list(items)
    again = {k: b"newer %d" % k for k in keys[:40:4]}  # spilled twice: the old copies go

    def pairs():
        for i, (k, v) in enumerate(items.items()):
            yield k, v
            if i == 1500:
                yield from again.items()
        yield keys[1], b"last wins"

    path, reference = tmp_path / "kv", tmp_path / "reference"
    elsewhere = tmp_path / "spill"
    elsewhere.mkdir()
    kw = {} if spill_dir == "beside the shards" else {"spill_dir": str(elsewhere)}
    ngshard.write_kv(path, RAW, pairs(), buffer_bytes=20_000, **kw)
    expected = {**items, **again, keys[1]: b"last wins"}
    ngshard.write_kv(reference, RAW, expected)
    assert shard_bytes(path) == shard_bytes(reference)
    assert ts_contents(path, RAW) == expected
    kv = ngshard.open_kv(path, RAW)
    assert sum(s["keys"] for s in kv.stats()) == len(expected)
    assert all(s["garbage"] == 0 for s in kv.stats())
    assert sorted(os.listdir(path)) == sorted([*shard_files(path), "info"])
    assert os.listdir(elsewhere) == []

    with ngshard.open_kv(path, RAW, "w", staged_bytes=20_000, **kw) as kv:  # deletions too
        kv.update(items)
        for k in keys[::5]:
            del kv[k]
    expected = {k: v for k, v in items.items() if k not in keys[::5]}
    ngshard.write_kv(reference, RAW, expected, overwrite=True)
    assert shard_bytes(path) == shard_bytes(reference)
    assert ts_contents(path, RAW) == expected


@pytest.mark.parametrize("second", ["append", "rewrite"])
def test_concurrent_writers_conflict_instead_of_losing_keys(store, strategy, second):
    path, items = store
    key = next(iter(items))
    neighbour = next(k for k in items if k != key and
                     SPEC.locate(k)[0] == SPEC.locate(key)[0])
    a = ngshard.open_kv(path, SPEC, "r+", strategy=strategy)
    b = ngshard.open_kv(path, SPEC, "r+", strategy=second)
    a[key] = b"from a"
    b[neighbour] = b"from b"
    plan_b = b.plan()  # b reads the shard
    a.commit()
    with pytest.raises(ngshard.ConflictError, match="changed on storage"):
        b.commit(plan_b)
    assert ngshard.open_kv(path, SPEC)[key] == b"from a"
    b[neighbour] = b"from b"
    with pytest.raises(ngshard.NgShardError, match="make a new plan"):
        b.commit(plan_b)
    b.commit()  # planned afresh, it merges with a's change
    kv = ngshard.open_kv(path, SPEC)
    assert kv[key] == b"from a" and kv[neighbour] == b"from b"


def test_reader_sees_appends_and_compaction(store):
    path, items = store
    key = next(iter(items))
    reader = ngshard.open_kv(path, SPEC)
    assert reader[key] == items[key]
    for i in range(3):
        with ngshard.open_kv(path, SPEC, "r+", strategy="append", compact_ratio=None) as kv:
            kv[key] = b"version %d" % i
        assert reader[key] == b"version %d" % i
        assert reader.get_many([key]) == {key: b"version %d" % i}
    ngshard.open_kv(path, SPEC, "r+").compact()
    assert reader[key] == b"version 2" and len(reader) == len(items)


def two_file_store(path) -> dict[int, bytes]:
    """A store of 300 items in the obsolete layout: each shard as <shard>.index + .data."""
    items = items_of(300)
    ngshard.write_kv(path, SPEC, items)
    for name in [n for n in os.listdir(path) if n.endswith(".shard")]:
        data = (path / name).read_bytes()
        stem = name[:-len(".shard")]
        (path / f"{stem}.index").write_bytes(data[:SPEC.shard_index_size])
        (path / f"{stem}.data").write_bytes(data[SPEC.shard_index_size:])
        os.unlink(path / name)
    return items


def test_obsolete_two_file_shards_are_read(tmp_path):
    items = two_file_store(tmp_path)
    kv = ngshard.open_kv(tmp_path, SPEC)
    assert kv.get_many(items) == items
    assert sorted(kv) == sorted(items)
    key = next(iter(items))
    assert kv[key] == items[key]


@pytest.mark.parametrize("strategy", ["append", "rewrite"])
def test_obsolete_two_file_shards_are_converted_by_updates(tmp_path, strategy):
    items = two_file_store(tmp_path)
    keys = sorted(items)
    with ngshard.open_kv(tmp_path, SPEC, "r+", strategy=strategy) as kv:
        kv[keys[0]] = b"new"
        del kv[keys[1]]
        plan = kv.plan()
        assert {p.action for p in plan.shards} == {"convert"}
        changed = {p.name for p in plan.shards}
    items[keys[0]] = b"new"
    del items[keys[1]]
    on_disk = set(os.listdir(tmp_path))
    for name in changed:  # one file each, the pair gone; the other shards still pairs
        stem = name[:-len(".shard")]
        assert name in on_disk and not {f"{stem}.index", f"{stem}.data"} & on_disk
    assert any(n.endswith(".index") for n in on_disk)
    assert dict(ngshard.open_kv(tmp_path, SPEC).items()) == items

    def shard_of(key: int) -> str:
        return SPEC.shard_filename(int(SPEC.locate(np.array([key], np.uint64))[0][0]))

    # tensorstore reads the converted shards (it does not read the pairs at all)
    assert ts_contents(tmp_path, SPEC) == {k: v for k, v in items.items()
                                           if shard_of(k) in changed}
    # a shard whose every key goes: the pair goes too, no file is left for it
    name = sorted(n for n in on_disk if n.endswith(".index"))[0][:-len(".index")]
    gone = [k for k in items if shard_of(k) == f"{name}.shard"]
    with ngshard.open_kv(tmp_path, SPEC, "r+", strategy=strategy) as kv:
        for k in gone:
            del kv[k]
    assert not any(n.startswith(f"{name}.") for n in os.listdir(tmp_path))
    for k in gone:
        del items[k]
    assert dict(ngshard.open_kv(tmp_path, SPEC).items()) == items
    with ngshard.open_kv(tmp_path, SPEC, "w") as kv:  # writing anew replaces the layout
        kv[keys[5]] = b"x"
    assert all(n.endswith(".shard") for n in os.listdir(tmp_path) if n != "info")
    assert dict(ngshard.open_kv(tmp_path, SPEC).items()) == {keys[5]: b"x"}


def test_rewrite_on_remote_storage(tmp_path):
    url = "memory://ngshard-update-remote/kv"
    items = items_of(200)
    ngshard.write_kv(url, SPEC, items)
    key = next(iter(items))
    with ngshard.open_kv(url, SPEC, "r+") as kv:
        assert kv.strategy == "rewrite"
        kv[key] = b"new"
        del kv[list(items)[1]]
    expected = {**items, key: b"new"}
    del expected[list(items)[1]]
    assert dict(ngshard.open_kv(url, SPEC).items()) == expected


def test_append_trailer_records_the_exact_garbage(tmp_path):
    items = items_of(1000, size=300)
    ngshard.write_kv(tmp_path, SPEC, items)
    keys = list(items)
    for round_ in range(4):
        with ngshard.open_kv(tmp_path, SPEC, "r+", strategy="append", compact_ratio=None) as kv:
            for k in keys[round_ * 50:(round_ + 1) * 50]:
                kv[k] = b"round %d" % round_
            del kv[keys[-1 - round_]]
    kv = ngshard.open_kv(tmp_path, SPEC)
    exact = {s["name"]: round(s["garbage"] * s["bytes"]) for s in kv.stats()}
    recorded = {n: s.garbage for n, s in kv.reader.shards(kv.shard_names()).items()}
    assert exact == recorded and min(exact.values()) > 0
    kv = ngshard.open_kv(tmp_path, SPEC, "r+")
    kv.compact()
    assert {n: s.garbage for n, s in kv.reader.shards(kv.shard_names()).items()} == dict.fromkeys(
        exact, 0)
