"""The batch skeleton encoder against the format's definition, one skeleton at a time."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ngshard.layers.skeleton_codec import VertexAttribute, decode_skeleton, encode_skeletons

SPEC = [VertexAttribute("radius", "float32", 1), VertexAttribute("types", "uint8", 1),
        VertexAttribute("normal", "int16", 3), VertexAttribute("labels", "uint32", 2),
        VertexAttribute("weight", "int8", 5)]


def reference(vertices, edges, attributes, spec) -> bytes:
    """One skeleton as the format defines it: counts, positions, edges, then attributes."""
    v = np.asarray(vertices).astype("<f4")
    e = np.asarray(edges).reshape(-1, 2).astype("<u4")
    out = struct.pack("<II", len(v), len(e)) + v.tobytes() + e.tobytes()
    for a in spec:
        out += np.asarray(attributes[a.id]).astype(a.dtype).tobytes()
    return out


def random_skeletons(rng, count, spec):
    items = []
    for k in range(count):
        n = int(rng.choice([0, 1, 2, int(rng.integers(3, 300))]))
        m = 0 if n < 2 or rng.random() < 0.2 else int(rng.integers(1, 2 * n))
        # inputs of other dtypes than stored: the encoder converts them
        v = rng.normal(0, 1e3, (n, 3)).astype(rng.choice([np.float32, np.float64]))
        e = rng.integers(0, max(n, 1), (m, 2)).astype(rng.choice([np.uint32, np.int64]))
        if m == 0 and rng.random() < 0.5:
            e = np.zeros(0, np.int64)  # no edges given as a flat empty array
        attrs = {}
        for a in spec:
            shape = (n,) if a.num_components == 1 else (n, a.num_components)
            info = np.iinfo(a.dtype) if a.dtype.kind in "iu" else None
            attrs[a.id] = rng.uniform(0, 9, shape).astype(a.dtype) if info is None else \
                rng.integers(info.min, info.max, shape, endpoint=True).astype(a.dtype)
        if spec and n and rng.random() < 0.3:
            attrs[spec[0].id] = attrs[spec[0].id].astype(np.float64)  # converted on the way
        items.append((1000 + k, v, e, attrs))
    return items


@pytest.mark.parametrize("spec", [SPEC, SPEC[:1], []], ids=["five", "radius", "none"])
def test_batch_matches_one_skeleton_at_a_time(spec):
    rng = np.random.default_rng(25)
    items = random_skeletons(rng, 400, spec)
    got = encode_skeletons(items, spec)
    assert len(got) == len(items)
    for (key, v, e, attrs), value in zip(items, got):
        assert isinstance(value, bytes)
        assert value == reference(v, e, attrs, spec), key
        vertices, edges, decoded = decode_skeleton(value, spec, f"segment {key}")
        assert vertices.shape == (len(v), 3)
        assert np.array_equal(edges, np.asarray(e).reshape(-1, 2))
        for a in spec:
            assert np.array_equal(decoded[a.id].reshape(-1),
                                  np.asarray(attrs[a.id]).astype(a.dtype).reshape(-1))


def test_batches_of_one_and_none():
    rng = np.random.default_rng(7)
    items = random_skeletons(rng, 30, SPEC)
    assert [encode_skeletons([item], SPEC)[0] for item in items] == \
        encode_skeletons(items, SPEC)
    assert encode_skeletons([], SPEC) == []
