"""The segment layer writers refuse a destination that holds a layer (naming what is there),
and with ``overwrite=True`` replace it leaving none of its files: unsharded files of ids the
new layer lacks, shards of another spec, index folders, linked properties."""

from __future__ import annotations

import numpy as np
import pytest

import ngshard

SPEC = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "murmurhash3_x86_128",
        "preshift_bits": 0, "minishard_bits": 1, "shard_bits": 2,
        "minishard_index_encoding": "raw", "data_encoding": "raw"}
OTHER = {**SPEC, "shard_bits": 1}
TETRA = (np.array([[0, 0, 0], [10, 0, 0], [0, 10, 0], [0, 0, 10]], float),
         np.array([[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]))
LINE = (np.array([[0, 0, 0], [5, 5, 5]], np.float32), np.array([[0, 1]]))


def tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def skeletons(url, ids, sharding, **kw):
    return ngshard.write_skeletons(url, {i: LINE for i in ids}, sharding=sharding, **kw)


def meshes(url, ids, sharding, **kw):
    return ngshard.write_meshes(url, {i: TETRA for i in ids}, sharding=sharding, **kw)


def legacy(url, ids, sharding, **kw):
    return ngshard.write_legacy_meshes(url, {i: TETRA for i in ids}, sharding=sharding, **kw)


def annotations(url, ids, sharding, **kw):
    points = np.arange(3 * len(ids), dtype=np.float32).reshape(-1, 3)
    return ngshard.write_annotations(url, "point", points, ids=ids, sharding=sharding,
                                     relationships={"cell": [[i] for i in ids]}, **kw)


WRITERS = {"skeletons": (skeletons, "a skeleton layer"),
           "meshes": (meshes, "a multi-resolution mesh layer"),
           "legacy meshes": (legacy, "a legacy mesh layer"),
           "annotations": (annotations, r"an annotation layer \(point\)")}


@pytest.mark.parametrize("old, new", [(None, SPEC), (SPEC, None), (SPEC, OTHER),
                                      (None, None)],
                         ids=["unsharded-sharded", "sharded-unsharded", "respec", "unsharded"])
@pytest.mark.parametrize("kind", WRITERS)
def test_a_layer_is_refused_then_replaced_whole(tmp_path, kind, old, new):
    write, what = WRITERS[kind]
    write(tmp_path, [1, 2, 3, 40], old)
    (tmp_path / "README").write_text("kept")
    before = tree(tmp_path)
    with pytest.raises(ngshard.ExistsError, match=f"{tmp_path} holds {what}: pass "
                                                  r"overwrite=True \(--force\)"):
        write(tmp_path, [5], new)
    assert tree(tmp_path) == before
    layer = write(tmp_path, [5], new, overwrite=True)
    fresh = tmp_path.parent / f"{tmp_path.name}-fresh"
    write(fresh, [5], new)
    assert tree(tmp_path) == sorted(tree(fresh) + ["README"])  # nothing of the old one
    opened = ngshard.open(tmp_path)
    assert opened.info == layer.info
    assert opened.get(5) is not None


@pytest.mark.parametrize("kind", WRITERS)
def test_another_kind_of_layer_is_refused_then_replaced(tmp_path, kind):
    write, _ = WRITERS[kind]
    with ngshard.create_volume(tmp_path, dtype="uint8", shape=(16, 16, 16)) as vol:
        vol[...] = 1
    with pytest.raises(ngshard.ExistsError, match="holds a precomputed image with scale 1_1_1"):
        write(tmp_path, [5], None)
    write(tmp_path, [5], None, overwrite=True)
    assert "1_1_1" not in tree(tmp_path)


def test_segment_properties_are_refused_then_replaced(tmp_path):
    skeletons(tmp_path / "skel", [1, 2], SPEC)
    ngshard.write_segment_properties(tmp_path / "skel", [1, 2], labels=["a", "b"])
    with pytest.raises(ngshard.ExistsError, match="segment_properties holds a segment "
                                                  "properties layer"):
        ngshard.write_segment_properties(tmp_path / "skel", [1], labels=["c"])
    props = ngshard.write_segment_properties(tmp_path / "skel", [1], labels=["c"],
                                             overwrite=True)
    assert ngshard.open(tmp_path / "skel" / "segment_properties").info == props.info
    with pytest.raises(ngshard.ExistsError, match="holds an annotation layer"):
        annotations(tmp_path / "ann", [1], None)
        ngshard.write_segment_properties(tmp_path / "ann", [1], labels=["c"])
    # the skeletons replaced: their properties go with them
    skeletons(tmp_path / "skel", [3], SPEC, overwrite=True)
    assert "segment_properties" not in tree(tmp_path / "skel")
