"""Sample meshes for the mesh tests: closed UV spheres at several resolutions."""

from __future__ import annotations

import numpy as np


def sphere(rings: int, radius: float, centre) -> tuple[np.ndarray, np.ndarray]:
    """A closed sphere: ``rings`` latitude rings of ``2 * rings`` vertices, plus two poles."""
    theta = np.linspace(0, np.pi, rings + 2)[1:-1]
    phi = np.linspace(0, 2 * np.pi, 2 * rings, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    ring = np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], -1).reshape(-1, 3)
    v = np.concatenate([[[0, 0, 1]], ring, [[0, 0, -1]]]) * radius + np.asarray(centre)
    m = 2 * rings
    j = np.arange(m)
    faces = [np.stack([np.zeros(m, int), 1 + j, 1 + (j + 1) % m], 1)]
    for i in range(rings - 1):
        a, b = 1 + i * m + j, 1 + i * m + (j + 1) % m
        c, d = a + m, b + m
        faces += [np.stack([a, c, b], 1), np.stack([b, c, d], 1)]
    last = 1 + (rings - 1) * m
    faces.append(np.stack([last + j, np.full(m, len(v) - 1), last + (j + 1) % m], 1))
    return v, np.concatenate(faces)


def lods(k: int):
    """Three LODs of segment ``k``'s sphere, finest first."""
    centre = (40 + 7 * k, 30 + 3 * k, 20 + k)
    return [sphere(r, 8 + k, centre) for r in (24, 12, 6)]


def area(vertices: np.ndarray, faces: np.ndarray) -> float:
    v = np.asarray(vertices, np.float64)[np.asarray(faces, np.int64)]
    return float(np.linalg.norm(np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0]), axis=1).sum()
                 / 2)
