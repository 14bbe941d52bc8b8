"""Downsampling reductions against brute force on random blocks, and against tensorstore's
``downsample`` driver (the same blocks, the same edges, the same rounding and ties)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorstore as ts
from hypothesis import given, settings
from hypothesis import strategies as st
from peers import PEER_TIMEOUT

from ngshard.errors import SpecError
from ngshard.volume.downsample import downsample


def _brute(data, factor, origin, method, sparse=False):
    shape = data.shape[:3]
    lo = [o // f for o, f in zip(origin, factor)]
    hi = [-(-(o + n) // f) for o, n, f in zip(origin, shape, factor)]
    out = np.zeros((*[b - a for a, b in zip(lo, hi)], data.shape[3]), data.dtype)
    for x, y, z, c in np.ndindex(out.shape):
        idx = []
        for d, i in enumerate((x, y, z)):
            a = (lo[d] + i) * factor[d] - origin[d]
            idx.append(np.arange(max(a, 0), min(a + factor[d], shape[d])))
        block = data[np.ix_(*idx, [c])].ravel()
        if method == "mean":
            out[x, y, z, c] = np.rint(block.astype(float).mean())
        elif method == "min":
            out[x, y, z, c] = block.min()
        elif method == "max":
            out[x, y, z, c] = block.max()
        elif method == "stride":
            out[x, y, z, c] = block[0]
        else:
            counts = collections.Counter(v for v in block.tolist() if not (sparse and v == 0))
            if not counts:
                continue
            best = max(counts.values())
            out[x, y, z, c] = min(v for v, n in counts.items() if n == best)
    return out


@settings(max_examples=60, deadline=None)
@given(st.tuples(*[st.integers(1, 7)] * 3), st.tuples(*[st.integers(1, 5)] * 3),
       st.tuples(*[st.integers(0, 9)] * 3), st.integers(1, 2), st.integers(0, 2**31),
       st.sampled_from(["mean", "mode", "sparse", "min", "max", "stride"]))
def test_methods_match_brute_force(shape, factor, origin, channels, seed, method):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 4, (*shape, channels)).astype(np.uint8 if method == "mean"
                                                         else np.uint64)
    sparse = method == "sparse"
    method = "mode" if sparse else method
    got = downsample(data, factor, method, origin=origin, sparse=sparse)
    np.testing.assert_array_equal(got, _brute(data, factor, origin, method, sparse))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int8, np.int16, np.uint32, np.int32,
                                   np.uint64, np.int64, np.float32])
@pytest.mark.parametrize("method", ["mean", "mode", "min", "max"])
@pytest.mark.parametrize("factor", [(2, 2, 1), (2, 2, 2), (3, 1, 2), (4, 4, 4)])
def test_equals_tensorstore(dtype, method, factor):
    rng = np.random.default_rng(7)
    shape, origin = (13, 10, 7, 2), (5, 3, 1, 0)
    if np.dtype(dtype).kind == "f":
        data = rng.random(shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        span = 3 if method == "mode" else None
        data = (rng.integers(0, span, shape) if span else
                rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True))
        data = data.astype(dtype)
    base = ts.array(data)[ts.d[:].translate_to[origin]]
    want = ts.downsample(base, [*factor, 1], method)
    assert list(want.domain.inclusive_min[:3]) == [o // f for o, f in zip(origin, factor)]
    got = downsample(data, factor, method, origin=origin[:3])
    np.testing.assert_array_equal(got, want.read().result(timeout=PEER_TIMEOUT))


@pytest.mark.parametrize("view", ["reversed", "transposed", "stepped"])
@pytest.mark.parametrize("method", ["mean", "mode"])
def test_any_strides_equal_tensorstore(view, method):
    """Integer means and modes run compiled over the array's own strides: views in any
    memory order give tensorstore's values (modes: negative labels and ties too)."""
    rng = np.random.default_rng(3)
    whole = rng.integers(-2**31, 2**31, (12, 14, 10, 2), dtype=np.int64).astype(np.int32) \
        if method == "mean" else rng.integers(-2, 2, (12, 14, 10, 2), dtype=np.int64)
    data = {"reversed": whole[::-1, :, ::-1], "transposed": whole.transpose(1, 0, 2, 3),
            "stepped": whole[1::2, ::3, 1:]}[view]
    want = ts.downsample(ts.array(np.ascontiguousarray(data))[ts.d[:].translate_to[1, 2, 3, 0]],
                         [2, 3, 2, 1], method).read().result(timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(downsample(data, (2, 3, 2), method, origin=(1, 2, 3)), want)


def test_sparse_modes_of_large_blocks_equal_brute_force():
    """Blocks of 64 voxels (the compiled modes' largest) and of 128 (numpy's), sparse and
    not: a block of zeros and one label keeps the label unless it is all zeros."""
    rng = np.random.default_rng(5)
    data = np.where(rng.random((16, 16, 8, 1)) < 0.9, 0, rng.integers(1, 4, (16, 16, 8, 1)))
    data[:4, :4, :4] = 0  # one block of background only
    for factor in ((4, 4, 4), (8, 4, 4)):
        for sparse in (False, True):
            np.testing.assert_array_equal(downsample(data, factor, "mode", sparse=sparse),
                                          _brute(data, factor, (0, 0, 0), "mode", sparse))


def test_stride_equals_tensorstore_from_aligned_origin():
    data = np.arange(7 * 5 * 3, dtype=np.uint32).reshape(7, 5, 3, 1)
    want = ts.downsample(ts.array(data), [2, 3, 2, 1], "stride").read().result(timeout=PEER_TIMEOUT)
    np.testing.assert_array_equal(downsample(data, (2, 3, 2), "stride"), want)


def test_bad_method_or_sparse_is_a_spec_error():
    data = np.zeros((4, 4, 4, 1), np.uint8)
    with pytest.raises(SpecError, match="median"):
        downsample(data, (2, 2, 2), "median")
    with pytest.raises(SpecError, match="sparse"):
        downsample(data, (2, 2, 2), "mean", sparse=True)
