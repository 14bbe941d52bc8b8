"""add_scale on a sparse volume: the work follows the chunks present, not the volume's bounds."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from ngshard.volume import create_volume, open_volume

SHAPE = (2048, 2048, 512)  # 32 x 32 x 8 chunks of 64^3: 8,192 fine, 1,024 coarse at 2x2x2
CHUNK = 64
WRITTEN = (5, 9, 3)  # the one fine chunk present (grid position)


@pytest.fixture
def traffic(spy_chunk_stores):
    """Chunk positions asked for (get) and staged (put), by the grid shape of the scale, on
    both kinds of chunk store."""
    seen = {"get": collections.Counter(), "put": collections.Counter()}

    def count(op, store, positions):
        seen[op][store.grid.shape] += len(positions)

    spy_chunk_stores(count)
    return seen


@pytest.mark.parametrize("sharding", [None, "auto"])
@pytest.mark.parametrize("factor", [(2, 2, 2), (2, 2, 1)])
def test_add_scale_on_a_sparse_volume_touches_only_what_the_data_reaches(
        tmp_path, traffic, sharding, factor):
    rng = np.random.default_rng(1)
    data = rng.integers(1, 256, (CHUNK,) * 3, dtype=np.uint8)  # no zeros: every mean is > 0
    lo = np.array(WRITTEN) * CHUNK
    box = tuple(slice(a, a + CHUNK) for a in lo)
    with create_volume(tmp_path, dtype="uint8", shape=SHAPE, chunk_size=(CHUNK,) * 3,
                       resolution=(4, 4, 40), sharding=sharding) as vol:
        vol[box] = data
    fine = open_volume(tmp_path)
    f = np.array(factor)
    traffic["get"].clear(), traffic["put"].clear()
    coarse = fine.add_scale(factor)

    # the one coarse chunk the data reaches, and nothing else: no all-zero chunks stored
    expected = lo // f // CHUNK
    np.testing.assert_array_equal(coarse.encoded().list_positions(), [expected])
    reopened = open_volume(tmp_path, 1)
    np.testing.assert_array_equal(reopened.encoded().list_positions(), [expected])
    assert traffic["put"] == {coarse.grid.shape: 1}
    # reads: at most the fine chunks under that coarse chunk (8 for 2x2x2, 4 for 2x2x1), not
    # the 8,192 of the grid
    assert traffic["get"][fine.grid.shape] <= int(np.prod(f))
    assert sum(traffic["get"].values()) <= int(np.prod(f))

    # values: a numpy block mean of the written data, zeros elsewhere
    small = tuple(CHUNK // n for n in factor)
    means = data.reshape(small[0], factor[0], small[1], factor[1], small[2], factor[2])
    expect = np.rint(means.mean(axis=(1, 3, 5), dtype=np.float64)).astype(np.uint8)
    c_lo = lo // f
    window = tuple(slice(a - 16, a + n + 16) for a, n in zip(c_lo, small))
    got = reopened[window][..., 0]
    inner = tuple(slice(16, 16 + n) for n in small)
    np.testing.assert_array_equal(got[inner], expect)
    got[inner] = 0
    assert not got.any()

    # zero the fine data and redo the scale: the stale coarse chunk must not survive
    with open_volume(tmp_path, mode="r+") as vol:
        vol[box] = 0
    traffic["get"].clear(), traffic["put"].clear()
    coarse = open_volume(tmp_path).add_scale(factor)
    assert sum(traffic["put"].values()) <= 1
    assert sum(traffic["get"].values()) <= int(np.prod(f))
    assert len(coarse.encoded().list_positions()) <= 1  # zeroed in place, or removed
    assert not open_volume(tmp_path, 1)[window].any()
