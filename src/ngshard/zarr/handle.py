"""ArrayHandle: a zarr array at the metadata level, with no staged values: its metadata (read
and written here), chunk store (``chunks.py``, the array's one writer) and codec (the codec
pipeline of a granule: whole chunks at the edge, the part past the array's shape holding the
fill value; C order, or Fortran order where a ``transpose`` codec reverses the axes, so
encoding is a plain copy either way; granules of only the fill value are not stored).

``ZarrArray`` is numpy indexing over a handle; conversion tasks use handles directly. A handle
pickles as its URL and zarr format: the copy reopens the array (nothing staged travels).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ..chunkstore import Blob
from ..compression import zstd_prefix
from ..errors import NotFoundError, SpecError
from ..jsondoc import Doc, dump_json, parse_json
from ..limits import ZSTD_BLOCK_BYTES
from ..staged.stored import ChunkCodec
from ..storage import Storage, StorageOptions, open_source, require_family
from ..types import MemoryOrder, Place
from .chunks import ZarrChunkStore
from .codecs import Transpose, Zstd
from .dtypes import is_fill
from .metadata import V2_ATTRS, V2_NAME, V3_NAME, ArrayMetadata, parse_v2, parse_v3
from .reader import ChunkReader


def _json(storage: Storage, name: str) -> Any:
    raw = storage.read(name)
    return None if raw is None else parse_json(raw, storage.path(name))


def read_metadata(storage: Storage, version: int | None = None) -> ArrayMetadata:
    """The metadata of the array at ``storage``: ``zarr.json``, else ``.zarray`` (only the
    one of ``version`` 2 or 3 when given).

    Raises
    ------
    NotFoundError
        Neither is there.
    SpecError
        Malformed metadata, or only the other version's.
    """
    doc = _json(storage, V3_NAME) if version != 2 else None
    if doc is not None:
        return parse_v3(doc, storage.path(V3_NAME))
    doc = _json(storage, V2_NAME) if version != 3 else None
    if doc is not None:
        attrs = _json(storage, V2_ATTRS)
        if attrs is not None:
            attrs = Doc(attrs, storage.path(V2_ATTRS)).value  # an object, or named here
        return parse_v2(doc, attrs, storage.path(V2_NAME))
    if version is not None:
        other = {2: V3_NAME, 3: V2_NAME}.get(version)
        if other is not None and storage.stat(other) is not None:
            raise SpecError(f"{storage.url}: Zarr v{version} was asked for, but only "
                            f"{storage.path(other)} (Zarr v{5 - version}) is there")
    raise NotFoundError(f"{storage.url}: no zarr.json or .zarray there: not a zarr array")


def write_metadata(storage: Storage, meta: ArrayMetadata) -> None:
    """Write the array's metadata object (atomically)."""
    storage.write(meta.name, [dump_json(meta.to_json(), indent=2).encode()])


def memory_order(meta: ArrayMetadata) -> MemoryOrder:
    """"F" where the granule's codecs begin by reversing its axes, else "C"."""
    first = meta.chunk_codecs.array[:1]
    reverse = tuple(range(len(meta.shape)))[::-1]
    return "F" if first == (Transpose(reverse),) and len(meta.shape) > 1 else "C"


class ArrayCodec(ChunkCodec):
    """A granule's values and its stored bytes, through the array's codec pipeline."""


    def __init__(self, meta: ArrayMetadata) -> None:
        self.codecs, self.chunks, self.dtype = meta.chunk_codecs, meta.chunks, meta.dtype
        self.fill_value, self.order = meta.fill_value, memory_order(meta)
        # zstd of the C-order values, without a checksum (a prefix would leave it unchecked)
        zstd = self.codecs.bytes_codecs[:1]
        self.decodes_prefix = self.codecs.token(self.dtype).startswith("zstd ") and \
            isinstance(zstd[0], Zstd) and not zstd[0].checksum

    def decode(self, blob: Blob, extent, where: Place, out: np.ndarray | None = None,
               planes: int | None = None) -> np.ndarray:
        plane = math.prod(self.chunks[1:]) * self.dtype.itemsize
        if planes is not None and (self.chunks[0] - planes) * plane >= ZSTD_BLOCK_BYTES:
            # a block or more past the planes read: decoding stops before it
            head = zstd_prefix(blob, self.chunks[0] * plane, planes * plane)
            if head is not None:
                return self.codecs.array_bytes.decode(head, (planes, *self.chunks[1:]),
                                                      self.dtype, self.fill_value, where)
        return self.codecs.decode(blob, self.chunks, self.dtype, self.fill_value, where)

    def encode(self, chunk: np.ndarray, copy: bool = True) -> Blob | None:
        if is_fill(chunk, self.fill_value):
            return None
        if chunk.shape != self.chunks:  # an edge chunk: stored whole
            whole = np.full(self.chunks, self.fill_value, self.dtype, order=self.order)
            whole[tuple(slice(0, n) for n in chunk.shape)] = chunk
            chunk, copy = whole, False
        blob = self.codecs.encode(chunk, self.fill_value)
        return bytes(blob) if copy and isinstance(blob, memoryview) else blob


class ArrayHandle:
    """The array at ``storage`` described by ``meta``."""

    def __init__(self, storage: Storage, meta: ArrayMetadata) -> None:
        self.storage = storage
        #: The one store the array's granules are read and written through.
        self.store = ZarrChunkStore(ChunkReader(storage, meta))
        self.codec = ArrayCodec(meta)

    @classmethod
    def open(cls, url: str | os.PathLike | dict | Storage, version: int | None = None, *,
             storage_options: StorageOptions | None = None) -> ArrayHandle:
        """Open the array at ``url`` (any URL form :func:`open_array` takes, with its
        ``storage_options``); ``version`` 2 or 3 reads only that format's metadata (a URL
        may name it too).

        Raises
        ------
        NotFoundError, SpecError
            As :func:`read_metadata`; a URL that names precomputed.
        """
        storage, source = open_source(url, storage_options=storage_options)
        require_family(source, url, "zarr")
        if source.format in ("zarr2", "zarr3"):  # the URL names the version
            version = 2 if source.format == "zarr2" else 3
        return cls(storage, read_metadata(storage, version))

    def __reduce__(self) -> tuple:
        # the storage travels as what reopens it (its URL and storage options)
        return ArrayHandle.open, (self.storage, self.meta.zarr_format)

    def __repr__(self) -> str:
        return f"ArrayHandle({self.storage.url!r}, shape={self.meta.shape})"

    @property
    def meta(self) -> ArrayMetadata:
        """The metadata (with the shape a staged resize gave the array)."""
        return self.store.reader.meta

    @property
    def url(self) -> str:
        return self.storage.url

    # --- resizing (the staged array's owner) -------------------------------------------------

    def check_resize(self, shape: tuple[int, ...]) -> None:
        """Any shape of as many axes will do."""

    def resize(self, shape: tuple[int, ...]) -> None:
        self.store.resize(shape)

    def describe_metadata(self) -> str:
        return f"{self.meta.name}: shape {list(self.meta.shape)}"

    def write_metadata(self) -> None:
        write_metadata(self.storage, self.meta)
