"""Annotation collections: every kind round trips through every index, sharded or not; the
spatial index stores each annotation in the cells its geometry meets and answers box queries
with every annotation meeting the box, exactly once; neuroglancer's own writer and reader
agree with ngshard's."""

from __future__ import annotations

import numpy as np
import pytest

import ngshard
from ngshard.layers.annotation_shapes import shapes
from ngshard.layers.annotation_spatial import Level, cells_met

ng = pytest.importorskip("neuroglancer")
from neuroglancer.read_precomputed_annotations import AnnotationReader  # noqa: E402
from neuroglancer.write_annotations import AnnotationWriter  # noqa: E402

KINDS = ["point", "line", "axis_aligned_bounding_box", "ellipsoid", "polyline"]


def collection(kind, n, rng):
    """Geometry, properties and relationships of n random annotations of ``kind``."""
    if kind == "point":
        geometry = rng.uniform(0, 100, (n, 3))
    elif kind == "polyline":
        geometry = [rng.uniform(0, 100, (int(k), 3)) for k in rng.integers(2, 6, n)]
    else:
        a = rng.uniform(0, 100, (n, 3))
        b = rng.uniform(0, 8, (n, 3)) if kind == "ellipsoid" else a + rng.uniform(-9, 9, (n, 3))
        geometry = np.concatenate([a, b], axis=1)
    properties = {"score": rng.random(n).astype(np.float32),
                  "count": rng.integers(-5, 5, n).astype(np.int16),
                  "color": rng.integers(0, 255, (n, 4)).astype(np.uint8),
                  "cls": {"values": rng.integers(0, 3, n).astype(np.uint8),
                          "enum_values": [0, 1, 2], "enum_labels": ["a", "b", "c"]}}
    relationships = {"pre": rng.integers(1, 30, n),
                     "post": [rng.integers(1, 30, k) for k in rng.integers(0, 4, n)]}
    return geometry, properties, relationships


def _box_distance(p, lo, hi) -> float:
    return float(np.square(np.maximum(np.maximum(lo - p, p - hi), 0)).sum())


def _segment_meets(a, b, lo, hi) -> bool:
    """By ternary search of the (convex) squared distance from the segment to the box: a
    method apart from the slab test the library uses."""
    t0, t1 = 0.0, 1.0
    for _ in range(100):
        m0, m1 = t0 + (t1 - t0) / 3, t1 - (t1 - t0) / 3
        if _box_distance(a + m0 * (b - a), lo, hi) <= _box_distance(a + m1 * (b - a), lo, hi):
            t1 = m1
        else:
            t0 = m0
    return _box_distance(a + t0 * (b - a), lo, hi) <= 1e-12


