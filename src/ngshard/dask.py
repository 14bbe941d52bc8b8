"""Sharded writes on a Dask cluster, for when one machine is not enough:
``ngshard.dask.write_kv(url, spec, collection)``.

Each partition gets every key's shard number (vectorized) and a sequence number (partition,
position) that says which of two values of one key came last. Dask's own shuffle then
repartitions the rows by shard: one partition per shard (per run of consecutive shards when a
spec has more than ``MAX_SHARD_TASKS``), whatever the input's partitioning, and one task per
partition writes its shard whole, so no two workers touch a shard, no shard is read back,
and a worker holds one shard's keys at a time. A task's shards come out
exactly as the local writer makes them (``sharded.shard_writer.write_shard``), each written
atomically, so a task that is retried (a worker died) rewrites the same bytes and a
reader never sees half a shard. A store or layer already at ``url`` is refused, or with
``overwrite=True`` removed first; the spec is recorded in ``url/info`` last.

``write_chunks`` does the same for a sharded scale of a precomputed volume: a bag of (grid
position, chunk array) is encoded on the workers and written by the same path.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ._arrays import unique
from .destination import claim
from .errors import MissingDependencyError, SpecError
from .limits import MAX_SHARD_TASKS
from .sharded.infofile import as_spec, record_spec
from .sharded.inputs import as_bytes
from .sharded.kv import ShardedKV
from .sharded.opener import open_kv
from .sharded.shard_writer import write_shard
from .sharded.spec import ShardingSpec, as_key_array
from .storage import Location, Storage, StorageOptions, open_storage, remove_stale
from .types import Blob
from .volume import Volume, open_volume

if TYPE_CHECKING:
    import dask.dataframe as dd
    import pandas as pd

    from .volume.grid import ChunkGrid
    from .volume.handle import ScaleCodec

_SEQ_BITS = 40  # positions within a partition; the partition number goes above them
_ANNOTATED = {"key": "u8", "value": object, "_shard": "i8", "_seq": "i8"}  # by _shard
_WRITTEN = {"shard": object, "keys": "i8", "bytes": "i8"}


def _dask() -> Any:
    """The ``dask`` package with its bag and dataframe modules, imported when a write starts
    (``import ngshard`` does not import Dask)."""
    try:
        import dask
        import dask.bag
        import dask.dataframe
    except ImportError as e:
        raise MissingDependencyError(f"ngshard.dask needs Dask: pip install 'ngshard[dask]' "
                                     f"({e})") from None
    return dask


def write_kv(url: Location, spec: ShardingSpec | dict | str,
             collection: Any, *, key: str = "key", value: str = "value",
             npartitions: int | None = None, info: bool = True, durable: bool = True,
             overwrite: bool = False,
             storage_options: StorageOptions | None = None) -> ShardedKV:
    """Write a whole store at ``url`` from a Dask collection, one task per group of shards.

    Parameters
    ----------
    url
        Where: a path every worker sees (a shared filesystem) or an object store URL.
    spec
        The sharding spec (or its JSON).
    collection
        A ``dask.bag.Bag`` of (key, bytes) pairs, or a Dask DataFrame with a column of keys
        (unsigned, or non-negative integers) and a column of bytes values.
    key, value
        The DataFrame's column names.
    npartitions
        How many partitions (tasks) the shuffle makes, each of a run of consecutive shards.
        By default one per shard (up to ``ngshard.limits.MAX_SHARD_TASKS``), so a worker's
        memory is bounded by the largest shard (its keys and values, about twice over while
        the shuffle hands them over), not by the collection's partitions: 10 million
        keys in 2 input partitions on 4 GiB workers write one shard per task.
    info, durable, overwrite, storage_options
        As for :func:`ngshard.write_kv`.

    Returns
    -------
    ShardedKV
        The store written, open for reading (as :func:`ngshard.write_kv` returns it).

    The shard files are byte for byte those :func:`ngshard.write_kv` writes from the same
    items, however the collection is partitioned. The last value of a repeated key (in the
    collection's order: partition, then position) wins.

    Raises
    ------
    MissingDependencyError
        Dask is not installed.
    ExistsError
        ``url`` holds a store or layer, and not ``overwrite``.
    InvalidKeyError
        A key outside [0, 2**64).
    TypeError
        A value that is not bytes (a column of strings included: build the frame with
        ``dask.config.set({"dataframe.convert-string": False})``, or Dask turns bytes into
        text).
    """
    dask = _dask()
    spec = as_spec(spec)
    storage = open_storage(url, durable=durable, storage_options=storage_options)
    claim(storage, overwrite=overwrite)
    if storage.local_root is not None:
        os.makedirs(storage.local_root, exist_ok=True)
        remove_stale(storage.local_root)
    with dask.config.set({"dataframe.convert-string": False}):  # bytes must stay bytes
        frame = _as_frame(collection, key, value)
        annotated = frame.map_partitions(_annotate, spec.to_json(), key, value,
                                         meta=_ANNOTATED)
        # range partitions of shards: partition i holds shards [i * run, (i + 1) * run)
        last = spec.num_shards - 1
        run = -(-spec.num_shards // max(1, npartitions or MAX_SHARD_TASKS))
        divisions = [*range(0, last + 1, run), last] if last else [0, 0]
        shuffled = annotated.set_index("_shard", divisions=divisions)
        shuffled.map_partitions(_write_shards, storage, spec.to_json(),
                                meta=_WRITTEN).compute()
    if storage.local_root is not None:
        remove_stale(storage.local_root)  # temporary files of workers that died here
    if info:
        record_spec(storage, spec)
    return open_kv(storage, spec)


def _as_frame(collection: Any, key: str, value: str) -> dd.DataFrame:
    import dask
    import dask.bag
    import dask.dataframe as dd
    import pandas as pd

    if isinstance(collection, dask.bag.Bag):
        meta = pd.DataFrame({key: pd.Series(dtype="u8"), value: pd.Series(dtype=object)})
        return dd.from_delayed([dask.delayed(_pairs_frame)(p, key, value)
                                for p in collection.to_delayed()], meta=meta,
                               verify_meta=False)
    if isinstance(collection, dd.DataFrame):
        missing = {key, value} - set(collection.columns)
        if missing:
            raise ValueError(f"the DataFrame has no column {', '.join(sorted(missing))} "
                             f"(key= and value= name the columns)")
        return collection[[key, value]]
    raise TypeError(f"collection must be a dask Bag of (key, bytes) pairs or a dask "
                    f"DataFrame, got {type(collection).__name__}")


def _pairs_frame(pairs: list, key: str, value: str) -> pd.DataFrame:
    """One bag partition as a frame (keys checked here, values in :func:`_annotate`)."""
    import pandas as pd

    keys = as_key_array([p[0] for p in pairs])
    values = pd.Series([p[1] for p in pairs], dtype=object)
    return pd.DataFrame({key: keys, value: values})


def _annotate(df: pd.DataFrame, spec_json: dict, key: str, value: str,
              partition_info: dict | None = None) -> pd.DataFrame:
    """Keys checked, each key's shard, and its place in the collection's order."""
    import pandas as pd

    spec = ShardingSpec.from_json(spec_json)
    column = df[key].to_numpy()
    keys = as_key_array(column if column.dtype != object else column.tolist())
    values = df[value].to_numpy(dtype=object)
    if not set(map(type, values)) <= {bytes}:
        values = np.array([as_bytes(v, k) for k, v in zip(keys.tolist(), values)] or [],
                          dtype=object)
    number = partition_info["number"] if partition_info else 0
    return pd.DataFrame({"key": keys, "value": values,
                         "_shard": spec.locate(keys)[0].astype(np.int64),
                         "_seq": np.arange(len(keys), dtype=np.int64) + (number << _SEQ_BITS)})


def _write_shards(df: pd.DataFrame, storage: Storage, spec_json: dict) -> pd.DataFrame:
    """Write every shard whose rows this partition holds (indexed by shard), each whole and
    atomically."""
    import pandas as pd

    spec = ShardingSpec.from_json(spec_json)
    rows = []
    if len(df):
        shards, seq = df.index.to_numpy(), df["_seq"].to_numpy()
        keys, values = df["key"].to_numpy(np.uint64), df["value"].to_numpy(dtype=object)
        by_shard = np.argsort(shards, kind="stable")
        cuts = (np.flatnonzero(np.diff(shards[by_shard])) + 1).tolist()
        for a, b in zip([0, *cuts], [*cuts, len(by_shard)]):
            group = by_shard[a:b]
            shard = int(shards[group[0]])
            # of a repeated key the value last in the collection's order wins
            written = write_shard(storage, spec, shard, keys[group], values, rows=group,
                                  age=seq[group], encoded=False)
            rows.append((spec.shard_filename(shard), len(unique(keys[group])), written))
    return pd.DataFrame(rows, columns=list(_WRITTEN)).astype(_WRITTEN)


def write_chunks(url: Location, collection: Any, *, scale: int | str = 0,
                 npartitions: int | None = None, durable: bool = True,
                 storage_options: StorageOptions | None = None) -> Volume:
    """Write a sharded scale of the precomputed volume at ``url`` from a Dask bag of chunks.

    Parameters
    ----------
    url
        The volume (its ``info`` must exist: :func:`ngshard.create_volume` writes it).
    collection
        A ``dask.bag.Bag`` of ((x, y, z) chunk grid position, array) pairs; each array is
        the chunk as (x, y, z, channels) voxels (x, y, z for one channel), clipped at the
        volume's edge as edge chunks are. Each is encoded (the scale's encoding) on the worker.
    scale
        The scale's index or key.
    npartitions, durable
        As for :func:`write_kv`.
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).

    Returns
    -------
    Volume
        The scale written, open for reading.

    The scale's shard files are byte for byte those a local write of the same chunks makes;
    the scale's earlier shards are removed first (these chunks replace them all).

    Raises
    ------
    MissingDependencyError
        Dask is not installed.
    SpecError
        An unsharded scale, or a position outside the chunk grid.
    ValueError
        A chunk whose shape is not its place's in the grid.
    """
    from .volume.handle import ScaleHandle

    handle = ScaleHandle.open(url, scale, storage_options=storage_options)
    if handle.scale.sharding is None:
        raise SpecError(f"{handle.storage.url}: scale {handle.scale.key} is not sharded; write "
                        f"its chunks with open_volume(..., mode='r+')")
    # the grid and the codec travel to the workers (small values: no info read there)
    pairs = collection.map_partitions(_encode_chunks, handle.grid, handle.codec)
    write_kv(handle.chunk_storage, handle.scale.sharding, pairs, npartitions=npartitions,
             info=False, durable=durable, overwrite=True)
    return open_volume(handle.storage, handle.scale.key)


def _encode_chunks(items: list, grid: ChunkGrid, codec: ScaleCodec) -> list[tuple[int, Blob]]:
    """One bag partition of (position, chunk) as (Morton code, encoded chunk) pairs."""
    items = list(items)  # a partition of a mapped bag is an iterator: read it once
    if not items:
        return []
    positions = np.array([p for p, _ in items], np.int64).reshape(-1, 3)
    codes = grid.morton(positions).tolist()
    starts, stops = grid.bounds(positions)
    out = []
    for code, (pos, chunk), lo, hi in zip(codes, items, starts.tolist(), stops.tolist()):
        chunk = np.asarray(chunk)
        chunk = chunk[..., None] if chunk.ndim == 3 else chunk
        shape = (*(b - a for a, b in zip(lo, hi)), *codec.inner)
        if chunk.shape != shape:
            raise ValueError(f"chunk at grid position {tuple(pos)} has shape {chunk.shape}, "
                             f"not the {shape} of its place in the grid")
        out.append((code, codec.encode(chunk.astype(codec.dtype, copy=False))))
    return out
