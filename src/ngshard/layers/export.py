"""Layer objects as files other tools read: skeletons as SWC, meshes as OBJ or binary PLY,
anything as JSON. Pure: objects in, bytes or JSON-ready dicts out."""

from __future__ import annotations

from typing import Any

import numpy as np

# SWC structure identifiers (0 = undefined) come from a ``vertex_types`` attribute if any.
_SWC_TYPES = ("vertex_types", "types", "swc_type")


def bfs_parents(n: int, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A spanning forest of the undirected graph: (order, parent), ``order`` visiting every
    vertex breadth first from the lowest unvisited one (each parent before its children),
    ``parent[v]`` the vertex ``v`` was reached from, -1 for roots. Level by level, vectorized."""
    e = np.asarray(edges, np.int64).reshape(-1, 2)
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    by = np.argsort(src, kind="stable")
    src, dst = src[by], dst[by]
    vertices = np.arange(n)
    first, last = np.searchsorted(src, vertices), np.searchsorted(src, vertices, "right")
    parent = np.full(n, -2, np.int64)  # -2: not reached yet
    order: list[np.ndarray] = []
    unvisited = 0
    while True:
        left = np.flatnonzero(parent[unvisited:] == -2)
        if not len(left):
            break
        root = unvisited + int(left[0])
        unvisited = root + 1
        parent[root] = -1
        frontier = np.array([root])
        while len(frontier):
            order.append(frontier)
            counts = last[frontier] - first[frontier]
            at = np.repeat(first[frontier] - (np.cumsum(counts) - counts), counts) + \
                np.arange(int(counts.sum()))
            reached, came_from = dst[at], np.repeat(frontier, counts)
            new = parent[reached] == -2
            reached, pick = np.unique(reached[new], return_index=True)
            parent[reached] = came_from[new][pick]
            frontier = reached
    return (np.concatenate(order) if order else np.zeros(0, np.int64)), parent


def skeleton_swc(skeleton: Any) -> str:
    """SWC text of a skeleton (``n type x y z radius parent``, 1-based, parents first);
    radius and type from the ``radius`` and ``vertex_types`` attributes, 0 without them."""
    v = skeleton.vertices
    n = len(v)
    order, parent = bfs_parents(n, skeleton.edges)
    number = np.empty(n, np.int64)
    number[order] = np.arange(1, n + 1)
    radius = skeleton.attributes.get("radius")
    radius = np.zeros(n) if radius is None else np.asarray(radius, np.float64).reshape(n, -1)[:, 0]
    types = next((skeleton.attributes[a] for a in _SWC_TYPES if a in skeleton.attributes),
                 np.zeros(n))
    types = np.asarray(types).reshape(n, -1)[:, 0].astype(np.int64)
    p = parent[order]
    rows = np.empty((n, 7), object)
    rows[:, 0] = np.arange(1, n + 1)
    rows[:, 1] = types[order]
    rows[:, 2:5] = v[order].astype(np.float64)
    rows[:, 5] = radius[order]
    rows[:, 6] = np.where(p < 0, -1, number[np.maximum(p, 0)])
    head = f"# skeleton of segment {skeleton.id} (ngshard)\n# n T x y z R P\n"
    return head + ("%d %d %.6g %.6g %.6g %.6g %d\n" * n) % tuple(rows.reshape(-1))


def mesh_obj(vertices: np.ndarray, faces: np.ndarray, comment: str = "") -> str:
    """Wavefront OBJ text of a triangle mesh."""
    v = np.asarray(vertices, np.float64).reshape(-1)
    f = (np.asarray(faces, np.int64) + 1).reshape(-1)
    head = f"# {comment}\n" if comment else ""
    return (head + ("v %.9g %.9g %.9g\n" * (len(v) // 3)) % tuple(v)
            + ("f %d %d %d\n" * (len(f) // 3)) % tuple(f))


def mesh_ply(vertices: np.ndarray, faces: np.ndarray, comment: str = "") -> bytes:
    """Binary little-endian PLY of a triangle mesh (float32 vertices, int32 indices)."""
    v = np.ascontiguousarray(vertices, "<f4").reshape(-1, 3)
    f = np.asarray(faces).reshape(-1, 3)
    face = np.empty(len(f), [("n", "u1"), ("i", "<i4", 3)])
    face["n"], face["i"] = 3, f
    head = ["ply", "format binary_little_endian 1.0"]
    head += [f"comment {comment}"] if comment else []
    head += [f"element vertex {len(v)}", "property float x", "property float y",
             "property float z", f"element face {len(f)}",
             "property list uchar int vertex_indices", "end_header", ""]
    return "\n".join(head).encode() + v.tobytes() + face.tobytes()


def to_jsonable(value: Any) -> Any:
    """numpy arrays and scalars (inside dicts and lists) as JSON-ready lists and numbers."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return value
