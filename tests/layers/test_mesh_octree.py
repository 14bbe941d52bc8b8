"""Cutting a mesh into the octree fragments of one level of detail: the cut mesh stays closed
with its area and volume, no triangle crosses a plane, each cut edge gets one new vertex;
the fragments are exactly those of a plain per-node reference (each node's vertices the
ones its triangles use, ascending, quantized; flat triangles dropped; nodes in Z-curve
order), whichever way the vertices of the nodes are found (a table of (node, vertex)
pairs, or a sort where that table would be large: a mesh of many vertices its triangles
do not use)."""

from __future__ import annotations

import numpy as np
import pytest
from meshdata import sphere

from ngshard.layers.mesh_octree import fragments, split_at_grid, zorder


def _closed_measures(v, f):
    """Area, volume and the edges not shared by exactly two triangles (welded exactly)."""
    _, inverse = np.unique(v, axis=0, return_inverse=True)
    g = inverse.reshape(-1)[f]
    edges = np.sort(np.concatenate([g[:, [0, 1]], g[:, [1, 2]], g[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    area = np.linalg.norm(np.cross(b - a, c - a), axis=1).sum() / 2
    volume = np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6
    return area, volume, int((counts != 2).sum())


def _reference(v, f, origin, node_size, bits):
    """The fragments of an already cut mesh, one node at a time."""
    centroid = v[f].mean(axis=1)
    node = np.maximum(np.floor((centroid - origin) / node_size), 0).astype(np.int64)
    nodes = np.unique(node, axis=0)
    nodes = nodes[np.argsort(zorder(nodes), kind="stable")]
    top = (1 << bits) - 1
    out = []
    for n in nodes:
        mine = f[(node == n).all(axis=1)]
        used = np.unique(mine)
        q = np.clip(np.rint((v[used] - origin - n * node_size) / node_size * top), 0, top)
        local = np.searchsorted(used, mine)
        c = q[local]
        flat = (c[:, 0] == c[:, 1]).all(1) | (c[:, 1] == c[:, 2]).all(1) | \
            (c[:, 0] == c[:, 2]).all(1)
        out.append((q, local[~flat]))
    return nodes, out


def _same(got, want):
    (pos, frags), (ref_pos, ref_frags) = got, want
    np.testing.assert_array_equal(pos, ref_pos)
    assert len(frags) == len(ref_frags)
    for (q, faces), (rq, rfaces) in zip(frags, ref_frags):
        np.testing.assert_array_equal(q, rq)
        np.testing.assert_array_equal(faces, rfaces)


@pytest.mark.parametrize("cells", [1, 2, 5])
def test_cut_mesh_stays_closed(cells):
    v, f = sphere(20, 9.0, (10.3, 11.1, 9.7))
    origin = np.array([1.0, 2.0, 0.5])
    size = np.full(3, 19.0 / cells)
    cv, cf = split_at_grid(v, f, origin, size)
    c = (cv[cf] - origin) / size
    # no triangle crosses a plane: its corners lie within one cell (planes included)
    assert (np.ceil(c.max(axis=1) - 1e-9) - 1 <= np.floor(c.min(axis=1) + 1e-9)).all()
    area, volume, open_edges = _closed_measures(v, f)
    cut_area, cut_volume, cut_open = _closed_measures(cv, cf)
    assert open_edges == 0 and cut_open == 0  # each cut edge got one vertex, shared
    assert cut_area == pytest.approx(area, rel=1e-9)
    assert cut_volume == pytest.approx(volume, rel=1e-9)
    if cells == 1:
        assert len(cf) == len(f)
    else:
        assert len(cf) > len(f) and len(np.unique(cv, axis=0)) == len(cv)


@pytest.mark.parametrize("cells, bits", [(1, 16), (3, 16), (4, 10)])
def test_fragments_are_the_plain_per_node_ones(cells, bits):
    v, f = sphere(16, 9.0, (10.3, 11.1, 9.7))
    origin = np.array([1.0, 2.0, 0.5])
    node = np.full(3, 19.0 / cells)
    cv, cf = split_at_grid(v, f, origin, node)
    _same(fragments(v, f, origin, node, node, bits), _reference(cv, cf, origin, node, bits))


def test_fragments_of_a_mesh_of_many_unused_vertices():
    """Nodes times vertices past the table: the vertices found by sorting instead."""
    v, f = sphere(16, 9.0, (10.3, 11.1, 9.7))
    unused = np.random.default_rng(0).uniform(0, 20, (1 << 20, 3))
    v = np.concatenate([unused, v])
    f = f + len(unused)
    origin, node = np.array([1.0, 2.0, 0.5]), np.full(3, 19.0 / 3)
    cv, cf = split_at_grid(v, f, origin, node)
    got = fragments(v, f, origin, node, node, 16)
    assert len(got[0]) > 1
    _same(got, _reference(cv, cf, origin, node, 16))


def test_zorder():
    p = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [3, 2, 1], [2**20, 0, 1]])
    expected = [0, 1, 2, 4, 0b011101, 1 << 60 | 4]
    assert zorder(p).tolist() == expected
    assert zorder(np.zeros((0, 3), np.int64)).tolist() == []
