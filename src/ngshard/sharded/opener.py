"""open_kv: a sharded store opened by URL, its spec given or found (the store's info, or the
parent layer's), checked against what the store records, and writes refused to a layer kind
whose unindexed entries the caller cannot measure."""

from __future__ import annotations

from ..errors import SpecError
from ..limits import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_STAGED_BYTES,
)
from ..storage import Location, StorageOptions, open_storage
from ..types import Mode, Strategy
from .infofile import as_spec, check_recorded, spec_from_info
from .kv import ShardedKV
from .spec import ShardingSpec
from .unindexed import UnindexedSizes, refuse_blind_writes


def open_kv(url: Location, spec: ShardingSpec | dict | str | None = None,
            mode: Mode = "r", *, strategy: Strategy = "auto", compact_ratio: float | None = 0.5,
            staged_bytes: int = DEFAULT_STAGED_BYTES, spill_dir: str | None = None,
            cache_bytes: int = DEFAULT_CACHE_BYTES, info: bool = True,
            max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
            durable: bool = True, unindexed: UnindexedSizes | None = None,
            storage_options: StorageOptions | None = None) -> ShardedKV:
    """Open the sharded key-value store at ``url``.

    Parameters
    ----------
    url
        A local path, any fsspec URL (``file://``, ``memory://``, ``http(s)://``, ``s3://``,
        ``gs://``), a Neuroglancer source (``precomputed://...``) or an open
        :class:`~ngshard.storage.Storage`.
    spec
        A :class:`ShardingSpec`, its JSON (object, text or file name), or None to read the
        ``sharding`` member of ``<url>/info`` (or the spec the parent layer's info gives
        the folder ``url`` names, such as a scale's).
    mode
        "r" read only; "r+" update an existing store; "a" update, creating the store if
        needed; "w" create a new store, replacing any there (zarr's "w": the shard files
        already there are removed on commit; :func:`write_kv` refuses one instead unless
        told ``overwrite=True``).
        Changes are staged (spilling past ``staged_bytes`` to ``spill_dir``) and written by
        ``commit()`` or on clean exit of a ``with`` block.
    strategy
        "append" (local files: append changes and patch the shard index; cost follows the
        change, not the shard), "rewrite" (read, merge, replace whole shards; object stores),
        or "auto". Appending leaves garbage; a shard whose garbage would pass
        ``compact_ratio`` is compacted instead (None: never).
    cache_bytes
        Budget of the shard and minishard index cache (256 MiB by default).
    max_value_bytes
        The most a gzip-encoded value may inflate to (256 MiB by default): a value past it
        raises CorruptDataError rather than exhausting memory.
    durable
        Local writes are fsynced (data before it is renamed into place or pointed at, the
        directory after a rename), so a power cut leaves every shard old or new; False skips
        that for scratch work.
    info
        Writers record the spec in ``<url>/info`` on commit, so later opens need none.
    unindexed
        For stores that keep unindexed entries (bytes no index entry points at) right before
        their values: ``unindexed(keys, values)`` gives their lengths (the layer supplies
        it); every rewrite and compaction keeps them. A store of a layer kind that keeps
        them (:func:`ngshard.kinds.unindexed_entries`) is refused for writing without it.
    storage_options
        How to reach the storage (credentials, ``anon``, ``endpoint_url``, ...) and how
        often to retry: ``retries`` (10) is how many times a request that fails transiently
        is sent again and how often one read may find a shard replaced under it (another
        writer committing) before giving up; ``retry_seconds`` (60) bounds the time of all
        tries. See :mod:`ngshard.storage.options`.

    Returns
    -------
    ShardedKV

    Raises
    ------
    SpecError
        A bad spec, mode or strategy, no spec to be found, or a spec that contradicts the
        store's info.
    NotFoundError
        Mode "r+" where there is no store.

    Examples
    --------
    >>> with open_kv("memory://doc-kv", {"@type": "neuroglancer_uint64_sharded_v1",
    ...              "hash": "identity", "preshift_bits": 0, "minishard_bits": 1,
    ...              "shard_bits": 1}, mode="w") as kv:
    ...     kv[7] = b"seven"
    >>> open_kv("memory://doc-kv")[7]
    b'seven'
    """
    storage = open_storage(url, durable=durable, expect="precomputed",
                           storage_options=storage_options)
    if spec is None:
        if mode == "w":
            raise SpecError("mode 'w' needs a sharding spec")
        spec = spec_from_info(storage)
    else:
        spec = as_spec(spec)
        if mode in ("r+", "a"):
            check_recorded(storage, spec)
    if mode != "r" and unindexed is None:
        refuse_blind_writes(storage)
    return ShardedKV(storage, spec, mode, strategy=strategy, compact_ratio=compact_ratio,
                     staged_bytes=staged_bytes, spill_dir=spill_dir, cache_bytes=cache_bytes,
                     info=info, max_value_bytes=max_value_bytes,
                     unindexed=unindexed)

