"""Transfers of segment layers: skeletons and multi-resolution meshes copied as their encoded
bytes between a file per segment and shards (and from one sharding to another), legacy meshes
re-encoded (their format is lossless: float32 vertices), in batches of segments, memory
bounded by the batch and the shard writer's buffer. One process: the values are small and
the work is the I/O, which the batched reads and the shard writer already overlap."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..destination import claim
from ..errors import NotFoundError
from ..kinds import LEGACY_MESHES, MESHES, SKELETONS, kind_of
from ..layers import open_layer
from ..layers.mesh_writer import store_meshes, write_legacy_meshes
from ..layers.sharding import resolve_sharding
from ..layers.store import write_segments
from ..limits import MESH_BATCH
from ..progress import progress_bar
from ..sharded.infofile import read_info, write_info
from ..storage import open_storage


def transfer_segments(src: str, dst: str, *, sharding: Any = "auto", overwrite: bool = False,
                      progress: bool = False) -> dict[str, int]:
    """Copy the skeleton or mesh layer ``src`` to ``dst`` with ``sharding`` ("auto", "none"
    or a spec); see :func:`ngshard.transfer`. Returns ``segments`` and ``bytes``."""
    storage = open_storage(dst)
    doc = read_info(open_storage(src))
    if doc is None:
        raise NotFoundError(f"{src}: no info file: not a precomputed layer")
    kind = kind_of(doc)
    layer = open_layer(src)
    ids = np.sort(layer.keys_array())
    stats = {"tasks": 1, "run": 1, "skipped": 0, "chunks": len(ids), "bytes": 0}
    batches = progress_bar([ids[i:i + MESH_BATCH] for i in range(0, len(ids), MESH_BATCH)],
                           enabled=progress, desc="copying", unit="batch")
    sharding = None if sharding in (None, "none") else sharding
    if kind == LEGACY_MESHES:
        write_legacy_meshes(storage, ((k, m) for b in batches for k, m in
                                      sorted(layer.get_many(b).items())),
                            sharding=sharding, overwrite=overwrite)
        return stats
    claim(storage, overwrite=overwrite)
    # auto: sharded by the count and mean size of the values, as the writers choose
    mean = layer.store.get_many(ids[:64]) if len(ids) else {}
    size = sum(map(len, mean.values())) / max(1, len(mean)) if mean else None
    spec = resolve_sharding(sharding, len(ids), size,
                            data_encoding="raw" if kind == MESHES else "gzip")
    if kind == MESHES:
        def meshes() -> Iterator[list[tuple[int, bytes, bytes]]]:
            for b in batches:
                found = layer.encoded_many(b)
                stats["bytes"] += sum(len(d) + len(m) for d, m in found.values())
                yield [(k, *found[k]) for k in sorted(found)]

        store_meshes(storage, spec, meshes())
    else:
        assert kind == SKELETONS

        def skeletons() -> Iterator[tuple[int, bytes]]:
            for b in batches:
                found = layer.store.get_many(b)
                for k in sorted(found):
                    stats["bytes"] += len(found[k])
                    yield k, found[k]

        write_segments(storage, spec, skeletons())
    info = {k: v for k, v in doc.items() if k != "sharding"}
    if spec is not None:
        info["sharding"] = spec.to_json()
    write_info(storage, info)  # the info last
    return stats
