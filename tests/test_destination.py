"""Nothing is overwritten by surprise: a writer refuses a destination that holds a layer, a
store or a zarr node (ExistsError naming it and what it is), and ``overwrite=True`` removes all
that it replaces, so no orphan is left and the new layer reads only new data; files that are
not the layer's stay. Checked with ngshard and tensorstore on real files and memory://."""

from __future__ import annotations

import json

import fsspec
import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard

SPEC = ngshard.ShardingSpec(minishard_bits=1, shard_bits=2)


def tree(root) -> list[str]:
    """Every file and folder under ``root``, relative, sorted."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def ts_read(path, scale: int = 0) -> np.ndarray:
    return ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                    "scale_index": scale}).result(timeout=PEER_TIMEOUT
                                                   ).read().result(timeout=PEER_TIMEOUT)


def segmentation(path, data, *, sharding="auto", scales=3) -> None:
    """A segmentation of ``scales`` scales (the old layer that gets replaced)."""
    with ngshard.create_volume(path, dtype="uint64", shape=data.shape, chunk_size=(16,) * 3,
                               encoding="compressed_segmentation", resolution=(8, 8, 8),
                               sharding=sharding) as vol:
        vol[...] = data
    for _ in range(scales - 1):
        vol = vol.add_scale((2, 2, 2))


@pytest.mark.parametrize("sharding", [None, "auto"], ids=["unsharded", "sharded"])
def test_create_volume_refuses_a_layer_and_replaces_it_whole(tmp_path, sharding):
    old = np.arange(1, 32**3 + 1, dtype=np.uint64).reshape((32,) * 3)
    segmentation(tmp_path, old, sharding=sharding)
    (tmp_path / "notes.txt").write_text("not the layer's")
    before = tree(tmp_path)
    info = (tmp_path / "info").read_bytes()
    with pytest.raises(ngshard.ExistsError) as error:
        ngshard.create_volume(tmp_path, dtype="uint64", shape=(32, 32, 32),
                              chunk_size=(16,) * 3, resolution=(8, 8, 8), sharding=sharding)
    assert str(error.value) == (f"{tmp_path} holds a precomputed segmentation with scales "
                                f"8_8_8, 16_16_16, 32_32_32: pass overwrite=True (--force) "
                                f"to replace it")
    assert tree(tmp_path) == before and (tmp_path / "info").read_bytes() == info

    # the same scale key (8_8_8), shape and chunking: the new layer must not see old chunks
    vol = ngshard.create_volume(tmp_path, dtype="uint64", shape=(32, 32, 32),
                                chunk_size=(16,) * 3, resolution=(8, 8, 8), sharding=sharding,
                                overwrite=True)
    # no orphan scale, and nothing in 8_8_8 (which the new layer's writer may have made)
    assert set(tree(tmp_path)) - {"8_8_8"} == {"info", "notes.txt"}
    assert not vol[...].any()
    with vol:
        vol[:16, :16, :16] = 7
    assert not ngshard.open_volume(tmp_path)[16:, 16:, 16:].any()
    expected = np.zeros((32, 32, 32, 1), np.uint64)
    expected[:16, :16, :16] = 7
    np.testing.assert_array_equal(ts_read(tmp_path), expected)
    assert [s["key"] for s in json.loads((tmp_path / "info").read_text())["scales"]] == \
        ["8_8_8"]


def test_overwrite_removes_the_layers_a_segmentation_links_and_convert_records(tmp_path):
    segmentation(tmp_path / "seg", np.ones((16, 16, 16), np.uint64), scales=1)
    ngshard.write_skeletons(tmp_path / "seg" / "skeletons",
                            {1: (np.zeros((2, 3)), np.array([[0, 1]]))})
    ngshard.write_segment_properties(tmp_path / "seg", [1], labels=["one"])
    info = json.loads((tmp_path / "seg" / "info").read_text())
    info["skeletons"] = "skeletons"
    (tmp_path / "seg" / "info").write_text(json.dumps(info))
    (tmp_path / "seg" / ".ngshard-convert").mkdir()
    (tmp_path / "seg" / ".ngshard-convert" / "job.json").write_text("{}")
    (tmp_path / "seg" / "skeletons" / "mine.txt").write_text("kept")
    ngshard.create_volume(tmp_path / "seg", dtype="uint8", shape=(8, 8, 8), overwrite=True)
    assert tree(tmp_path / "seg") == ["info", "skeletons", "skeletons/mine.txt"]


@pytest.mark.parametrize("url", ["memory", "local"])
def test_write_kv_refuses_a_volume_and_replaces_it(tmp_path, url):
    root = f"memory://dest-{tmp_path.name}" if url == "memory" else str(tmp_path)
    with ngshard.create_volume(root, dtype="uint8", shape=(32, 32, 32), chunk_size=(16,) * 3,
                               sharding="auto") as vol:
        vol[...] = 3
    vol.add_scale((2, 2, 2))
    with pytest.raises(ngshard.ExistsError,
                       match=r"holds a precomputed image with scales 1_1_1, 2_2_2: pass"):
        ngshard.write_kv(root, SPEC, {1: b"one"})
    assert ngshard.open_volume(root)[...].min() == 3
    ngshard.write_kv(root, SPEC, {1: b"one"}, overwrite=True)
    fs, path = fsspec.core.url_to_fs(root)
    names = sorted(p[len(path):].strip("/") for p in fs.find(path, withdirs=True))
    names = [n for n in names if n]
    assert names == sorted([SPEC.shard_filename(int(SPEC.locate([1])[0][0])), "info"])
    assert dict(ngshard.open_kv(root).items()) == {1: b"one"}
    with pytest.raises(ngshard.ExistsError, match="holds a sharded store"):
        ngshard.write_kv(root, SPEC, {2: b"two"})


def test_orphan_chunks_where_a_new_layer_writes_are_refused(tmp_path):
    """Chunk files of a scale folder that no info describes (a layer whose info was
    deleted) would be read as the new layer's: refused, removed with overwrite."""
    with ngshard.create_volume(tmp_path, dtype="uint8", shape=(16, 16, 16),
                               chunk_size=(16,) * 3) as vol:
        vol[...] = 9
    (tmp_path / "info").unlink()
    (tmp_path / "1_1_1" / "mine.txt").write_text("kept")
    with pytest.raises(ngshard.ExistsError, match=r"1_1_1 holds 1 shard or chunk files that "
                                                  r"no info describes"):
        ngshard.create_volume(tmp_path, dtype="uint8", shape=(16, 16, 16))
    vol = ngshard.create_volume(tmp_path, dtype="uint8", shape=(16, 16, 16), overwrite=True)
    assert not vol[...].any()
    assert tree(tmp_path) == ["1_1_1", "1_1_1/mine.txt", "info"]


