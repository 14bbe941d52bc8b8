"""ZarrArray: numpy indexing over a Zarr v3 (or v2) array, sharded or not; ``open_array`` and
``create_array``.

The voxels go through a staged-changes array (``ngshard.staged``, seed 003) over the array's
granules (inner chunks when sharded). ``arr[...] = value`` writes at once, as zarr-python
does: the assignment is staged, then committed, each shard written whole. To batch many
assignments into one write of each shard, stage them::

    with arr.staged() as s:      # commits on leaving the block, aborts on an exception
        for z in range(n):
            s[z] = slices[z]     # in memory until the commit
        s.resize((n + 10, *arr.shape[1:]))
        print(s.plan())          # what the commit will write
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..commitplan import CommitPlan
from ..destination import claim
from ..errors import ReadOnlyError, SpecError
from ..limits import DEFAULT_CHUNK_CACHE_BYTES
from ..staged import DEFAULT_STAGED_BYTES, StagedChangesArray
from ..staged.stored import StoredChunks
from ..storage import Location, Storage, StorageOptions, open_source, require_family
from ..types import IndexLocation
from .chunks import ZarrChunkStore
from .codecs import Bytes
from .dtypes import encode_fill, v3_name
from .handle import ArrayHandle, write_metadata
from .metadata import V3_NAME, parse_v3, v3_document

DEFAULT_CODECS = [Bytes().to_json(), {"name": "zstd", "configuration": {"level": 0,
                                                                        "checksum": False}}]
INDEX_CODECS = [Bytes().to_json(), {"name": "crc32c"}]


def open_array(url: str | os.PathLike | dict | Storage, *,
               staged_bytes: int = DEFAULT_STAGED_BYTES,
               chunk_cache_bytes: int = DEFAULT_CHUNK_CACHE_BYTES,
               storage_options: StorageOptions | None = None) -> ZarrArray:
    """Open the Zarr array (v3 ``zarr.json`` or v2 ``.zarray``) at ``url``.

    Parameters
    ----------
    url
        A path, any fsspec URL, a Neuroglancer source (``zarr://...``, ``zarr2://``,
        ``zarr3://``, ``gs://b/p/|zarr3:``), a tensorstore spec dict of the zarr3, zarr or
        zarr2 driver, or an open Storage.
    staged_bytes
        Memory for staged (decoded) chunks, as for :func:`ngshard.open_volume`.
    chunk_cache_bytes
        Memory for decoded inner chunks of sharded arrays kept between reads (small reads
        only; each is tied to its shard's generation, so a shard rewritten by any writer
        is read again); 0: none.
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).

    Raises
    ------
    NotFoundError
        Neither metadata file is there.
    SpecError
        Malformed metadata, or a data type, codec or key encoding ngshard does not read
        (the message names the file and what); a URL that names precomputed, or the other
        zarr version than the one stored.
    MissingDependencyError
        A blosc array without numcodecs.
    """
    return ZarrArray(ArrayHandle.open(url, storage_options=storage_options),
                     staged_bytes=staged_bytes, chunk_cache_bytes=chunk_cache_bytes)


def create_array(url: Location, shape: Sequence[int], dtype: Any,
                 chunks: Sequence[int], shards: Sequence[int] | None = None,
                 codecs: list[dict] | None = None, index_location: IndexLocation = "end",
                 fill_value: Any = 0, dimension_names: Sequence[str | None] | None = None,
                 attributes: dict | None = None, overwrite: bool = False,
                 storage_options: StorageOptions | None = None) -> ZarrArray:
    """Create a Zarr v3 array at ``url`` (writes its ``zarr.json``) and open it.

    Parameters
    ----------
    chunks
        The chunk shape; with ``shards``, the inner chunk shape (the read/write granule).
    shards
        The shard shape, a multiple of ``chunks``: the array is stored with the
        ``sharding_indexed`` codec, ``codecs`` applied to each inner chunk, the index
        encoded as bytes + crc32c at ``index_location`` ("end" or "start").
    codecs
        Codec JSON (``[{"name": "bytes", ...}, {"name": "gzip", ...}]``); default bytes
        little endian + zstd.
    overwrite
        Replace an array, group or precomputed layer already at ``url`` (its chunks and
        members are removed first); by default it is refused.
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).

    Raises
    ------
    SpecError
        Bad arguments; a URL that names precomputed or Zarr v2 (this writes Zarr v3).
    ExistsError
        An array, group or layer there already, and not ``overwrite``.
    """
    storage, source = open_source(url, storage_options=storage_options)
    require_family(source, url, "zarr")
    if source.format == "zarr2":
        raise SpecError(f"{url}: create_array writes Zarr v3, the URL says zarr2")
    if not storage.supports_writes:
        raise ReadOnlyError(f"{storage.url}: cannot create an array on read-only storage")
    shape, chunks = tuple(int(n) for n in shape), tuple(int(c) for c in chunks)
    dtype = np.dtype(dtype)
    codecs = list(DEFAULT_CODECS if codecs is None else codecs)
    grid = chunks
    if shards is not None:
        grid = tuple(int(s) for s in shards)
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(chunks), "codecs": codecs, "index_codecs": INDEX_CODECS,
            "index_location": index_location}}]
    doc = v3_document(shape, v3_name(dtype), grid, encode_fill(fill_value, dtype), codecs,
                      dimension_names, attributes)
    meta = parse_v3(doc, storage.path(V3_NAME))
    claim(storage, overwrite=overwrite)
    write_metadata(storage, meta)
    return ZarrArray(ArrayHandle(storage, meta), empty=True)


class ZarrArray:
    """A Zarr array over its :class:`ArrayHandle` (metadata, chunk store, codec): numpy basic
    and orthogonal indexing in its own axis order; assignment writes at once. Open with
    :func:`open_array`, make one with :func:`create_array`; ``empty``: nothing is stored
    yet (a new array), so nothing is read until the first commit; ``chunk_cache_bytes``: as
    :func:`open_array` takes it."""

    def __init__(self, handle: ArrayHandle, *, empty: bool = False,
                 staged_bytes: int = DEFAULT_STAGED_BYTES,
                 chunk_cache_bytes: int = DEFAULT_CHUNK_CACHE_BYTES) -> None:
        #: The array's metadata, chunk store and codec (what this array writes through).
        self.handle = handle
        source = StoredChunks(handle.store, handle.codec, handle, empty=empty,
                              cache_bytes=chunk_cache_bytes)
        #: The staged-changes array holding the values (its ``_*_plan`` methods print plans).
        self.array = StagedChangesArray(source, staged_bytes)

    storage = property(lambda self: self.handle.storage)
    meta = property(lambda self: self.handle.meta, doc="The metadata (a staged resize's).")
    url = property(lambda self: self.storage.url)
    shape = property(lambda self: self.array.shape, doc="The shape (with a staged resize).")
    dtype = property(lambda self: self.meta.dtype)
    fill_value = property(lambda self: self.meta.fill_value)
    ndim = property(lambda self: len(self.shape))
    chunks = property(lambda self: self.meta.chunks, doc="The granule: inner chunk shape.")
    shards = property(lambda self: self.meta.chunk_shape if self.meta.sharding else None)
    attrs = property(lambda self: self.meta.attributes)
    dimension_names = property(lambda self: self.meta.dimension_names)
    zarr_format = property(lambda self: self.meta.zarr_format)
    inner_codecs = property(lambda self: self.meta.chunk_codecs.to_json(),
                            doc="The codec JSON applied to each granule.")

    def __repr__(self) -> str:
        shards = f", shards={self.shards}" if self.shards else ""
        return (f"ZarrArray({self.url!r}, shape={self.shape}, dtype={self.dtype}, "
                f"chunks={self.chunks}{shards}, zarr_format={self.zarr_format})")

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> np.ndarray:
        return self.array[index]

    def read_many(self, indices: Sequence[Any]) -> list[np.ndarray]:
        """The values at each index (``[arr[i] for i in indices]``) in one batch: every
        granule any of them touches is read and decoded once, the decoding on threads (as
        tensorstore's ``ts.Batch`` groups reads). For many small boxes.

        Parameters
        ----------
        indices
            Basic or orthogonal indices, as ``arr[index]`` takes.

        Returns
        -------
        list of numpy.ndarray
            One array per index, in their order.

        Raises
        ------
        IndexError
            A bad index, before anything is read.
        CorruptDataError
            A granule that does not decode (the message names its shard and position).
        """
        return self.array.read_many(indices)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a ZarrArray's values are read from storage: always copied")
        out = self[...]
        return out if dtype is None else out.astype(dtype, copy=False)

    def _writable(self) -> None:
        if not self.storage.supports_writes:
            raise ReadOnlyError(f"{self.url}: read-only storage")

    def _commit_now(self) -> None:
        try:
            self.array.commit()
        except BaseException:
            self.array.abort()
            raise

    def __setitem__(self, index: Any, value: Any) -> None:
        """Write at once (basic or orthogonal index): changed granules are encoded and
        their shards written whole; anything staged (see :meth:`staged`) goes too."""
        self._writable()
        try:
            self.array[index] = value
        except BaseException:
            self.array.abort()
            raise
        self._commit_now()

    def resize(self, shape: Sequence[int]) -> None:
        """Change the shape at once (``zarr.json`` rewritten; granules past the new edges
        deleted; new regions read as the fill value)."""
        self._writable()
        self.array.resize(tuple(shape))
        self._commit_now()

    def staged(self) -> StagedZarrArray:
        """Stage assignments and resizes in memory, written by one commit (see the module's
        docstring)."""
        self._writable()
        return StagedZarrArray(self)

    def encoded(self) -> ZarrChunkStore:
        """The encoded granules by grid position: the one
        :class:`~ngshard.chunkstore.ChunkStore` this array reads and writes through, for
        moving granules between formats without decoding them. Puts there are staged until
        its ``commit()``, or the next assignment, writes them with the assigned values (an
        array just created reads as the fill value until its first commit: it reads nothing
        stored before then)."""
        return self.handle.store

    def chunk_positions(self) -> np.ndarray:
        """(n, ndim) grid positions of the granules present (stored, or put through
        :meth:`encoded` and not committed yet)."""
        return self.handle.store.list_positions()

    def delete_chunks(self) -> None:
        """Remove every stored chunk object (or shard) of the array."""
        reader = self.handle.store.reader
        names = reader.meta.key_encoding.keys(np.array(reader.stored_keys(), np.int64
                                                       ).reshape(-1, self.ndim))
        for name in names:
            self.storage.delete(name)


class StagedZarrArray:
    """Assignments and resizes of a ZarrArray held in memory until :meth:`commit` (reads see
    them). As a context manager: committed on leaving, dropped on an exception."""

    def __init__(self, owner: ZarrArray) -> None:
        self.owner, self.array = owner, owner.array

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)

    def __getitem__(self, index: Any) -> np.ndarray:
        return self.array[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self.array[index] = value

    def resize(self, shape: Sequence[int]) -> None:
        """Stage a new shape (edge chunks are whole: growing exposes the fill value, never
        what a stored edge chunk held past the old edge)."""
        self.array.resize(tuple(shape))

    def load(self) -> None:
        """Read every stored granule into memory."""
        self.array.load()

    def plan(self) -> CommitPlan:
        """What :meth:`commit` will do: granules to encode, then shards to write and how
        (``.shards``), then the metadata after a resize."""
        return self.array.plan()

    def commit(self) -> None:
        self.array.commit()

    def abort(self) -> None:
        self.array.abort()

    def __enter__(self) -> StagedZarrArray:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()
