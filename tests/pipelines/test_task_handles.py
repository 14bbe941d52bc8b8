"""A conversion task is a small value (URLs, a box, a shard number): it pickles to a few
hundred bytes whatever the size of the volume, and the worker that runs it opens the arrays'
handles (metadata, chunk store, codec), never a Volume or a ZarrArray with its staging."""

from __future__ import annotations

import gc
import pickle
import pickletools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from convert_helpers import read_precomputed

import ngshard
from ngshard.pipelines.layout import zarr_to_precomputed
from ngshard.volume import ScaleHandle, Volume
from ngshard.zarr import ArrayHandle, ZarrArray, create_array, open_array

RAW = [{"name": "bytes", "configuration": {"endian": "little"}}]


def globals_of(blob: bytes) -> set[str]:
    """The names of the classes and functions a pickle refers to."""
    ops = list(pickletools.genops(blob))
    names = {arg for op, arg, _ in ops if op.name == "GLOBAL"}
    strings = [arg for op, arg, _ in ops if isinstance(arg, str)]
    # STACK_GLOBAL takes the two strings pushed before it: module and name
    names |= {f"{m} {n}" for (op, _, _), m, n in zip(ops[2:], strings, strings[1:])
              if op.name == "STACK_GLOBAL"}
    return names | set(strings)


def test_tasks_of_a_large_volume_pickle_small(tmp_path):
    src = create_array(tmp_path / "big", (4096, 8192, 8192), "uint8", (64, 64, 64),
                       shards=(512, 512, 512))  # 256 GiB, none of it stored
    plan = zarr_to_precomputed(src.url, str(tmp_path / "dst"))
    tasks = [t for stage in plan.stages for tasks in stage for t in tasks]
    assert len(tasks) >= 1000
    blobs = [pickle.dumps(t) for t in tasks[:: len(tasks) // 20]]
    assert max(map(len, blobs)) < 2048
    for blob in blobs:
        names = " ".join(globals_of(blob))
        assert "Volume" not in names and "ZarrArray" not in names and "Staged" not in names


def test_handles_pickle_as_their_url(tmp_path):
    vol = ngshard.create_volume(tmp_path / "v", dtype="uint16", shape=(40, 40, 8),
                                chunk_size=(8, 8, 8), sharding="auto")
    arr = create_array(tmp_path / "a", (8, 40, 40), "uint16", (8, 8, 8), shards=(8, 16, 16))
    for handle in (vol.handle, arr.handle):
        blob = pickle.dumps(handle)
        assert len(blob) < 512
        again = pickle.loads(blob)
        assert type(again) is type(handle) and again.url == handle.url
        assert again.store.shape == handle.store.shape and again.store is not handle.store
    assert pickle.loads(pickle.dumps(vol.handle)).scale == vol.scale


def live_arrays() -> int:
    gc.collect()
    return sum(isinstance(o, (Volume, ZarrArray)) for o in gc.get_objects())


@pytest.mark.parametrize("kind", ["fast", "decoded", "to zarr"])
def test_workers_open_handles_not_arrays(tmp_path, kind):
    data = np.random.default_rng(0).integers(0, 200, (24, 40, 40)).astype(
        "uint32" if kind == "decoded" else "uint8")
    src = create_array(tmp_path / "src", data.shape, data.dtype, (8, 8, 8),
                       shards=(8, 16, 16), codecs=RAW)
    src[...] = data
    del src
    before = live_arrays()
    with ThreadPoolExecutor(2) as pool:  # the tasks run in this process: what they keep shows
        ngshard.convert(tmp_path / "src", tmp_path / "pre", executor=pool, progress=False,
                        downsample=1)
        if kind == "to zarr":
            ngshard.convert(tmp_path / "pre", tmp_path / "back", executor=pool, progress=False)
    assert live_arrays() == before  # the workers' cached arrays are handles
    np.testing.assert_array_equal(read_precomputed(tmp_path / "pre")[0][..., 0],
                                  data.transpose(2, 1, 0))
    if kind == "to zarr":
        np.testing.assert_array_equal(open_array(tmp_path / "back" / "s0")[...], data)
    assert isinstance(ScaleHandle.open(tmp_path / "pre", 1).store.list_positions(), np.ndarray)
    assert ArrayHandle.open(tmp_path / "src").meta.shape == data.shape
