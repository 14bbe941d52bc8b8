"""The uint64 id -> bytes store under every segment layer, in its two layouts: sharded (a
:class:`~ngshard.sharded.ShardedKV` whose keys are the ids) or unsharded (a file per id, named
by a layer-specific rule such as ``<id>`` or ``<id>.index``, or its compressed twin: every
unsharded file of a layer is read through :attr:`SegmentStore.files`).

Reads are batched: many ids cost one ``get_many`` of the sharded store (ranges coalesced) or
one concurrent ``read_many`` of the files, never a loop over storage per id. Writes stream
items in batches, so memory stays bounded by the batch (sharded stores spill past
``buffer_bytes``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from .._arrays import unique
from ..compression import gzip_compress, twin_suffix
from ..errors import SpecError
from ..limits import DEFAULT_BUFFER_BYTES, GZIP_RUN_BYTES, UNSHARDED_BATCH
from ..sharded import ShardingSpec, open_kv
from ..sharded.kv import ShardedKV
from ..sharded.shard_writer import ShardWriter
from ..sharded.spec import as_key_array
from ..storage import Storage
from ..storage.twins import Twins, write_twins
from ..threads import bounded_map
from ..types import Blob

_DECIMAL = re.compile(r"[0-9]{1,20}")


class SegmentStore:
    """The values of one layer by uint64 id.

    Parameters
    ----------
    storage
        The layer's directory (or the sub-directory of an annotation index).
    sharding
        The layer's sharding spec, None for a file per id.
    suffix
        Unsharded file names are ``<id><suffix>`` (``".index"`` for mesh manifests).
    """

    def __init__(self, storage: Storage, sharding: ShardingSpec | None, suffix: str = "",
                 *, kv: ShardedKV | None = None) -> None:
        self.storage, self.sharding, self.suffix = storage, sharding, suffix
        self.kv = kv if kv is not None or sharding is None else \
            open_kv(storage, sharding, info=False)
        #: The layer's unsharded files by name, read from the plain file or its twin.
        self.files = Twins(storage)

    def name(self, key: int) -> str:
        """The file of ``key`` in the unsharded layout."""
        return f"{key}{self.suffix}"

    def where(self, key: int) -> str:
        """Where ``key`` lives, for messages."""
        if self.kv is None:
            return self.storage.path(self.name(key))
        shard = self.kv.spec.shard_filename(self.kv.spec.locate_one(int(key))[0])
        return self.storage.path(shard)

    def get_many(self, keys: Iterable[int] | np.ndarray) -> dict[int, Blob]:
        """{key: value} of the keys present, in one batch."""
        wanted = unique(as_key_array(keys))
        if self.kv is not None:
            return self.kv.get_many(wanted)
        ints = wanted.tolist()
        blobs = self.files.read_many([self.name(k) for k in ints])
        return {k: b for k, b in zip(ints, blobs) if b is not None}

    def get(self, key: int) -> Blob | None:
        """The value of one key, None if absent."""
        return self.get_many([key]).get(int(key))

    def keys_array(self) -> np.ndarray:
        """Every id present, sorted (from the shard indices, or the file names)."""
        if self.kv is not None:
            return np.sort(self.kv.keys_array())
        n = len(self.suffix)
        stems = [name[:len(name) - n] for name in self.files.list()
                 if name.endswith(self.suffix)]
        ids = [int(s) for s in stems if _DECIMAL.fullmatch(s) and int(s) < 1 << 64]
        return np.sort(np.array(ids, np.uint64))


def unsharded_twin(compress: str | None, sharding: object) -> str:
    """The twin suffix a layer writer's ``compress=`` gives its unsharded files; SpecError
    for a bad value, or for any with a ``sharding`` argument other than None (shards say
    their compression in the spec)."""
    suffix = twin_suffix(compress)
    if suffix and sharding is not None:
        raise SpecError("compress= is for unsharded files (sharding=None); a sharded layer "
                        "compresses as its sharding spec's data_encoding says")
    return suffix


def write_segments(storage: Storage, sharding: ShardingSpec | None,
                   items: Iterable[tuple[int, bytes]], *, suffix: str = "",
                   buffer_bytes: int | None = None, progress: bool = False,
                   twin: str = "") -> None:
    """Write (id, bytes) pairs as a whole store: complete shard files (sharded; memory bounded
    by ``buffer_bytes``, the rest spilled) or a file per id, written in batches (each as its
    ``twin``, see :func:`unsharded_twin`, where given).

    The sharded store's spec is not recorded in an info of its own: the layer's info holds it.
    """
    if sharding is not None:
        # Runs of about 8 MiB, gzipped (when the spec says so) on a worker while the next is
        # encoded, grouped by shard as they come (a shard's bytes do not say how its values
        # were encoded: the shards are built raw), each shard written once at the end.
        runs = _runs(items, GZIP_RUN_BYTES)
        spec = sharding
        if sharding.data_encoding == "gzip":
            spec = replace(sharding, data_encoding="raw")
            runs = bounded_map(_gzip_run, runs, 2)
        writer = ShardWriter(storage, spec, buffer_bytes or DEFAULT_BUFFER_BYTES)
        for run in runs:
            writer.add_many(np.fromiter((k for k, _ in run), np.uint64, len(run)),
                            [v for _, v in run])
        writer.close(progress=progress)
        return
    it = iter(items)
    for batch in iter(lambda: list(itertools.islice(it, UNSHARDED_BATCH)), []):
        write_twins(storage, [(f"{k}{suffix}", v) for k, v in batch], twin)


def _gzip_run(run: list[tuple[int, Blob]]) -> list[tuple[int, Blob]]:
    return [(k, gzip_compress(v)) for k, v in run]


def _runs(items: Iterable[tuple[int, bytes]], nbytes: int) -> Iterator[list]:
    """Lists of consecutive (key, value) pairs holding about ``nbytes`` of values each."""
    run: list = []
    size = 0
    for item in items:
        run.append(item)
        size += len(item[1])
        if size >= nbytes:
            yield run
            run, size = [], 0
    if run:
        yield run


def batched(items: Iterable, size: int) -> Iterator[list]:
    """Lists of up to ``size`` consecutive items."""
    it = iter(items)
    return iter(lambda: list(itertools.islice(it, size)), [])


def pairs(items: Any) -> Iterable[tuple[Any, Any]]:
    """(key, value) pairs of a mapping or an iterable of pairs."""
    return items.items() if hasattr(items, "items") else items


def count_of(items: object) -> int | None:
    """How many items, where that is known without consuming them."""
    try:
        return len(items)  # type: ignore[arg-type]
    except TypeError:
        return None

