"""Downsampling reductions against brute force on random blocks."""

from __future__ import annotations

import collections

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ngshard.volume.downsample import downsample_mean, downsample_mode


@settings(max_examples=60, deadline=None)
@given(st.tuples(*[st.integers(1, 7)] * 3), st.tuples(*[st.integers(1, 3)] * 3),
       st.integers(1, 2), st.integers(0, 2**31))
def test_mode_and_mean_match_brute_force(shape, factor, channels, seed):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 4, (*shape, channels)).astype(np.uint64)
    mode, mean = downsample_mode(data, factor), downsample_mean(data.astype(np.uint8), factor)
    out_shape = tuple(-(-s // f) for s, f in zip(shape, factor))
    assert mode.shape == mean.shape == (*out_shape, channels)
    for x, y, z, c in np.ndindex(*out_shape, channels):
        lo = np.array([x, y, z]) * factor
        # edge blocks repeat their last voxel, as the padding does
        idx = [np.minimum(np.arange(lo[d], lo[d] + factor[d]), shape[d] - 1) for d in range(3)]
        block = data[np.ix_(*idx, [c])].ravel()
        counts = collections.Counter(block.tolist())
        best = max(counts.values())
        assert mode[x, y, z, c] == min(v for v, n in counts.items() if n == best)
        assert mean[x, y, z, c] == np.rint(block.astype(float).mean())