def test_an_unfinished_conversion_of_another_job_is_named(tmp_path):
    records = tmp_path / ".ngshard-convert"
    records.mkdir(parents=True)
    (records / "job.json").write_text(json.dumps({"from": "/data/em.zarr"}))
    (records / "task%3A1").write_text("")
    with pytest.raises(ngshard.ExistsError, match=r"holds an unfinished conversion \(from "
                                                  r"/data/em.zarr\)"):
        ngshard.write_kv(tmp_path, SPEC, {1: b"x"})
    ngshard.write_kv(tmp_path, SPEC, {1: b"x"}, overwrite=True)
    assert not records.exists()


def test_zarr_arrays_and_groups_are_refused_and_replaced(tmp_path):
    import zarr

    group = zarr.open_group(str(tmp_path / "g"), mode="w")
    for name in ("s0", "s1"):
        group.create_array(name, shape=(8, 8), chunks=(4, 4), dtype="uint8")[...] = 5
    with pytest.raises(ngshard.ExistsError, match="g holds a zarr v3 group"):
        ngshard.zarr.create_array(tmp_path / "g", (4, 4), "uint8", (2, 2))
    with pytest.raises(ngshard.ExistsError, match="s0 holds a zarr v3 array"):
        ngshard.zarr.create_array(tmp_path / "g" / "s0", (4, 4), "uint8", (2, 2))
    with pytest.raises(ngshard.ExistsError, match="holds a zarr v3 group"):
        ngshard.create_volume(tmp_path / "g", dtype="uint8", shape=(8, 8, 8))
    ngshard.zarr.create_array(tmp_path / "g", (4, 4), "uint8", (2, 2), overwrite=True)
    assert tree(tmp_path / "g") == ["zarr.json"]
    assert not zarr.open_array(str(tmp_path / "g"))[...].any()


def test_a_store_of_shards_without_info_is_refused(tmp_path):
    ngshard.write_kv(tmp_path, SPEC, {k: b"v" for k in range(40)}, info=False)
    shards = tree(tmp_path)
    with pytest.raises(ngshard.ExistsError, match=f"holds {len(shards)} shard or chunk files"):
        ngshard.write_kv(tmp_path, SPEC, {1: b"x"})
    ngshard.write_kv(tmp_path, SPEC, {1: b"x"}, overwrite=True, info=False)
    assert len(tree(tmp_path)) == 1


@pytest.mark.parametrize("job", ["[" * 100_000 + "]" * 100_000,
                                 '{"from": "x", "to": "y", "tasks": {"a": 1e400}}'])
def test_a_hostile_job_record_is_no_crash(tmp_path, job):
    """A job record nested past Python's parser, or counting infinite tasks: the
    destination is still refused (ExistsError), once a RecursionError or OverflowError."""
    from ngshard.pipelines.resume import unfinished

    records = tmp_path / ".ngshard-convert"
    records.mkdir(parents=True)
    (records / "job.json").write_text(job)
    (records / "task%3A1").write_text("")
    with pytest.raises(ngshard.ExistsError, match="unfinished conversion"):
        ngshard.write_kv(tmp_path, SPEC, {1: b"x"})
    assert "run the same conversion again" in unfinished(str(tmp_path))
