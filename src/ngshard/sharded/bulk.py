"""Bulk writes of whole stores: ``write_kv`` from (key, value) pairs of any number, or from
arrays (keys as uint64, values as one buffer with offsets) with no Python object per key.

Pairs are staged and spilled (``staging.py``, ``spill.py``): memory is the buffer plus one
shard's index, whatever the number of keys. Arrays are in memory already: they are sorted by
shard (a radix sort of the shard numbers) and each shard is built from them directly, a few
shards at a time on threads, costing about 12 bytes per key beyond the arrays themselves.

Every path writes a shard by ``shard_writer.write_shard`` (values in minishard index order), so
the bytes of a store depend on its contents alone: not on the order of the items, the buffer
size, whether anything spilled, or (``ngshard.dask``) how a cluster partitioned them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._arrays import uint_dtype
from ..destination import claim
from ..limits import DEFAULT_BUFFER_BYTES, KEY_BLOCK
from ..progress import progress_bar
from ..storage import Location, StorageOptions, open_storage, remove_stale
from ..threads import WORKERS, bounded_map
from .infofile import as_spec, record_spec
from .inputs import Values, value_arrays
from .kv import ShardedKV
from .opener import open_kv
from .shard_writer import write_shard
from .spec import ShardingSpec

# What writing a mapping through write_arrays costs per key: its keys, the list of its
# values and their offsets (8 bytes each), the shard order and minishards
_MAPPING_KEY_BYTES = 32  # keys hashed and sorted at a time (bounds the temporaries)
_COUNTING_SORT_BITS = 20  # up to this many shard bits the shard order is a counting sort
# shards built at once: one more than the cores, so a shard waiting for its fsync leaves no
# core idle
_IN_FLIGHT = WORKERS + 1


def write_kv(url: Location, spec: ShardingSpec | dict | str,
             items: Mapping[int, bytes] | Iterable[tuple[int, bytes]] | None = None, *,
             keys: Any = None, values: Any = None, offsets: Any = None,
             progress: bool = False, buffer_bytes: int = DEFAULT_BUFFER_BYTES,
             spill_dir: str | None = None, info: bool = True, durable: bool = True,
             overwrite: bool = False,
             storage_options: StorageOptions | None = None) -> ShardedKV:
    """Write a whole store at ``url``: from a mapping or an iterable of (key, bytes), or from
    arrays (``keys=``, ``values=``, ``offsets=``).

    Parameters
    ----------
    url
        Where (a local path, any fsspec URL, or an open Storage).
    spec
        The sharding spec (or its JSON).
    items
        The store's contents as a mapping or an iterable of (key, bytes) pairs, of any
        number: past ``buffer_bytes`` they are partitioned by shard into temporary files (in
        ``spill_dir``) and each shard is built from its own, so memory stays about
        ``buffer_bytes`` plus one shard's index (16 bytes per key of that shard).
    keys, values, offsets
        Instead of ``items``: ``keys`` a sequence or array of n uint64 keys; ``values`` one
        buffer (bytes, bytearray, memoryview, a uint8 array) in which value i is
        ``values[offsets[i]:offsets[i + 1]]`` (``offsets``: n + 1 non-decreasing integers),
        or a 2-D (n, size) array whose rows are the values, or a list of n bytes. No Python
        object per key is made; memory is the arrays plus about 12 bytes per key.
    buffer_bytes, spill_dir
        See ``items``.
    info
        Record the spec in ``<url>/info`` (``{"sharding": ...}``, other members kept).
    durable
        Fsync local writes (see :func:`open_kv`); False for scratch work.
    overwrite
        Replace a store or layer already at ``url`` (its shards, or whatever the layer owns,
        are removed first, its info last); by default such a destination is refused.
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).

    Returns
    -------
    ShardedKV
        The store written, open for reading (mode "r"), as every ``write_*`` returns what it
        wrote.

    Raises
    ------
    SpecError
        A bad spec.
    ExistsError
        ``url`` holds a store or layer (the message says which), and not ``overwrite``.
    InvalidKeyError
        A key outside [0, 2**64) (or not an integer).
    TypeError
        A value that is not bytes, or ``items`` given together with ``keys``.
    ValueError
        ``offsets`` that do not fit ``keys`` and ``values``.

    Notes
    -----
    The last value of a repeated key wins. Each shard holds its values in key order, so the
    shard files depend on the contents only.
    """
    spec = as_spec(spec)
    arrays = None
    if keys is not None or values is not None:
        if items is not None:
            raise TypeError("write_kv takes items or keys= and values=, not both")
        arrays = value_arrays(keys, values, offsets)
    elif items is None:
        raise TypeError("write_kv needs items, or keys= and values=")
    elif isinstance(items, Mapping) and len(items) * _MAPPING_KEY_BYTES <= buffer_bytes:
        # in memory already: written shard by shard straight from it, no staging or spilling
        # (what that costs per key stays within the buffer)
        arrays = value_arrays(list(items.keys()), list(items.values()))
    storage = open_storage(url, durable=durable, storage_options=storage_options)
    claim(storage, overwrite=overwrite)
    if arrays is not None:
        write_arrays(storage, spec, *arrays, progress=progress, info=info, durable=durable)
        return open_kv(storage, spec)
    kv = open_kv(storage, spec, "w", staged_bytes=buffer_bytes, spill_dir=spill_dir, info=info,
                 durable=durable)
    try:
        kv.update(items)
        kv.commit(progress=progress)
    finally:
        kv.close()
    return open_kv(storage, spec)


def write_arrays(url: Location, spec: ShardingSpec | dict | str,
                 keys: np.ndarray, values: Values, *, progress: bool = False,
                 info: bool = True, durable: bool = True) -> None:
    """:func:`write_kv` from arrays in the form :func:`value_arrays` gives, into a
    destination that holds no store (see :func:`ngshard.destination.claim`)."""
    spec = as_spec(spec)
    storage = open_storage(url, durable=durable, expect="precomputed")
    if storage.local_root is not None:
        os.makedirs(storage.local_root, exist_ok=True)
        remove_stale(storage.local_root)
    order, shards, runs, minishards = _by_shard(spec, keys)

    def write_one(job: tuple[int, int, int]) -> None:
        shard, a, b = job
        pos = order[a:b]
        # the shard's keys gathered once from the big arrays; sorted there, where they are
        # small (random reads of the big ones miss the cache)
        write_shard(storage, spec, shard, keys[pos], values, rows=pos,
                    minishards=minishards[pos], encoded=False)

    present = [(s, a, b) for s, (a, b) in zip(shards.tolist(), runs.tolist())]
    for _ in progress_bar(bounded_map(write_one, present, _IN_FLIGHT), total=len(present),
                          desc="writing shards", unit="shard", enabled=progress):
        pass
    if info:
        record_spec(storage, spec)


def _by_shard(spec: ShardingSpec, keys: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The positions of the keys sorted by shard (stable), the shards present with the
    [start, end) of each one's run there, and every key's minishard, in the narrowest dtypes.
    Hashing and sorting go a block at a time, so no temporary is larger than a block."""
    n = len(keys)
    nums = np.empty(n, uint_dtype(spec.num_shards))
    minishards = np.empty(n, uint_dtype(spec.num_minishards))
    for a in range(0, n, KEY_BLOCK):
        nums[a:a + KEY_BLOCK], minishards[a:a + KEY_BLOCK] = spec.locate(keys[a:a + KEY_BLOCK])
    order = np.empty(n, np.int32 if n < 2**31 else np.int64)
    if spec.shard_bits > _COUNTING_SORT_BITS:  # too many shards to count: one big sort
        order[:] = np.argsort(nums, kind="stable")
        ordered = nums[order]
        firsts = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        runs = np.stack([np.r_[0, firsts], np.r_[firsts, n]], axis=1).astype(np.int64)
        return order, ordered[runs[:, 0]].astype(np.uint64), runs, minishards
    # a counting sort: each block's positions go straight to their shard's place
    counts = np.zeros(spec.num_shards, np.int64)
    for a in range(0, n, KEY_BLOCK):
        counts += np.bincount(nums[a:a + KEY_BLOCK], minlength=spec.num_shards)
    ends = np.cumsum(counts)
    cursor = ends - counts
    for a in range(0, n, KEY_BLOCK):
        block = nums[a:a + KEY_BLOCK]
        by_shard = np.argsort(block, kind="stable")  # by radix
        found = block[by_shard]
        here = np.bincount(block, minlength=spec.num_shards)
        within = np.arange(len(block)) - (np.cumsum(here) - here)[found]
        order[cursor[found] + within] = by_shard + a
        cursor += here
    present = np.flatnonzero(counts)
    runs = np.stack([ends[present] - counts[present], ends[present]], axis=1)
    return order, present.astype(np.uint64), runs, minishards

