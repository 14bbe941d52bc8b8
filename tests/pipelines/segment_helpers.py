"""Segmentations made here for the meshing and skeletonizing tests, and the measures that
compare meshes and skeletons with those of the whole volume."""

from __future__ import annotations

import numpy as np

import ngshard

RESOLUTION = (4.0, 4.0, 8.0)
OFFSET = (10, -20, 30)
SPHERE, TUBE, CUBE, SHELL, CORE, FILLER = 5, 2**40 + 7, 9, 11, 12, 1


def blobs(shape=(96, 80, 64)) -> np.ndarray:
    """Labels crossing task boxes: a sphere, a tube through the whole volume (an id past
    2**32), a cube in a corner, a shell around a core, and a filler label everywhere else
    (it touches every box and fills some of them)."""
    x, y, z = np.ogrid[:shape[0], :shape[1], :shape[2]]
    labels = np.full(shape, FILLER, np.uint64)
    labels[(x - 40) ** 2 + (y - 38) ** 2 + ((z - 30) * 2) ** 2 < 22 ** 2] = SPHERE
    labels[((x - 12) ** 2 + (y - 14) ** 2 < 36) & (z >= 0)] = TUBE
    labels[84:, 68:, 52:] = CUBE
    labels[(x - 70) ** 2 + (y - 20) ** 2 + (z - 40) ** 2 < 10 ** 2] = SHELL
    labels[(x - 70) ** 2 + (y - 20) ** 2 + (z - 40) ** 2 < 6 ** 2] = CORE
    return labels


def tube(labels, label, points, r) -> None:
    """Paint a tube of radius ``r`` voxels along the polyline ``points`` with ``label``."""
    points = np.asarray(points, np.float64)
    for a, b in zip(points[:-1], points[1:]):
        for t in np.linspace(0, 1, int(np.linalg.norm(b - a)) * 2 + 2):
            c = a + t * (b - a)
            lo = np.maximum(np.floor(c - r).astype(int), 0)
            hi = np.minimum(np.ceil(c + r).astype(int) + 1, labels.shape)
            sl = tuple(slice(p, q) for p, q in zip(lo, hi))
            d = sum((g - c[i]) ** 2 for i, g in enumerate(np.ogrid[sl]))
            labels[sl][d <= r * r] = label


def wander(shape, seed=7, steps=40, step=6.0) -> np.ndarray:
    """A smooth random walk staying a few voxels inside ``shape`` (its points)."""
    rng = np.random.default_rng(seed)
    lo, hi = np.full(3, 5.0), np.asarray(shape, np.float64) - 6
    points, heading = [np.asarray(shape) / 2.0], rng.normal(size=3)
    for _ in range(steps):
        heading = heading / np.linalg.norm(heading) + rng.normal(scale=0.5, size=3)
        heading /= np.linalg.norm(heading)
        nxt = points[-1] + step * heading
        outside = (nxt < lo) | (nxt > hi)
        heading[outside] *= -1  # bounce off the walls
        points.append(np.clip(points[-1] + step * heading, lo, hi))
    return np.array(points)


#: The label of :func:`neurites`' wandering tube.
WANDERER = 300


def neurites(shape=(96, 80, 64)) -> np.ndarray:
    """Tubes of radius 2 to 3 voxels (what TEASAR is for) on background 0, crossing the
    planes of 32-voxel boxes at steep angles away from their edges: a straight one, a bent
    one, one with a branch, and one wandering through most boxes (:data:`WANDERER`)."""
    labels = np.zeros(shape, np.uint64)
    tube(labels, 101, [[0, 10, 12], [95, 50, 58]], 2.5)
    tube(labels, 102, [[10, 79, 5], [45, 42, 50], [90, 70, 20]], 2.0)
    tube(labels, 200, [[5, 44, 37], [90, 44, 37]], 3.0)
    tube(labels, 200, [[50, 44, 37], [50, 75, 60]], 2.5)
    return labels


def write_segmentation(path, labels, *, chunk=(32, 32, 32), encoding="compressed_segmentation",
                       sharding=None):
    vol = ngshard.create_volume(path, dtype=labels.dtype.name, shape=labels.shape,
                                layer_type="segmentation", encoding=encoding,
                                resolution=RESOLUTION, voxel_offset=OFFSET, chunk_size=chunk,
                                sharding=sharding)
    vol[...] = labels[..., None]
    vol.commit()
    return path


def label_zarr(path, label: int):
    """A zarr array (z, y, x int64, 20 voxels a side) holding a cube of ``label``."""
    import zarr

    z = zarr.create_array(str(path), shape=(20, 20, 20), dtype="int64", chunks=(10, 10, 10),
                          dimension_names=["z", "y", "x"], overwrite=True)
    data = np.zeros((20, 20, 20), np.int64)
    data[5:9, 5:9, 5:9] = label
    z[...] = data
    return path


def measures(vertices, faces, tol=1e-2):
    """Surface area, enclosed volume, and the number of edges not shared by exactly two
    triangles once vertices closer than ``tol`` are merged (0: closed)."""
    v = np.asarray(vertices, np.float64)
    f = np.asarray(faces, np.int64)
    _, inverse = np.unique(np.round(v / tol).astype(np.int64), axis=0, return_inverse=True)
    g = inverse.reshape(-1)[f]
    g = g[(g[:, 0] != g[:, 1]) & (g[:, 1] != g[:, 2]) & (g[:, 0] != g[:, 2])]
    edges = np.sort(np.concatenate([g[:, [0, 1]], g[:, [1, 2]], g[:, [2, 0]]]), axis=1)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    a, b, c = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
    area = np.linalg.norm(np.cross(b - a, c - a), axis=1).sum() / 2
    volume = np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6
    return float(area), float(volume), int((counts != 2).sum())


def whole_volume_meshes(labels):
    """zmesh over the whole volume (padded by one voxel: closed at its faces)."""
    import zmesh

    mesher = zmesh.Mesher(RESOLUTION)
    mesher.mesh(np.pad(labels, 1), close=False)
    return {int(k): mesher.get(k, normals=False, reduction_factor=0, max_error=0)
            for k in mesher.ids() if k}


def cable_length(vertices, edges) -> float:
    v = np.asarray(vertices, np.float64)
    e = np.asarray(edges, np.int64)
    return float(np.linalg.norm(v[e[:, 0]] - v[e[:, 1]], axis=1).sum())


def components(n, edges) -> int:
    """Connected components of a graph of ``n`` vertices."""
    parent = np.arange(n)

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in np.asarray(edges, np.int64).tolist():
        parent[find(a)] = find(b)
    return len({find(i) for i in range(n)})

