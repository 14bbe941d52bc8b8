"""The Neuroglancer sharded format (``neuroglancer_uint64_sharded_v1``).

Bottom to top: ``spec``/``hashing`` (key arithmetic), ``format`` (pure shard and minishard index
bytes), ``update`` (pure: old shard + changes -> the bytes an append adds), ``unindexed``
(bytes no index entry points at, kept by rewrites), ``shard_writer`` (the one writer of whole
shards), ``changes``, ``staging`` and ``spill`` (changes held in memory or spilled to disk, one
shard's at a time out), ``legacy`` (the two-file variant's names), ``reader`` (index cache,
lookups), ``listing``, ``plan`` and ``commit`` (deciding and writing), ``kv`` (the ShardedKV
facade), ``opener`` (open_kv: a store by URL, its spec found and checked), ``inputs`` and
``bulk`` (write_kv from pairs or arrays), ``infofile``. It knows no
layer kind: what it must know of one, it asks :mod:`ngshard.kinds`.
"""

from .bulk import write_kv
from .kv import ShardedKV
from .opener import open_kv
from .spec import ShardingSpec

__all__ = ["ShardedKV", "ShardingSpec", "open_kv", "write_kv"]
