"""Damaged jpeg chunks: ngshard decodes those tensorstore (libjpeg) decodes, to the same voxels,
and rejects the rest with CorruptDataError naming the chunk. One difference: a file cut after
the last byte of its image data (its end marker lost) decodes here, to the undamaged image,
where tensorstore's lookahead past the data makes it refuse the file: with the end marker
restored, tensorstore decodes it to the same voxels."""

from __future__ import annotations

import numpy as np
import pytest
import tensorstore as ts
from peers import PEER_TIMEOUT

import ngshard

SHAPE = (32, 16, 4)


def ts_read(spec: dict) -> np.ndarray | None:
    try:
        store = ts.open(spec, context=ts.Context()).result(timeout=PEER_TIMEOUT)
        return store.read().result(timeout=PEER_TIMEOUT)
    except ValueError:
        return None


@pytest.mark.parametrize("channels", [1, 3])
def test_damaged_jpeg_chunks_agree_with_tensorstore(tmp_path, channels):
    rng = np.random.default_rng(channels)
    grad = np.add.outer(np.arange(SHAPE[0]), np.arange(SHAPE[1]))[..., None, None] * 3
    data = ((grad + rng.integers(0, 40, (*SHAPE, channels))) % 256).astype(np.uint8)
    with ngshard.create_volume(tmp_path, dtype="uint8", shape=(*SHAPE, channels),
                               chunk_size=SHAPE, encoding="jpeg") as vol:
        vol[:] = data
    path = tmp_path / vol.scale.key / vol.grid.chunk_names([[0, 0, 0]])[0]
    good = path.read_bytes()
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}",
            "recheck_cached_data": False}
    outcomes = {"both decode": 0, "both reject": 0, "cut after the data": 0}
    for case in range(300):
        damaged = bytearray(good)
        for _ in range(1 + case % 3):
            damaged[rng.integers(0, len(good))] ^= int(rng.integers(1, 256))
        if case % 4 == 0:
            damaged = damaged[:len(damaged) - int(rng.integers(1, 200))]
        path.write_bytes(bytes(damaged))
        theirs = ts_read(spec)
        try:
            ours = ngshard.open_volume(tmp_path)[:]
        except ngshard.CorruptDataError as e:
            assert path.name in str(e)
            ours = None
        if ours is not None and theirs is None:
            assert case % 4 == 0 and not damaged.endswith(b"\xff\xd9"), f"case {case}"
            path.write_bytes(bytes(damaged) + b"\xff\xd9")
            np.testing.assert_array_equal(ours, ts_read(spec))
            outcomes["cut after the data"] += 1
            continue
        assert (ours is None) == (theirs is None), f"case {case}: only tensorstore decoded"
        if ours is not None:
            np.testing.assert_array_equal(ours, theirs)
        outcomes["both reject" if ours is None else "both decode"] += 1
    assert outcomes["both decode"] > 10 and outcomes["both reject"] > 10, outcomes
    assert outcomes["cut after the data"] < 10, outcomes


@pytest.mark.parametrize("tail", [b"\xff\xc0\x00\x11", b"\xff\xd8", b"\xff\xdb\x00\x01",
                                  b"\xff\xe0\x7f\xff", b"\xff\xc4\x00\x05\x01", b"\xff\x01"])
def test_damaged_markers_after_the_scan_are_not_read(tmp_path, tail):
    """tensorstore stops after the last scanline: a damaged marker where the end marker was
    (a second SOF or SOI, a segment longer than the file) is never read, here neither."""
    rng = np.random.default_rng(7)
    data = rng.integers(0, 256, (*SHAPE, 3), dtype=np.uint8)
    with ngshard.create_volume(tmp_path, dtype="uint8", shape=(*SHAPE, 3), chunk_size=SHAPE,
                               encoding="jpeg") as vol:
        vol[:] = data
    path = tmp_path / vol.scale.key / vol.grid.chunk_names([[0, 0, 0]])[0]
    good = path.read_bytes()
    assert good.endswith(b"\xff\xd9")
    spec = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{tmp_path}"}
    want = ts_read(spec)
    path.write_bytes(good[:-2] + tail)
    np.testing.assert_array_equal(ts_read(spec), want)
    np.testing.assert_array_equal(ngshard.open_volume(tmp_path)[:], want)
