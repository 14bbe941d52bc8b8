"""Filling one shard of a zarr array from a precomputed scale: the shard's box read as
(x, y, z, channel), turned to the array's (c,) z, y, x order and assigned whole through the
array's handle, so its chunk store writes the shard in one piece without reading it."""

from __future__ import annotations

from .plan import Task
from .sources import open_zarr, voxels


def fill_zarr(task: Task) -> dict:
    array = voxels(open_zarr(task.url))
    spatial = list(zip(task.lo[-3:], task.hi[-3:]))[::-1]  # (x, y, z)
    data = task.source.read([a for a, _ in spatial], [b for _, b in spatial])
    if not data.any():  # all fill value: nothing to store in a new array
        return {"chunks": 0, "bytes": 0}
    data = data.transpose(3, 2, 1, 0)
    if array.ndim == 3:
        data = data[0]
    try:
        array[tuple(slice(a, b) for a, b in zip(task.lo, task.hi))] = data
        array.commit()
    except BaseException:
        array.abort()  # the cached array must not carry this task's values to another
        raise
    return {"chunks": 1, "bytes": data.nbytes}
