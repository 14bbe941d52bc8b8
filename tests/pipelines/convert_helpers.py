"""Sources written by the peers (zarr-python, tensorstore), readers of the results, the files
of a result, and an executor that interrupts a job."""

from __future__ import annotations

import contextlib
from concurrent.futures import Executor, Future, InvalidStateError

import numpy as np
import tensorstore as ts
import zarr
import zarr.codecs
from peers import PEER_TIMEOUT

from ngshard.pipelines.tasks import probe


def files(root) -> dict[str, bytes]:
    """Every file under ``root`` by relative path: runs meant to write the same bytes compare
    equal."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def volume_data(shape, dtype, seed=0) -> np.ndarray:
    """Blocky test data (labels for integers wider than a byte), with an all-zero region."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.itemsize >= 4 and dtype.kind in "iu":
        data = rng.integers(0, 5, shape).astype(dtype) * np.array(2**33 + 7, np.uint64
                                                                   ).astype(dtype)
    else:
        data = rng.integers(0, 255, shape).astype(dtype)
    data[..., : shape[-1] // 4] = 0
    return data


def zarr_python_array(path, data, *, chunks, shards=None, zarr_format=3, compressor="zstd",
                      dimension_names=None):
    """``data`` written by zarr-python (v2 or v3, sharded or not)."""
    if zarr_format == 2:
        import numcodecs

        comp = numcodecs.Zstd() if compressor == "zstd" else numcodecs.GZip()
        arr = zarr.create_array(store=str(path), shape=data.shape, chunks=chunks,
                                dtype=data.dtype, zarr_format=2, compressors=comp,
                                fill_value=0)
    else:
        comp = zarr.codecs.ZstdCodec() if compressor == "zstd" else zarr.codecs.GzipCodec()
        arr = zarr.create_array(store=str(path), shape=data.shape, chunks=chunks,
                                shards=shards, dtype=data.dtype, compressors=comp,
                                fill_value=0, dimension_names=dimension_names)
    arr[...] = data
    return arr


def tensorstore_array(path, data, *, chunks, shards, index_location="end"):
    """``data`` written by tensorstore's zarr3 driver as a sharded array."""
    codecs = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": list(chunks), "index_location": index_location,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                   {"name": "gzip", "configuration": {"level": 5}}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                         {"name": "crc32c"}]}}]
    arr = ts.open({"driver": "zarr3", "kvstore": f"file://{path}", "metadata": {
        "shape": list(data.shape), "chunk_grid": {"name": "regular", "configuration": {
            "chunk_shape": list(shards)}}, "data_type": data.dtype.name, "codecs": codecs,
        "fill_value": 0}}, create=True, delete_existing=True).result(timeout=PEER_TIMEOUT)
    arr.write(data).result(timeout=PEER_TIMEOUT)


def ome_group(path, levels, *, version="0.5", axes="czyx", units="micrometer", scales=None,
              chunks=None, shards=None, translations=None):
    """An OME-Zarr group (0.5: v3, 0.4: v2) holding ``levels`` (arrays in ``axes`` order),
    with a translation per level if given."""
    zarr_format = 3 if version == "0.5" else 2
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    axis_docs = [{"name": a, "type": "channel" if a == "c" else "space",
                  **({} if a == "c" else {"unit": units})} for a in axes]
    datasets = []
    for i, data in enumerate(levels):
        kw = {"shards": shards} if shards and zarr_format == 3 else {}
        arr = group.create_array(str(i), shape=data.shape, dtype=data.dtype,
                                 chunks=chunks or data.shape, fill_value=0, **kw)
        arr[...] = data
        scale = scales[i] if scales else [1.0 if a == "c" else 2.0 ** i for a in axes]
        datasets.append({"path": str(i), "coordinateTransformations": [
            {"type": "scale", "scale": scale}] + ([{"type": "translation",
                                                    "translation": translations[i]}]
                                                  if translations else [])})
    ms = {"axes": axis_docs, "datasets": datasets}
    if version == "0.5":
        group.attrs["ome"] = {"version": "0.5", "multiscales": [ms]}
    else:
        group.attrs["multiscales"] = [{"version": "0.4", **ms}]
    return group


def read_precomputed(path, scale=0) -> tuple[np.ndarray, dict]:
    """A precomputed scale read by tensorstore: (x, y, z, c) voxels and the scale's domain."""
    arr = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{path}/",
                   "scale_index": scale}).result(timeout=PEER_TIMEOUT)
    return arr.read().result(timeout=PEER_TIMEOUT), {"origin": tuple(arr.domain.inclusive_min[:3]),
                                  "labels": arr.domain.labels}


def as_xyzc(data: np.ndarray, axes: str) -> np.ndarray:
    """Source voxels in ``axes`` order as (x, y, z, c)."""
    if "c" not in axes:
        data, axes = data[..., None], axes + "c"
    return data.transpose([axes.index(a) for a in "xyzc"])


class Interrupting(Executor):
    """Runs the first ``after`` tasks on ``inner``; every later one fails once those are
    finished (the probes of storage a job sends before its tasks pass)."""

    def __init__(self, inner: Executor, after: int) -> None:
        self.inner, self.after, self.submitted = inner, after, 0
        self.first: list[Future] = []

    def submit(self, fn, /, *args, **kwargs) -> Future:
        if fn is probe:
            return self.inner.submit(fn, *args, **kwargs)
        self.submitted += 1
        if self.submitted <= self.after:
            self.first.append(self.inner.submit(fn, *args, **kwargs))
            return self.first[-1]
        failed: Future = Future()
        waiting = list(self.first)

        def interrupt(_=None) -> None:
            if all(f.done() for f in waiting):
                with contextlib.suppress(InvalidStateError):  # set by another callback
                    failed.set_exception(RuntimeError("interrupted"))
        for f in waiting:
            f.add_done_callback(interrupt)
        interrupt()
        return failed
