"""The closed sets of strings ngshard's public signatures take, as ``Literal`` types, and
:data:`Blob`, the bytes ngshard hands around.

Type checkers and IDEs read them from the signatures; the checks at run time read the same
values from here (``typing.get_args``), so a value is added in one place only::

    from ngshard.types import Mode
    def keep(url: str, mode: Mode = "r") -> ...
"""

from __future__ import annotations

from typing import Literal

__all__ = ["Blob", "Compress", "DataEncoding", "Encoding", "HashName", "IndexLocation", "LayerType",
           "MemoryOrder", "Mode", "Strategy", "VolumeMode"]

#: How a sharded store is opened: read only, update, update or create, create anew.
Mode = Literal["r", "r+", "a", "w"]
#: How a volume is opened: read only, or staged updates.
VolumeMode = Literal["r", "r+"]
#: How a sharded store's commit writes a changed shard (see :func:`ngshard.open_kv`).
Strategy = Literal["auto", "append", "rewrite"]
#: The ``hash`` of a sharding spec.
HashName = Literal["identity", "murmurhash3_x86_128"]
#: A sharding spec's ``data_encoding`` and ``minishard_index_encoding``.
DataEncoding = Literal["raw", "gzip"]
#: A precomputed volume scale's chunk ``encoding``.
Encoding = Literal["raw", "jpeg", "png", "compressed_segmentation", "compresso", "crackle",
                   "jxl"]
#: A precomputed volume's ``type``.
LayerType = Literal["image", "segmentation"]
#: A writer's ``compress=`` for unsharded files (their ``.gz``, ``.br``, ``.zstd`` twins);
#: None (plain files) is written ``Compress | None``.
Compress = Literal["gzip", "br", "zstd"]
#: Where a zarr ``sharding_indexed`` shard keeps its index.
IndexLocation = Literal["start", "end"]
#: How a chunk's values lie in memory: "C" (the last axis fastest) or "F" (the first).
MemoryOrder = Literal["C", "F"]

#: Bytes as ngshard hands them around without copying: ``bytes``, a ``bytearray`` (what
#: libdeflate gives) or a ``memoryview`` of a larger read.
Blob = bytes | bytearray | memoryview

#: What an error message names as the place of a fault: a str, or an object whose str()
#: makes it only when a message is written (a chunk's location costs more to spell than a
#: small chunk costs to decode).
Place = object
