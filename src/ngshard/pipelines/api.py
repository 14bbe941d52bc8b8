"""``ngshard.convert``: zarr -> precomputed or the reverse, chosen by the source, as
independent tasks on any executor, resumable (the running is :mod:`.runner`'s)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

from ..errors import SpecError
from ..layers.dispatch import existing_source
from ..storage import StorageOptions, canonical_url, rooted_options, source_of
from ..types import Encoding
from .layout import (
    DEFAULT_TASK_BYTES,
    is_precomputed,
    precomputed_to_zarr,
    zarr_to_precomputed,
)
from .runner import run_plan


def convert(src: str | os.PathLike, dst: str | os.PathLike, *,
            scales: Sequence[int] | None = None, chunk_size: Sequence[int] | None = None,
            encoding: Encoding | None = None, sharding: Any = "auto",
            executor: Executor | None = None, workers: int | None = None,
            progress: bool = True, resume: bool = True, axes: str | None = None,
            downsample: bool | int = False, task_bytes: int = DEFAULT_TASK_BYTES,
            overwrite: bool = False, storage_options: StorageOptions | None = None,
            src_storage_options: StorageOptions | None = None,
            resolution: Sequence[float] | None = None, offset: Sequence[int] | None = None,
            units: str | None = None) -> dict[str, int]:
    """Convert a zarr array or OME-Zarr group to a precomputed layer, or a precomputed layer
    to an OME-Zarr 0.5 group of Zarr v3 sharded arrays (which, by ``src``: a precomputed
    layer has an ``info``), or a TIFF stack to a precomputed layer.

    Parameters
    ----------
    src, dst
        Local paths or fsspec URLs every worker can reach, or Neuroglancer sources
        (``zarr://...``, ``precomputed://...``, ``gs://b/p/|zarr3:``): a format named on
        ``src`` says which way to convert, one named on ``dst`` must be the one made.
        Relative paths are made absolute here (workers elsewhere see the same folders), and
        the job is known by these canonical names: ``out``, ``./out/`` and its absolute
        path resume the same job.
        A local TIFF stack as ``src`` (a glob or a folder of 2-D sections, one per z in
        natural order of their names, or one multi-page or OME-TIFF; needs
        ``ngshard[tiff]``), an HDF5 dataset (``FILE.h5`` holding one, or
        ``FILE.h5/path/in/file``; axes z, y, x or c, z, y, x unless ``axes`` says; needs
        ``ngshard[hdf5]``) or an N5 dataset (its folder; x first) becomes a sharded
        precomputed layer, 64^3 chunks by default, each task reading only its box.
    scales
        Indices of the source levels to convert (default all).
    chunk_size
        zarr -> precomputed: the (x, y, z) chunk size (default the zarr inner chunk, reversed,
        when between 8 and 512 per axis, else 64^3).
    encoding
        zarr -> precomputed: raw, compressed_segmentation, jpeg or png (default
        compressed_segmentation for uint32/uint64/int64 labels, raw otherwise);
        precomputed -> zarr: zstd (default), gzip or raw inner chunks.
    sharding
        zarr -> precomputed: "auto" (box shards of about ``task_bytes``), "none" (a file per
        chunk) or a spec (JSON text, dict or file).
    executor
        Where tasks run (any ``concurrent.futures.Executor``, e.g. a Dask
        ``Client(...).get_executor()``); default a local process pool of ``workers``.
    progress
        A progress bar over tasks.
    resume
        Skip the tasks an interrupted run of the same job finished (recorded under
        ``dst/.ngshard-convert/``); False starts afresh.
    overwrite
        Replace what ``dst`` holds (a layer, a zarr array or group, an unfinished conversion
        of another job): all of it is removed first. By default that is refused; an
        unfinished run of this same job is resumed (or restarted) either way.
    axes
        The source's axes as letters (x, y, z, c, t), overriding its metadata: "czyx";
        an HDF5 dataset's (x, y, z, c).
    downsample
        zarr -> precomputed from a single level: add coarser scales (2x per axis, until the
        scale fits a chunk; an integer caps their number).
    task_bytes
        Uncompressed bytes per task (auto shard size): a worker's memory is about this.
    resolution
        TIFF stacks, HDF5 and N5 datasets: the voxel size (x, y, z) in nm (default the
        OME-TIFF's, the dataset's ``resolution`` attribute (N5: or ``pixelResolution``),
        else 1, 1, 1).
    storage_options
        How to reach ``src`` and ``dst`` where they are not local paths (credentials,
        ``anon``, ``endpoint_url``, ...; ``retries`` and ``retry_seconds``: see
        :mod:`ngshard.storage.options`); every worker opens them so.
    src_storage_options
        Options for ``src`` alone, where it needs others than ``dst`` (another bucket, a
        public one read with ``anon``); default ``storage_options``.
    resolution, offset, units
        zarr -> precomputed, for sources whose metadata does not say (a plain array, an
        OME-Zarr group without units or translations): the (x, y, z) voxel size of the
        finest level in ``units`` (default nm; coarser OME levels keep their relative
        scales), its (x, y, z) voxel offset, and the length unit (``nm``, ``um``,
        ``micrometer``, ...) of ``resolution`` or of OME scales without units. Without
        them such a source is taken as 1 nm voxels at the origin.

    Returns
    -------
    dict
        ``tasks`` (of the job), ``run`` (this call), ``skipped`` (done before), ``chunks``
        and ``bytes`` written by this call.

    Raises
    ------
    NotFoundError, SpecError, CorruptDataError
        A missing or invalid source (naming the file), a format named on ``src`` or ``dst``
        that contradicts it; a task's error stops the job (tasks finished stay recorded;
        shards are never left half-written).
    ExistsError
        ``dst`` holds something other than this job's unfinished run, and not
        ``overwrite``.
    StorageAccessError
        A worker cannot reach the source or the destination (before anything is written).
    NgShardError
        A worker process died (the message says what to do).
    """
    roots = {u: o for u, o in ((canonical_url(source_of(src).url),
                                src_storage_options or storage_options),
                               (canonical_url(source_of(dst).url), storage_options))
             if "://" in u and o}
    with rooted_options(roots):  # every open of a URL under src or dst, in every process
        return _convert(src, dst, scales=scales, chunk_size=chunk_size, encoding=encoding,
                        sharding=sharding, executor=executor, workers=workers,
                        progress=progress, resume=resume, axes=axes, downsample=downsample,
                        task_bytes=task_bytes, overwrite=overwrite, roots=roots,
                        resolution=resolution, offset=offset, units=units)


def _convert(src: str | os.PathLike, dst: str | os.PathLike, *, scales: Sequence[int] | None,
             chunk_size: Sequence[int] | None, encoding: Encoding | None, sharding: Any,
             executor: Executor | None, workers: int | None, progress: bool, resume: bool,
             axes: str | None, downsample: bool | int, task_bytes: int, overwrite: bool,
             roots: dict, resolution: Sequence[float] | None, offset: Sequence[int] | None,
             units: str | None) -> dict[str, int]:
    from .arrays_in import hdf5_parts, is_n5
    from .tiff import is_tiff

    local = "tiff" if is_tiff(src) else "hdf5" if hdf5_parts(src) else \
        "n5" if is_n5(src) else None
    if local is not None:  # a TIFF stack, an HDF5 or N5 dataset: read by boxes
        given: dict[str, Any] = {"scales": scales, "offset": offset, "units": units,
                                 "axes": axes if local != "hdf5" else None}
        wrong = [k for k, v in given.items() if v is not None]
        if wrong:
            raise SpecError(f"{os.fspath(src)} is a {local} source: {', '.join(wrong)} do "
                            f"not apply")
        from .arrays_in import open_hdf5, open_n5, to_precomputed_plan
        from .tiff import tiff_to_precomputed

        dst = _destination(dst, "precomputed", os.fspath(src))
        where = os.path.abspath(os.fspath(src).removeprefix("file://"))
        options: dict[str, Any] = {
            "chunk_size": chunk_size, "encoding": encoding, "sharding": sharding,
            "resolution": resolution, "downsample": downsample, "task_bytes": task_bytes}
        if local == "tiff":
            plan = tiff_to_precomputed(os.fspath(src), dst, **options)
        else:
            opened = open_n5(where) if local == "n5" else open_hdf5(where, axes)
            plan = to_precomputed_plan(os.fspath(src), dst, opened, [where, axes], **options)
        plan.roots = roots
        return run_plan(plan, executor=executor, workers=workers, progress=progress,
                        resume=resume, overwrite=overwrite)
    plain = os.fspath(src).removeprefix("file://")
    if os.path.isfile(plain):
        raise SpecError(f"{plain}: not a source convert reads: a precomputed layer or a zarr "
                        f"folder, a TIFF stack or file (.tif, .tiff), an HDF5 file (.h5, "
                        f".hdf5) or an N5 dataset")
    src, to_zarr = _source(src)
    dst = _destination(dst, "zarr" if to_zarr else "precomputed", src)
    _apart(src, dst)
    if to_zarr:
        given = {"chunk_size": chunk_size, "axes": axes, "downsample": downsample or None,
                 "resolution": resolution, "offset": offset, "units": units}
        wrong = [k for k, v in given.items() if v is not None]
        if wrong or sharding not in ("auto", None):
            raise SpecError(f"{src} is precomputed: {', '.join(wrong or ['sharding'])} only "
                            f"apply to zarr -> precomputed")
        plan = precomputed_to_zarr(src, dst, scales=scales, encoding=encoding,
                                   task_bytes=task_bytes)
    else:
        plan = zarr_to_precomputed(src, dst, scales=scales, chunk_size=chunk_size,
                                   encoding=encoding, sharding=sharding, axes=axes,
                                   downsample=downsample, task_bytes=task_bytes,
                                   resolution=resolution, offset=offset, units=units)
    plan.roots = roots
    return run_plan(plan, executor=executor, workers=workers, progress=progress,
                    resume=resume, overwrite=overwrite)


def _apart(src: str, dst: str) -> None:
    """Refuse a destination that is the source, or holds it, or lies inside it: replacing
    it would remove the source."""
    a, b = src.rstrip("/"), dst.rstrip("/")
    if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
        raise SpecError(f"the destination {dst} and the source {src} overlap: convert into "
                        f"another folder")


def _source(src: str | os.PathLike) -> tuple[str, bool]:
    """The canonical URL of a conversion's source, and whether it is precomputed (to
    zarr)."""
    storage, source = existing_source(src)
    url = canonical_url(source.url)
    if source.format is not None:
        return url, source.family == "precomputed"
    return url, is_precomputed(storage)


def _destination(dst: str | os.PathLike, makes: str, src: str) -> str:
    """The canonical URL of a conversion's destination, refusing a format it will not
    hold."""
    source = source_of(dst)
    if source.family not in (None, makes) or source.format == "zarr2":
        made = "Zarr v3" if makes == "zarr" else "a precomputed layer"
        raise SpecError(f"{os.fspath(dst)}: the destination says {source.format}, but "
                        f"converting {src} makes {made}")
    return canonical_url(source.url)