def meets(kind, geometry, lo, hi) -> np.ndarray:
    """Per annotation: does its geometry meet the closed box [lo, hi]? One at a time."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    out = []
    for g in geometry:
        g = np.asarray(g, np.float64)
        if kind == "point":
            out.append(_box_distance(g, lo, hi) == 0)
        elif kind == "axis_aligned_bounding_box":
            out.append(bool((np.minimum(g[:3], g[3:]) <= hi).all()
                            and (np.maximum(g[:3], g[3:]) >= lo).all()))
        elif kind == "ellipsoid":  # the nearest point of the box, in radius units
            c, r = g[:3], g[3:]
            out.append(float(np.square((np.clip(c, lo, hi) - c) / r).sum()) <= 1)
        else:
            points = g.reshape(-1, 3)
            out.append(any(_segment_meets(points[i], points[i + 1], lo, hi)
                           for i in range(len(points) - 1)))
    return np.array(out, bool)


@pytest.mark.parametrize("sharding", ["auto", None])
@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_every_index(tmp_path, kind, sharding):
    rng = np.random.default_rng(KINDS.index(kind))
    n = 400 if sharding else 120  # a file per key is slow on slow disks
    geometry, properties, relationships = collection(kind, n, rng)
    ids = rng.choice(2**40, n, replace=False).astype(np.uint64)
    layer = ngshard.write_annotations(tmp_path / "a", kind, geometry, ids=ids,
                                      properties=properties, relationships=relationships,
                                      sharding=sharding, limit=n // 10, durable=False)
    a = ngshard.open(tmp_path / "a")
    assert isinstance(a, ngshard.Annotations) and a.info == layer.info
    assert len(a.info["spatial"]) > 1  # 10 a cell: several levels
    assert a.keys_array().tolist() == sorted(ids.tolist())
    got = a.get_many([*ids[:50].tolist(), 2**40])  # ids are drawn below 2**40
    assert len(got) == 50 and a.get(2**40) is None and 2**40 not in a
    with pytest.raises(KeyError):
        a[2**40]
    np.testing.assert_array_equal(a[int(ids[0])].geometry, got[int(ids[0])].geometry)
    for i in range(50):
        x = got[int(ids[i])]
        want = geometry[i] if kind != "polyline" else geometry[i]
        np.testing.assert_allclose(x.geometry, np.asarray(want, np.float32))
        assert x.properties["score"] == properties["score"][i]
        assert x.properties["count"] == properties["count"][i]
        assert x.properties["color"].tolist() == properties["color"][i].tolist()
        assert x.properties["cls"] == properties["cls"]["values"][i]
        assert x.relationships["pre"].tolist() == [relationships["pre"][i]]
        assert x.relationships["post"].tolist() == relationships["post"][i].tolist()
    segment = int(relationships["pre"][0])
    related = a.related("pre", segment)
    assert sorted(related.ids.tolist()) == sorted(ids[relationships["pre"] == segment].tolist())
    for q_lo, q_hi in ([10, 20, 30], [60, 70, 50]), (None, None):
        found = a.query(q_lo, q_hi)
        want = ids if q_lo is None else ids[meets(kind, geometry, q_lo, q_hi)]
        assert len(found.ids) == len(set(found.ids.tolist()))  # no double counting
        assert sorted(found.ids.tolist()) == sorted(want.tolist())
        by = dict(zip(found.ids.tolist(), range(len(found))))
        i = int(np.flatnonzero(np.isin(ids, want))[0])
        assert found.properties["score"][by[int(ids[i])]] == properties["score"][i]


@pytest.mark.parametrize("sharding", ["auto", None])
@pytest.mark.parametrize("kind", KINDS)
def test_a_query_meeting_no_annotation_is_empty(tmp_path, kind, sharding):
    """Boxes outside the bounds, in an empty cell, or between the annotations: an empty set
    of the collection's kind (it once raised ValueError for points and lines)."""
    rng = np.random.default_rng(1)
    geometry, properties, _ = collection(kind, 30, rng)
    a = ngshard.write_annotations(tmp_path / "a", kind, geometry, properties=properties,
                                  sharding=sharding, limit=3, durable=False)
    for lo, hi in ([500] * 3, [600] * 3), ([-50] * 3, [-40] * 3), ([1e-3] * 3, [2e-3] * 3):
        found = a.query(lo, hi)
        assert len(found) == 0 and found.type == kind and found.ids.dtype == np.uint64
        assert sorted(found.properties) == ["cls", "color", "count", "score"]


def test_boxes_across_many_cells_are_stored_once_per_level(tmp_path):
    """A box spanning the whole space among small ones: emitted early, found once."""
    rng = np.random.default_rng(5)
    a = rng.uniform(0, 100, (300, 3))
    geometry = np.concatenate([a, a + 1], axis=1)
    geometry[0] = [0, 0, 0, 100, 100, 100]
    layer = ngshard.write_annotations(tmp_path / "a", "axis_aligned_bounding_box", geometry,
                                      limit=10, durable=False)
    found = layer.query([40, 40, 40], [60, 60, 60])
    assert 0 in found.ids.tolist() and len(found.ids) == len(set(found.ids.tolist()))


@pytest.mark.parametrize("kind, geometry", [
    ("line", [[1, 2, 3, 60, 50, 40]]),
    ("polyline", [[[1, 2, 3], [60, 50, 40], [5, 60, 20]]]),
    ("ellipsoid", [[32.3, 30.2, 28.1, 25, 6, 12]]),
])
def test_an_annotation_is_stored_in_the_cells_it_meets(kind, geometry):
    """On an 8x8x8 grid of 8-unit cells: a diagonal line, a bent polyline and a flat
    ellipsoid are placed in exactly the cells their geometry meets (by the oracle above), fewer
    than their bounding boxes meet (the lines a quarter or less)."""
    placed = shapes(kind, 3, geometry if kind == "polyline" else np.array(geometry, float))
    level = Level(np.full(3, 8.0), np.full(3, 8))
    owner, cells = cells_met(placed, np.array([0]), level, np.zeros(3))
    grid = np.stack(np.meshgrid(*[np.arange(8)] * 3, indexing="ij"), -1).reshape(-1, 3)
    want = [tuple(c) for c in grid if meets(kind, geometry, 8.0 * c, 8.0 * c + 8)[0]]
    assert sorted(map(tuple, cells.tolist())) == sorted(want)
    assert (owner == 0).all() and len(set(map(tuple, cells.tolist()))) == len(cells)
    first, last = level.cell_ranges(placed.lo, placed.hi, np.zeros(3))
    assert len(want) < np.prod(last - first + 1) / (1 if kind == "ellipsoid" else 4)


