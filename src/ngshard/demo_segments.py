"""What the demo shows of its segments besides their voxels, skeletons and meshes (those are
``ngshard.mesh``'s): synapse-like point annotations on the membranes between two cells (with
a score, a kind, and the two cells as relationships), and segment properties (a label, a
size, tags) so that the segment list is searchable.

Everything is computed from the demo's cell array with numpy, deterministically (a seeded
generator).
"""

from __future__ import annotations

import numpy as np

#: Synapses written, and their kinds (an enum property).
SYNAPSES = 600
KINDS = ("excitatory", "inhibitory")


def synapses(rng: np.random.Generator, labels: np.ndarray, n: int = SYNAPSES) -> dict:
    """``n`` points (voxel coordinates) on membranes between two cells along x, with
    properties (``score`` in [0, 1), ``kind`` of :data:`KINDS`) and relationships
    (``pre_synaptic_cell``, ``post_synaptic_cell``): the keyword arguments of
    :func:`ngshard.write_annotations` for a point collection."""
    boundary = np.argwhere(labels[:-1] != labels[1:])
    picked = boundary[rng.choice(len(boundary), min(n, len(boundary)), replace=False)]
    picked = picked[np.lexsort(picked.T[::-1])]  # in voxel order: the same bytes each run
    after = picked + [1, 0, 0]
    pre, post = labels[tuple(picked.T)], labels[tuple(after.T)]
    swap = rng.random(len(picked)) < 0.5  # either side may be the presynaptic one
    pre, post = np.where(swap, post, pre), np.where(swap, pre, post)
    points = picked.astype(np.float32) + [1.0, 0.5, 0.5]  # on the face between the voxels
    return {"geometry": points,
            "properties": {
                "score": {"values": rng.random(len(points)).astype(np.float32),
                          "description": "detection confidence"},
                "kind": {"values": rng.integers(0, len(KINDS), len(points)).astype(np.uint8),
                         "enum_values": list(range(len(KINDS))), "enum_labels": list(KINDS),
                         "description": "synapse type"}},
            "relationships": {"pre_synaptic_cell": pre, "post_synaptic_cell": post}}


def cell_properties(labels: np.ndarray, cells: np.ndarray, synapse_cells: np.ndarray
                    ) -> dict:
    """Segment properties of the cells present in ``labels``: a label (``cell N``, N its
    rank by size), the voxel count, and tags (``large`` or ``small``, ``connected`` when a
    synapse names it): the keyword arguments of :func:`ngshard.write_segment_properties`."""
    ids, counts = np.unique(labels, return_counts=True)
    keep = np.isin(ids, cells)
    ids, counts = ids[keep], counts[keep]
    rank = np.empty(len(ids), np.intp)
    rank[np.argsort(-counts, kind="stable")] = np.arange(len(ids))
    median = np.median(counts)
    connected = np.isin(ids, synapse_cells)
    tags = [["large" if c >= median else "small"] + (["connected"] if k else [])
            for c, k in zip(counts.tolist(), connected.tolist())]
    return {"ids": ids, "labels": [f"cell {r + 1}" for r in rank.tolist()],
            "numbers": {"voxels": counts.astype(np.int32)}, "tags": tags,
            "tag_descriptions": {"large": "at least the median size",
                                 "small": "below the median size",
                                 "connected": "has a synapse"}}
