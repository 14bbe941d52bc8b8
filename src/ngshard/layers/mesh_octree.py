"""Cutting a triangle mesh into the octree fragments of one level of detail, vectorized.

A LOD's fragments are the nodes of a grid of ``node_size`` boxes; for LOD > 0 the spec also
wants every fragment partitioned by its 2x2x2 children, so that level is cut at the grid of
half its node size. Cutting splits every triangle that crosses a grid plane into triangles
on either side (one plane per triangle per pass, all triangles at once, until none crosses);
the new vertices on a cut edge are shared by the triangles on both sides. Each triangle then
belongs to the node holding its centroid, and its vertices are quantized to the node's
``2**bits - 1`` grid (a triangle left without area is dropped). Fragments come out in
Z-curve order (x the fastest bit).
"""

from __future__ import annotations

import numpy as np

_TOL = 1e-9  # in cells: a vertex this close to a plane lies on it


def split_at_grid(vertices: np.ndarray, faces: np.ndarray, origin: np.ndarray,
                  size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mesh with no triangle crossing a plane ``origin + k * size`` of any axis (a
    triangle may touch one)."""
    vertices = np.asarray(vertices, np.float64).reshape(-1, 3)
    faces = np.asarray(faces, np.int64).reshape(-1, 3)
    for axis in range(3):
        if len(vertices):  # every vertex within one cell: no triangle crosses a plane
            ends = (vertices[:, axis].min(), vertices[:, axis].max())
            c = (np.array(ends) - origin[axis]) / size[axis]
            if np.ceil(c[1] - _TOL) - 1 <= np.floor(c[0] + _TOL):
                continue
        while len(faces):
            c = (vertices[faces, axis] - origin[axis]) / size[axis]
            first = np.floor(c.min(axis=1) + _TOL)
            last = np.ceil(c.max(axis=1) - _TOL) - 1
            cross = last > first
            if not cross.any():
                break
            planes = origin[axis] + (first[cross] + 1) * size[axis]
            new_vertices, new_faces = _split(vertices, faces[cross], axis, planes,
                                             _TOL * size[axis])
            faces = np.concatenate([faces[~cross], new_faces])
            vertices = np.concatenate([vertices, new_vertices])
    return vertices, faces


def _split(vertices: np.ndarray, faces: np.ndarray, axis: int, planes: np.ndarray,
           tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Split each triangle by its plane ``x[axis] = planes[i]`` (which it crosses): the new
    vertices (numbered from ``len(vertices)``) and the triangles replacing them, each with the
    orientation of the triangle it came from."""
    d = vertices[faces, axis] - planes[:, None]
    s = np.where(np.abs(d) <= tol, 0, np.sign(d)).astype(np.int8)
    zero = s == 0
    on_plane = zero.any(axis=1)
    # Rotate each triangle so that it starts at its vertex on the plane, or else at the
    # vertex alone on its side: (A, B, C) keeps its orientation.
    lone = np.where(s[:, 0] == s[:, 1], 2, np.where(s[:, 0] == s[:, 2], 1, 0))
    start = np.where(on_plane, np.argmax(zero, axis=1), lone)
    rot = np.take_along_axis(faces, (start[:, None] + np.arange(3)) % 3, axis=1)
    a, b, c = rot.T
    two = ~on_plane  # A alone: cuts on AB and AC; else one cut on BC
    ends = np.concatenate([np.stack([a[two], b[two]], 1), np.stack([a[two], c[two]], 1),
                           np.stack([b[on_plane], c[on_plane]], 1)])
    edge_planes = np.concatenate([planes[two], planes[two], planes[on_plane]])
    lo, hi = ends.min(axis=1), ends.max(axis=1)
    # each cut edge once (np.unique(axis=0)'s order, sorted as three int64 columns)
    plane_bits = edge_planes.view(np.int64)
    order = np.lexsort((plane_bits, hi, lo))
    s_lo, s_hi, s_plane = lo[order], hi[order], plane_bits[order]
    first = np.ones(len(order), bool)
    first[1:] = (s_lo[1:] != s_lo[:-1]) | (s_hi[1:] != s_hi[:-1]) | \
        (s_plane[1:] != s_plane[:-1])
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.cumsum(first) - 1
    u_lo, u_hi = s_lo[first], s_hi[first]
    u_plane = s_plane[first].view(np.float64)
    d_lo = vertices[u_lo, axis] - u_plane
    d_hi = vertices[u_hi, axis] - u_plane
    t = d_lo / (d_lo - d_hi)
    points = vertices[u_lo] + t[:, None] * (vertices[u_hi] - vertices[u_lo])
    points[:, axis] = u_plane
    ids = inverse + len(vertices)
    k = int(two.sum())
    p_ab, p_ac, p_bc = ids[:k], ids[k:2 * k], ids[2 * k:]
    a2, b2, c2 = a[two], b[two], c[two]
    a1, b1, c1 = a[on_plane], b[on_plane], c[on_plane]
    new_faces = np.concatenate([
        np.stack([a2, p_ab, p_ac], 1), np.stack([p_ab, b2, c2], 1),
        np.stack([p_ab, c2, p_ac], 1),
        np.stack([a1, b1, p_bc], 1), np.stack([a1, p_bc, c1], 1)])
    return points, new_faces


def zorder(positions: np.ndarray) -> np.ndarray:
    """Z-curve codes of non-negative ``(n, 3)`` integer positions, x the lowest bit."""
    p = np.asarray(positions, np.uint64)
    code = np.zeros(len(p), np.uint64)
    one = np.uint64(1)
    for bit in range(min(21, int(p.max()).bit_length()) if p.size else 0):
        for axis in range(3):
            code |= ((p[:, axis] >> np.uint64(bit)) & one) << np.uint64(3 * bit + axis)
    return code


def fragments(vertices: np.ndarray, faces: np.ndarray, origin: np.ndarray,
              node_size: np.ndarray, cut_size: np.ndarray, bits: int
              ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """The octree fragments of one LOD: node positions ``(k, 3)`` in Z-curve order and per
    node (quantized positions ``(n, 3)`` in ``[0, 2**bits)``, faces ``(m, 3)``)."""
    v, f = split_at_grid(vertices, faces, origin, cut_size)
    if not len(f):
        return np.zeros((0, 3), np.uint32), []
    corners = v[f]
    centroid = (corners[:, 0] + corners[:, 1] + corners[:, 2]) / 3  # = mean, in that order
    node = np.maximum(np.floor((centroid - origin) / node_size), 0).astype(np.int64)
    if (node == node[0]).all():  # one node (a box's piece, a small segment): in order
        starts, rank = np.zeros(1, np.int64), np.zeros(len(f), np.int64)
    else:
        code = zorder(node)
        order = np.argsort(code, kind="stable")
        f, node, code = f[order], node[order], code[order]
        new = code[1:] != code[:-1]
        starts = np.concatenate([[0], np.flatnonzero(new) + 1])
        rank = np.concatenate([[0], np.cumsum(new)])  # node number of each triangle
    # the vertices each node uses, ascending by (node, vertex): marked in a table of
    # (node, vertex) pairs where that is small, else sorted
    corner_keys = (rank[:, None] * len(v) + f).reshape(-1)
    if len(starts) * len(v) <= max(1 << 20, 8 * corner_keys.size):
        used = np.zeros(len(starts) * len(v), bool)
        used[corner_keys] = True
        keys = np.flatnonzero(used)
        local = (np.cumsum(used) - 1)[corner_keys]
    else:
        keys, local = np.unique(corner_keys, return_inverse=True)
    owner = keys // len(v)
    first_key = np.searchsorted(owner, np.arange(len(starts)))
    local = local.reshape(-1, 3) - first_key[rank][:, None]
    top = (1 << bits) - 1
    vert_node = node[starts][owner]
    q = (v[keys % len(v)] - origin - vert_node * node_size) / node_size * top
    q = np.clip(np.rint(q), 0, top)
    # Triangles whose corners round to the same grid point have no area at this resolution
    # (Draco refuses a fragment of nothing else): they are dropped. (A grid point as one
    # integer: bits <= 16.)
    point = (q[:, 0].astype(np.int64) << 2 * bits) | (q[:, 1].astype(np.int64) << bits) | \
        q[:, 2].astype(np.int64)
    corner = point[local + first_key[rank][:, None]]
    flat = (corner[:, 0] == corner[:, 1]) | (corner[:, 1] == corner[:, 2]) | \
        (corner[:, 0] == corner[:, 2])
    bounds_v = np.append(first_key, len(keys))
    bounds_f = np.append(starts, len(f))
    out = [(q[bounds_v[i]:bounds_v[i + 1]],
            local[bounds_f[i]:bounds_f[i + 1]][~flat[bounds_f[i]:bounds_f[i + 1]]])
           for i in range(len(starts))]
    return node[starts].astype(np.uint32), out