@pytest.mark.parametrize("kind", ["line", "polyline"])
def test_neuroglancer_reads_ngshard_collections(tmp_path, kind):
    rng = np.random.default_rng(1)
    geometry, properties, relationships = collection(kind, 100, rng)
    for sharding in ("auto", None):
        path = tmp_path / str(sharding)
        ngshard.write_annotations(path, kind, geometry, properties=properties,
                                  relationships=relationships, sharding=sharding, limit=30,
                                  durable=False)
        reader = AnnotationReader(path.as_uri() + "/")
        ann = reader.by_id[7]
        if kind == "line":
            np.testing.assert_allclose(ann.point_a, geometry[7, :3].astype(np.float32))
        else:
            np.testing.assert_allclose(ann.points, geometry[7].astype(np.float32))
        names = [p.id for p in reader.properties]
        props = dict(zip(names, ann.props))
        assert props["score"] == pytest.approx(float(properties["score"][7]))
        assert props["count"] == properties["count"][7]
        assert list(props["color"]) == properties["color"][7].tolist()
        assert [list(map(int, s)) for s in ann.segments] == [
            [relationships["pre"][7]], relationships["post"][7].tolist()]
        seg = int(relationships["pre"][7])
        assert {int(x.id) for x in reader.relationships["pre"][seg]} == set(
            np.flatnonzero(relationships["pre"] == seg).tolist())
        everything = list(reader.get_within_spatial_bounds())
        assert {int(x.id) for x in everything} == set(range(100))  # lines span cells


@pytest.mark.parametrize("kind", ["point", "ellipsoid", "polyline"])
def test_ngshard_reads_what_neuroglancer_wrote(tmp_path, kind):
    rng = np.random.default_rng(2)
    space = ng.CoordinateSpace(names=["x", "y", "z"], units="nm", scales=[4, 4, 40])
    props = [ng.AnnotationPropertySpec(id="size", type="float32"),
             ng.AnnotationPropertySpec(id="kind", type="uint16"),
             ng.AnnotationPropertySpec(id="tint", type="rgb"),
             ng.AnnotationPropertySpec(id="flag", type="int8", enum_values=[0, 1],
                                       enum_labels=["no", "yes"])]
    writer = AnnotationWriter(space, kind, relationships=["syn"], properties=props)
    expected = {}
    for i in range(60):
        p = rng.uniform(0, 50, 3)
        values = dict(size=float(rng.random()), kind=int(rng.integers(0, 9)),
                      tint=[int(x) for x in rng.integers(0, 255, 3)], flag=int(i % 2),
                      syn=[int(s) for s in rng.integers(1, 9, int(rng.integers(0, 3)))])
        if kind == "point":
            writer.add_point(p, id=1000 + i, **values)
            geom = p
        elif kind == "ellipsoid":
            r = rng.uniform(1, 3, 3)
            writer.add_ellipsoid(p, r, id=1000 + i, **values)
            geom = np.concatenate([p, r])
        else:
            pts = rng.uniform(0, 50, (int(rng.integers(2, 5)), 3))
            writer.add_polyline(pts, id=1000 + i, **values)
            geom = pts
        expected[1000 + i] = (np.asarray(geom, np.float32), values)
    writer.write(tmp_path / "ng")
    a = ngshard.open(tmp_path / "ng")
    assert a.type == kind and a.relationships == ["syn"]
    got = a.get_many(list(expected))
    for k, (geom, values) in expected.items():
        x = got[k]
        np.testing.assert_allclose(x.geometry.reshape(geom.shape), geom)
        assert x.properties["size"] == np.float32(values["size"])
        assert x.properties["kind"] == values["kind"]
        assert x.properties["tint"].tolist() == values["tint"]
        assert x.properties["flag"] == values["flag"]
        assert sorted(x.relationships["syn"].tolist()) == sorted(values["syn"])
    assert sorted(a.query().ids.tolist()) == sorted(expected)
    seg = expected[1000][1]["syn"][0] if expected[1000][1]["syn"] else 1
    # neuroglancer's writer lists an annotation once per mention of the segment
    want = sorted(k for k, (_, v) in expected.items() for s in v["syn"] if s == seg)
    assert sorted(a.related("syn", seg).ids.tolist()) == want
