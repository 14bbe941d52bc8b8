"""PrecomputedStore: a read-only zarr-python 3 Store that shows a Neuroglancer precomputed
volume, sharded or not, as a virtual Zarr v3 array (or an OME-Zarr group of its scales), so
that ``zarr.open_array``, ``dask.array.from_zarr`` and xarray read it with their own APIs.

Nothing is converted or written: ``zarr.json`` documents are generated from the info
(``store_metadata``), and each chunk key ``c/<x>/<y>/<z>/0`` is translated to the chunk at that
grid position (a Morton-coded chunk in a shard or a chunk file) and read through the volume's
chunk store (``store_levels``). Absent chunks are absent keys: zarr fills them with 0.

The store is a view of the layer's directory: the files the volume is made of (``info``,
``provenance``, the scales' directories, and the mesh, skeleton and segment property
directories the info names) are replaced by the Zarr view; any other file there is shown as
it is stored (a directory that is not a layer yet reads as an ordinary read-only store).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import (
    CorruptDataError,
    MissingDependencyError,
    NotFoundError,
    ReadOnlyError,
    SpecError,
)
from ..kinds import VOLUME, kind_of
from ..sharded.infofile import INFO, read_info
from ..storage import Location, StorageOptions, open_storage
from ..types import Blob
from ..volume import VolumeInfo
from ..volume.encodings import check_encoding, require_codec
from ..volume.handle import ScaleHandle
from .store_levels import Level, hidden_names, safe_key
from .store_metadata import array_metadata, group_metadata, level_name, to_bytes

try:
    from zarr.abc.store import (
        ByteRequest,
        OffsetByteRequest,
        RangeByteRequest,
        Store,
        SuffixByteRequest,
    )
    from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
except ImportError as e:
    raise MissingDependencyError(f"PrecomputedStore is a zarr-python Store: pip install "
                                 f"'ngshard[zarr]' ({e})") from None


class PrecomputedStore(Store):
    """A precomputed volume as a read-only Zarr v3 store.

    Parameters
    ----------
    url
        The layer's directory (with its ``info``): a local path, any fsspec URL, or a Storage.
    scale
        The scale's index (0 is the finest) or key, shown as the root array of shape
        (x, y, z, c); or None for the whole layer as an OME-Zarr 0.5 multiscale group with one
        array per scale, ``s0``, ``s1``, ... (open it with ``zarr.open_group(store,
        mode="r")``).
    read_only
        Must be True (the default): the store cannot write.
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).

    Raises
    ------
    NotFoundError
        Nothing at ``url``: no info, and no directory (a wrong path).
    SpecError
        An info that is not a volume's, an unknown scale, or an encoding ngshard cannot decode.
    MissingDependencyError
        The encoding needs a package that is not installed (jpeg, png).

    Examples
    --------
    >>> a = zarr.open_array(store=PrecomputedStore("gs://bucket/em", scale=0))  # doctest: +SKIP
    >>> a[0:512, 0:512, 100, 0].shape                                          # doctest: +SKIP
    (512, 512)
    """

    supports_writes = False
    supports_deletes = False
    supports_listing = True

    def __init__(self, url: Location, scale: int | str | None = 0, *,
                 read_only: bool = True, storage_options: StorageOptions | None = None
                 ) -> None:
        if not read_only:
            raise ReadOnlyError(f"{url}: a PrecomputedStore is read-only (read_only=False "
                                f"was asked for)")
        super().__init__(read_only=True)
        self._scale = scale
        self.storage = open_storage(url, expect="precomputed", storage_options=storage_options)
        self._docs: dict[str, bytes] = {}
        self._levels: list[Level] = []
        self._hidden: tuple[frozenset[str], tuple[str, ...]] = (frozenset(), ())
        self._pending: dict[asyncio.AbstractEventLoop, list] = {}
        self._scale_id: int | None = None
        self.info = self._read_info()
        if self.info is not None:
            self._present(self.info)

    def _read_info(self) -> VolumeInfo | None:
        doc = read_info(self.storage)
        where = self.storage.path(INFO)
        if doc is None:
            local = self.storage.local_root
            if (os.path.isdir(local) if local is not None else self.storage.list(dirs=True)):
                return None  # a directory that is not a layer (yet): its files only
            raise NotFoundError(f"{where}: no precomputed layer at {self.storage.url} (no "
                                f"info file, and no such directory)")
        if kind_of(doc) != VOLUME:
            raise SpecError(f"{where}: not a volume (no scales): a PrecomputedStore shows "
                            f"image and segmentation layers")
        return VolumeInfo.from_json(doc, where)

    def _present(self, info: VolumeInfo) -> None:
        """The metadata documents and the levels of the Zarr view."""
        where = self.storage.path(INFO)
        scale_id = None
        try:
            if self._scale is not None:
                scale_id = info.scales.index(info.scale(self._scale))
        except SpecError as e:
            raise SpecError(f"{where}: {e}") from None
        self._scale_id = scale_id
        which = range(len(info.scales)) if scale_id is None else [scale_id]
        for i in which:
            scale = info.scales[i]
            try:
                check_encoding(scale.encoding, info.data_type, info.num_channels)
            except SpecError as e:
                raise SpecError(f"{where}: scale {scale.key}: {e}") from None
            require_codec(scale.encoding, writing=False)
        if scale_id is None:
            self._docs["zarr.json"] = to_bytes(group_metadata(info))
            prefixes = [(i, f"{level_name(i)}/") for i in which]
        else:
            prefixes = [(scale_id, "")]
        for i, prefix in prefixes:
            meta = to_bytes(array_metadata(info, info.scales[i]))
            self._docs[f"{prefix}zarr.json"] = meta
            self._levels.append(Level(ScaleHandle(self.storage, info, i), prefix, meta))
        self._hidden = hidden_names(info)

    # --- identity --------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PrecomputedStore) and self.storage.url == other.storage.url
                and self._scale_id == other._scale_id
                and (self.info is not None or self._scale == other._scale))

    def __hash__(self) -> int:
        return hash((self.storage.url, self._scale_id))

    def __repr__(self) -> str:
        return f"PrecomputedStore({self.storage.url!r}, scale={self._scale!r})"

    def __getstate__(self) -> dict[str, Any]:
        # the storage travels as what reopens it (its URL and storage options)
        return {"url": self.storage, "scale": self._scale}

    def __setstate__(self, state: dict[str, Any]) -> None:
        PrecomputedStore.__init__(self, state["url"], state["scale"])

    def with_read_only(self, read_only: bool = False) -> Store:
        """A copy, read-only as this store always is (a writable one cannot be had)."""
        if not read_only:
            return super().with_read_only(read_only)
        return type(self)(self.storage, self._scale)

    @property
    def supports_consolidated_metadata(self) -> bool:
        return False  # consolidating writes metadata

    # --- reading ---------------------------------------------------------------------------

    def _route(self, key: str) -> tuple[str, Any]:
        """("doc", bytes), ("chunk", (level, position)), ("file", key) or ("none", None)."""
        if key in self._docs:
            return "doc", self._docs[key]
        for n, level in enumerate(self._levels):
            if key.startswith(level.chunk_prefix):
                pos = level.position(key)
                return ("none", None) if pos is None else ("chunk", (n, pos))
        files, dirs = self._hidden
        if key in files or key.startswith(dirs) or not safe_key(key):
            return "none", None
        return "file", key

    def read_many(self, keys: Sequence[str]) -> list[Blob | None]:
        """The whole value of each key, None where absent: the chunks of each level in one
        batch through its chunk store, other files in one batch of reads."""
        out: list[Blob | None] = [None] * len(keys)
        chunks: dict[int, tuple[list[int], list[tuple[int, int, int]]]] = {}
        files: list[int] = []
        for i, key in enumerate(keys):
            kind, what = self._route(key)
            if kind == "doc":
                out[i] = what
            elif kind == "chunk":
                at, positions = chunks.setdefault(what[0], ([], []))
                at.append(i)
                positions.append(what[1])
            elif kind == "file":
                files.append(i)
        for n, (at, positions) in chunks.items():
            for i, blob in zip(at, self._levels[n].read(np.array(positions, np.int64))):
                out[i] = blob
        if files:
            for i, blob in zip(files, self._read_files([keys[i] for i in files])):
                out[i] = blob
        return out

    def _read_files(self, names: list[str]) -> list[bytes | None]:
        """Other files of the directory; a directory (a prefix, not a key) reads as None."""
        try:
            return self.storage.read_many(names)
        except CorruptDataError:  # local storage's answer for a directory: one by one
            return [self._stat_or_read(self.storage.read, n) for n in names]

    @staticmethod
    def _stat_or_read(method, name: str) -> Any:
        try:
            return method(name)
        except CorruptDataError:  # a directory
            return None

    async def get(self, key: str, prototype: BufferPrototype,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        _check_range(byte_range)
        blob = await self._gather(key)
        return None if blob is None else prototype.buffer.from_bytes(_cut(blob, byte_range))

    def get_sync(self, key: str, *, prototype: BufferPrototype | None = None,
                 byte_range: ByteRequest | None = None) -> Buffer | None:
        """:meth:`get` without an event loop."""
        _check_range(byte_range)
        blob = self.read_many([key])[0]
        prototype = prototype or default_buffer_prototype()
        return None if blob is None else prototype.buffer.from_bytes(_cut(blob, byte_range))

    async def _gather(self, key: str) -> Blob | None:
        """Read ``key`` together with the other keys asked for in the same turn of the event
        loop (zarr asks for a read's chunks concurrently, each with its own ``get``): one
        batch of reads, coalesced, off the loop's thread."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        batch = self._pending.get(loop)
        if batch is None:
            batch = self._pending[loop] = []
            loop.call_soon(self._flush, loop)
        batch.append((key, future))
        return await future

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        batch = self._pending.pop(loop)
        work = loop.run_in_executor(None, self.read_many, [key for key, _ in batch])

        def settle(done: asyncio.Future) -> None:
            error = asyncio.CancelledError() if done.cancelled() else done.exception()
            blobs = [None] * len(batch) if error else done.result()
            for (_, future), blob in zip(batch, blobs):
                if future.done():
                    continue  # cancelled
                if error:
                    future.set_exception(error)
                else:
                    future.set_result(blob)

        work.add_done_callback(settle)

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]
                                 ) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        for _, byte_range in key_ranges:
            _check_range(byte_range)
        blobs = await asyncio.to_thread(self.read_many, [k for k, _ in key_ranges])
        return [None if blob is None else prototype.buffer.from_bytes(_cut(blob, r))
                for blob, (_, r) in zip(blobs, key_ranges)]

    async def _get_many(self, requests: Iterable[tuple[str, BufferPrototype,
                                                       ByteRequest | None]]):
        requests = list(requests)
        for _, _, byte_range in requests:
            _check_range(byte_range)
        blobs = await asyncio.to_thread(self.read_many, [key for key, _, _ in requests])
        for (key, prototype, byte_range), blob in zip(requests, blobs):
            yield key, None if blob is None else prototype.buffer.from_bytes(
                _cut(blob, byte_range))

    async def exists(self, key: str) -> bool:
        kind, what = self._route(key)
        if kind == "doc":
            return True
        if kind == "file":
            return await asyncio.to_thread(self._stat_or_read, self.storage.stat, key) \
                is not None
        if kind == "chunk":  # a chunk store knows a chunk by reading it (zarr rarely asks)
            return (await asyncio.to_thread(self.read_many, [key]))[0] is not None
        return False

    async def getsize(self, key: str) -> int:
        kind, what = self._route(key)
        if kind == "doc":
            return len(what)
        if kind == "file":
            info = await asyncio.to_thread(self._stat_or_read, self.storage.stat, key)
            if info is not None:
                return info.size
        elif kind == "chunk" and await self.exists(key):
            return self._levels[what[0]].chunk_nbytes
        raise FileNotFoundError(key)

    # --- writing (refused) -----------------------------------------------------------------

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()

    async def delete(self, key: str) -> None:
        self._check_writable()

    # --- listing ---------------------------------------------------------------------------

    def keys_under(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``: the metadata documents, the chunks present
        (from shard indices or file listings) and the other files of the directory."""
        keys = [k for k in self._docs if k.startswith(prefix)]
        for level in self._levels:
            if level.chunk_prefix.startswith(prefix) or prefix.startswith(level.chunk_prefix):
                keys.extend(k for k in level.chunk_keys() if k.startswith(prefix))
        top = prefix.rpartition("/")[0]
        files, dirs = self._hidden
        if not top or (safe_key(top) and top not in files and not f"{top}/".startswith(dirs)):
            keys.extend(k for k in self._files(top) if k.startswith(prefix))
        return keys

    def _files(self, top: str) -> Iterable[str]:
        """The files under directory ``top`` ("" for the root), hidden ones left out."""
        files, dirs = self._hidden
        storage = self.storage.child(top) if top else self.storage
        base = f"{top}/" if top else ""
        names = storage.list()
        yield from (base + n for n in names if base + n not in files)
        for sub in sorted(set(storage.list(dirs=True)) - set(names)):
            if f"{base}{sub}/" not in dirs:
                yield from self._files(base + sub)

    async def list(self) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(self.keys_under, ""):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in await asyncio.to_thread(self.keys_under, prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/")
        prefix = f"{prefix}/" if prefix else ""
        keys = await asyncio.to_thread(self.keys_under, prefix)
        for name in sorted({k[len(prefix):].split("/", 1)[0] for k in keys}):
            yield name


def _check_range(byte_range: ByteRequest | None) -> None:
    if byte_range is not None and not isinstance(
            byte_range, (RangeByteRequest, OffsetByteRequest, SuffixByteRequest)):
        raise TypeError(f"Unexpected byte_range, got {byte_range!r}")


def _cut(blob: Blob, byte_range: ByteRequest | None) -> Blob:
    """The requested part of a value (Store.get's semantics: ranges past the end are cut
    short)."""
    if byte_range is None:
        return blob
    if isinstance(byte_range, RangeByteRequest):
        return blob[byte_range.start:byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return blob[byte_range.offset:]
    return blob[max(len(blob) - byte_range.suffix, 0):]
