"""``ngshard.downsample``: near-isotropic factors as neuroglancer's rule gives them, every
level equal to tensorstore's ``downsample`` driver over the level above (voxel offsets that
are not multiples of the factor included), sparse mode as tinybrain's (igneous' kernels),
several levels per task writing whole shards, interrupt and resume, and the command line."""

from __future__ import annotations

from concurrent.futures import Executor, Future, ThreadPoolExecutor

import numpy as np
import pytest
import tensorstore as ts
from convert_helpers import Interrupting, files
from peers import PEER_TIMEOUT

import ngshard
from ngshard.volume.downsample import downsample
from ngshard.volume.factors import near_isotropic_factors, pyramid_factors

downsample_scales = pytest.importorskip("neuroglancer.downsample_scales")


@pytest.mark.parametrize("voxel", [(4, 4, 40),  # FAFB, MICrONS (minnie65 mip 0)
                                   (8, 8, 40),  # MICrONS (pinky, and minnie65 mip 1)
                                   (8, 8, 33),  # H01
                                   (406, 406, 406),  # isotropic light-sheet
                                   (0.5, 0.5, 2.0)])  # anisotropic light-sheet in um
def test_factors_follow_neuroglancers_rule(voxel):
    scales = downsample_scales.compute_near_isotropic_downsampling_scales(
        np.array([1 << 40] * 3), np.array(voxel, float), np.array([0, 1, 2]), max_scales=9,
        max_downsampling=float("inf"))
    want = [tuple(int(b // a) for a, b in zip(s, t)) for s, t in zip(scales, scales[1:])]
    assert near_isotropic_factors(voxel, 8) == want


def test_fafb_goes_planar_then_isotropic():
    assert near_isotropic_factors((4, 4, 40), 5) == [(2, 2, 1)] * 3 + [(2, 2, 2)] * 2
    # until the coarsest level fits in a chunk; an axis of one voxel stops shrinking
    assert pyramid_factors((1000, 1000, 3), (4, 4, 40), (64, 64, 64)) == \
        [(2, 2, 1)] * 3 + [(2, 2, 2)]
    assert pyramid_factors((1000, 1000, 1), (4, 4, 40), (64, 64, 64)) == [(2, 2, 1)] * 4


def _layer(path, data, *, offset, sharding, segmentation=False, chunk=(16, 16, 8)):
    vol = ngshard.create_volume(path, shape=data.shape, dtype=data.dtype, chunk_size=chunk,
                                resolution=(4, 4, 40), voxel_offset=offset,
                                sharding=sharding,
                                layer_type="segmentation" if segmentation else "image")
    vol[...] = data
    vol.commit()
    return path


def _ts_scale(path, i):
    return ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                    "scale_index": i}).result(timeout=PEER_TIMEOUT)


def _check_levels(path, method):
    """Each level equals tensorstore's downsample of the level above, domain and values."""
    info = ngshard.open_volume(path).info
    for i in range(1, len(info.scales)):
        above, scale = info.scales[i - 1], info.scales[i]
        factor = [round(b / a) for a, b in zip(above.resolution, scale.resolution)]
        want = ts.downsample(_ts_scale(path, i - 1), factor + [1], method)
        got = _ts_scale(path, i)
        assert want.domain == got.domain, (scale.key, want.domain, got.domain)
        np.testing.assert_array_equal(got.read().result(timeout=PEER_TIMEOUT),
                                      want.read().result(timeout=PEER_TIMEOUT), scale.key)
    return info


@pytest.mark.parametrize("sharding", ["auto", None])
@pytest.mark.parametrize("offset", [(0, 0, 0), (5, 3, 1)])
def test_image_pyramid_equals_tensorstore(tmp_path, sharding, offset):
    data = np.random.default_rng(1).integers(0, 256, (150, 130, 20), np.uint8)
    path = _layer(tmp_path / "img", data, offset=offset, sharding=sharding)
    with ThreadPoolExecutor(2) as pool:
        # a small task budget: several tasks, and more than one stage
        stats = ngshard.downsample(path, levels=5, executor=pool, progress=False,
                                   task_bytes=64 * 64 * 16)
    info = _check_levels(path, "mean")
    assert [s.key for s in info.scales] == ["4_4_40", "8_8_40", "16_16_40", "32_32_40",
                                            "64_64_80", "128_128_160"]
    assert stats["levels"] == [s.key for s in info.scales[1:]] and stats["tasks"] > 4
    assert (info.scales[1].voxel_offset == tuple(o // f for o, f in zip(offset, (2, 2, 1))))
    assert all((s.sharding is None) == (sharding is None) for s in info.scales)


def _neurites(shape=(64, 64, 16)):
    """Background with one-voxel-thick neurites (lines along z and x, labels up to 2**40)."""
    seg = np.zeros(shape, np.uint64)
    for i, (x, y) in enumerate([(4, 8), (17, 30), (40, 41), (61, 2)]):
        seg[x, y, :] = (1 << 40) + i
    seg[:, 21, 5] = 7
    seg[10:30, 50:54, 2:9] = 9  # and a thick one
    return seg


def test_segmentation_mode_equals_tensorstore(tmp_path):
    seg = _neurites() + np.random.default_rng(3).integers(0, 3, (64, 64, 16)).astype(np.uint64)
    path = _layer(tmp_path / "seg", seg, offset=(1, 2, 3), sharding="auto",
                  segmentation=True)
    ngshard.downsample(path, levels=3, executor=ThreadPoolExecutor(2), progress=False)
    info = _check_levels(path, "mode")
    assert ngshard.open_volume(path).info.type == "segmentation" and len(info.scales) == 4


def test_sparse_mode_keeps_neurites_as_tinybrain_does(tmp_path):
    tinybrain = pytest.importorskip("tinybrain")
    seg = _neurites()
    path = _layer(tmp_path / "seg", seg, offset=(0, 0, 0), sharding="auto",
                  segmentation=True)
    ngshard.downsample(path, factor=(2, 2, 2), levels=2, sparse=True,
                       executor=ThreadPoolExecutor(2), progress=False)
    # (tinybrain's accelerated kernels take Fortran-ordered arrays, as igneous passes them)
    want = tinybrain.downsample_segmentation(np.asfortranarray(seg[..., None]), (2, 2, 2),
                                             sparse=True, num_mips=2)
    for i in (1, 2):
        got = ngshard.open_volume(path, scale=i)[...]
        np.testing.assert_array_equal(got, want[i - 1])
        assert (1 << 40) + 2 in got  # the thin neurites survive; plain mode drops them
    assert (1 << 40) + 2 not in downsample(seg[..., None], (2, 2, 2), "mode")


IGNEOUS_SPARSE = """
import sys
from taskqueue import LocalTaskQueue
import igneous.task_creation as tc
tasks = tc.create_downsampling_tasks(sys.argv[1], mip=0, num_mips=2, sparse=True,
                                     factor=(2, 2, 2), fill_missing=False)
LocalTaskQueue(parallel=1, progress=False).insert_all(tasks)
"""


def test_sparse_mode_equals_igneous(tmp_path):
    """igneous' own downsampling (``create_downsampling_tasks(sparse=True)`` on a
    LocalTaskQueue, a child process) and ``ngshard downsample --sparse``: level by level the
    same labels, the one-voxel neurites kept."""
    from peers import run_peer

    seg = _neurites()
    ours = _layer(tmp_path / "ours", seg, offset=(0, 0, 0), sharding=None, segmentation=True,
                  chunk=(16, 16, 4))
    theirs = _layer(tmp_path / "igneous", seg, offset=(0, 0, 0), sharding=None,
                    segmentation=True, chunk=(16, 16, 4))
    from ngshard.cli import main

    assert main(["downsample", str(ours), "--levels", "2", "--factor", "2,2,2", "--sparse",
                 "--sharding", "none", "--workers", "1", "-q"]) == 0
    run_peer(IGNEOUS_SPARSE, (tmp_path / "igneous").as_uri())
    made = len(ngshard.open_volume(theirs).info.scales)
    assert made == 3
    for i in range(1, made):
        got = ngshard.open_volume(ours, scale=i)
        want = ngshard.open_volume(theirs, scale=i)
        assert got.scale.resolution == want.scale.resolution and got.bounds == want.bounds
        np.testing.assert_array_equal(got[...], want[...])
        assert (1 << 40) + 2 in got[...]


def test_interrupt_and_resume(tmp_path):
    data = np.random.default_rng(2).integers(0, 256, (128, 128, 16), np.uint8)
    ref = _layer(tmp_path / "ref", data, offset=(0, 0, 0), sharding="auto")
    path = _layer(tmp_path / "img", data, offset=(0, 0, 0), sharding="auto")
    kw = {"levels": 3, "progress": False, "task_bytes": 64 * 64 * 16}
    with ThreadPoolExecutor(2) as pool:
        with pytest.raises(RuntimeError, match="interrupted"):
            ngshard.downsample(path, executor=Interrupting(pool, 2), **kw)
        # nothing is named before every level is made
        assert len(ngshard.open_volume(path).info.scales) == 1
        stats = ngshard.downsample(path, executor=pool, **kw)
        ngshard.downsample(ref, executor=pool, **kw)
    assert stats["skipped"] >= 1 and stats["run"] >= 1
    assert files(path) == files(ref)
    with pytest.raises(ngshard.ExistsError, match="8_8_40"):
        ngshard.downsample(path, scale=0, levels=1, progress=False)


class InThisThread(Executor):
    """Runs each task in the calling thread as it is submitted."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - the future carries it, as a pool's does
            future.set_exception(e)
        return future


def test_the_tasks_of_a_thread_read_their_boxes_into_one_block(tmp_path, monkeypatch):
    """Each task reads its source box into its thread's scratch block, not into fresh
    memory: the tasks of one thread map one block, and write what the pool writes."""
    from ngshard import recycle
    from ngshard.pipelines import to_pyramid

    blocks = []
    real = recycle.fresh

    def counting(shape, dtype, *args, **kwargs):
        if len(shape) == 1:  # a scratch block (reads' own results are never 1-D here)
            blocks.append(shape)
        return real(shape, dtype, *args, **kwargs)

    monkeypatch.setattr(recycle, "fresh", counting)
    monkeypatch.setattr(to_pyramid.SOURCE_BOXES, "block", None)
    data = np.random.default_rng(3).integers(0, 256, (128, 128, 16), np.uint8)
    kw = {"levels": 3, "progress": False, "task_bytes": 64 * 64 * 16}
    here = _layer(tmp_path / "here", data, offset=(0, 0, 0), sharding="auto")
    pool = _layer(tmp_path / "pool", data, offset=(0, 0, 0), sharding="auto")
    stats = ngshard.downsample(here, executor=InThisThread(), **kw)
    assert stats["tasks"] >= 4 and len(blocks) == 1  # every box in one block
    ngshard.downsample(pool, workers=2, **kw)
    assert files(here) == files(pool)


def test_command_line(tmp_path, capsys):
    from ngshard.cli import main

    data = np.random.default_rng(4).integers(0, 256, (64, 64, 8), np.uint8)
    path = _layer(tmp_path / "img", data, offset=(0, 0, 0), sharding=None)
    assert main(["downsample", str(path), "--levels", "2", "--method", "max",
                 "--workers", "1", "-q"]) == 0
    assert "levels 8_8_40, 16_16_40" in capsys.readouterr().out
    _check_levels(path, "max")
    assert main(["downsample", str(path), "--scale", "0", "--levels", "1"]) == 1
    assert "--force" in capsys.readouterr().err


def test_dask_equals_local_pool(tmp_path):
    distributed = pytest.importorskip("distributed")
    data = np.random.default_rng(5).integers(0, 256, (96, 80, 24), np.uint8)
    kw = {"levels": 3, "progress": False, "task_bytes": 64 * 64 * 16}
    local = _layer(tmp_path / "local", data, offset=(3, 0, 1), sharding="auto")
    remote = _layer(tmp_path / "dask", data, offset=(3, 0, 1), sharding="auto")
    a = ngshard.downsample(local, workers=2, **kw)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        b = ngshard.downsample(remote, executor=client.get_executor(), **kw)
    assert a == b and a["tasks"] > 2

    assert files(local) == files(remote)
