"""ScaleHandle: one scale of a precomputed volume at the metadata level, with no staged voxels:
its info (read and written here), chunk grid, chunk store (sharded or a file per chunk) and
codec (the scale's encoding, Fortran order, edge chunks clipped).

``Volume`` is numpy indexing over a handle; conversion tasks, the Dask writer, the command
line, the server and ``PrecomputedStore`` use handles directly. A handle pickles as its URL,
scale and mode: the copy reopens the scale (nothing staged travels), so a task that carries
one stays a few hundred bytes. A copy of one opened "r+" is a writer too: one writer per
sharded scale at a time (conversion tasks open theirs "r" and write whole shards).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from ..chunkstore import Blob
from ..errors import NotFoundError, SpecError
from ..kinds import VOLUME, kind_of
from ..limits import CHUNK_SLACK, CHUNK_SLACK_BYTES
from ..sharded import ShardedKV
from ..sharded.infofile import INFO, read_info, write_info
from ..staged import DEFAULT_STAGED_BYTES
from ..staged.stored import ChunkCodec
from ..storage import Storage, StorageOptions, open_source, require_family
from ..storage.twins import Twins
from ..types import Place
from .chunks import FileChunks, ScaleStore, ShardedChunks
from .encodings import decode_chunk, encode_chunk, require_codec
from .grid import ChunkGrid
from .info import Scale, VolumeInfo, chunk_nbytes
from .spec_scale import select_scale
from .vectors import xyz


def read_volume_info(storage: Storage) -> VolumeInfo:
    """The validated info of the volume at ``storage``.

    Raises
    ------
    NotFoundError
        No info file there.
    SpecError
        An info that is not a volume's, or is invalid (the message names the member).
    """
    doc = read_info(storage)
    if doc is None:
        raise NotFoundError(f"{storage.path(INFO)}: no info file: not a precomputed layer")
    if kind_of(doc) != VOLUME:
        raise SpecError(f"{storage.path(INFO)}: not a volume (no scales)")
    return VolumeInfo.from_json(doc, storage.path(INFO))


def write_volume_info(storage: Storage, info: VolumeInfo) -> None:
    """Write a volume's info atomically."""
    write_info(storage, info.to_json())


class ScaleCodec(ChunkCodec):
    """A scale's chunks as (x, y, z, channel) arrays, Fortran ordered as the format stores
    them (a raw chunk encodes as a plain copy), edge chunks clipped."""

    order = "F"

    def __init__(self, scale: Scale, dtype: np.dtype, channels: int) -> None:
        self.encoding, self.dtype, self.inner = scale.encoding, dtype, (channels,)
        self.block = scale.compressed_segmentation_block_size
        # the kernel writes any strides: a read's chunks go straight into its result
        self.decodes_into = self.encoding == "compressed_segmentation"

    def decode(self, blob: Blob, extent, where: Place, out: np.ndarray | None = None,
               planes: int | None = None) -> np.ndarray:
        return decode_chunk(blob, self.encoding, extent, self.dtype, block_size=self.block,
                            where=where, reuse=True, out=out)

    def encode(self, chunk: np.ndarray, copy: bool = True) -> Blob:
        if self.encoding not in ("raw", "compressed_segmentation") and not (
                chunk.flags.f_contiguous or chunk.flags.c_contiguous):
            chunk = chunk.copy(order="K")  # gathered first (the kernels take any strides)
        # raw chunks of stable Fortran-ordered memory (slabs being dropped) go as views
        return encode_chunk(chunk, self.encoding, block_size=self.block, copy=copy)

    def encoded_sizes(self, extents: np.ndarray) -> np.ndarray | None:
        if self.encoding != "raw":
            return None
        return np.prod(extents, axis=1, dtype=np.int64) * self.dtype.itemsize

    def encode_into(self, chunk: np.ndarray, out: memoryview) -> None:
        encode_chunk(chunk, "raw", out=out)


class ScaleHandle:
    """Scale ``scale`` (index or key) of the volume at ``storage`` described by ``info``.

    Parameters
    ----------
    mode
        "r", or "r+" to write chunks through :attr:`store`.
    compress
        How an unsharded scale's chunk files are written: None (plain files), "gzip", "br"
        or "zstd" (cloud-volume's ``compress``).
    staged_bytes
        Memory for a sharded store's staged encoded chunks, past which they are spilled.

    Raises
    ------
    SpecError
        A bad mode or scale, or ``compress`` for a sharded scale.
    """

    def __init__(self, storage: Storage, info: VolumeInfo, scale: int | str = 0,
                 mode: str = "r", *, compress: str | None = None,
                 staged_bytes: int = DEFAULT_STAGED_BYTES) -> None:
        if mode not in ("r", "r+"):
            raise SpecError(f"mode must be 'r' or 'r+', got {mode!r}")
        self.storage, self.info, self.mode = storage, info, mode
        self.scale = chosen = info.scale(scale)
        self.dtype = np.dtype(info.data_type)
        #: Where the scale's chunks or shards are.
        self.chunk_storage = storage.child(chosen.key)
        if chosen.sharding is not None and compress is not None:
            raise SpecError(f"{self.chunk_storage.url}: compress= is for a file per chunk; a "
                            f"sharded scale compresses as its sharding spec's data_encoding "
                            f"says")
        #: The twin unsharded chunks are written as (None: plain files), see FileChunks.
        self.compress = compress
        grid = ChunkGrid(chosen.size, chosen.chunk_size, chosen.voxel_offset)
        token = f"raw F {self.dtype.newbyteorder('<').str}" if chosen.encoding == "raw" else ""
        limit = self.max_chunk_bytes()
        #: The one store the scale's chunks are read and written through.
        self.store: ScaleStore
        if chosen.sharding is not None:
            kv = ShardedKV(self.chunk_storage, chosen.sharding, "r" if mode == "r" else "a",
                           max_value_bytes=limit, staged_bytes=staged_bytes)
            self.store = ShardedChunks(kv, grid, self.dtype, token)
        else:
            files = Twins(self.chunk_storage, limit, compress, writable=mode != "r")
            self.store = FileChunks(files, grid, self.dtype, token)
        self.codec = ScaleCodec(chosen, self.dtype, info.num_channels)

    @classmethod
    def open(cls, url: str | os.PathLike | dict | Storage, scale: int | str = 0,
             mode: str = "r", *, compress: str | None = None,
             staged_bytes: int = DEFAULT_STAGED_BYTES,
             storage_options: StorageOptions | None = None) -> ScaleHandle:
        """Open scale ``scale`` of the volume at ``url`` (any URL form :func:`open_volume`
        takes, with its ``storage_options``; a tensorstore spec may choose the scale).

        Raises
        ------
        NotFoundError
            No info at ``url``.
        SpecError
            An invalid info, scale or mode; a URL that names zarr.
        MissingDependencyError
            The scale's encoding needs a package that is not installed.
        """
        storage, source = open_source(url, storage_options=storage_options)
        require_family(source, url, "precomputed")
        info = read_volume_info(storage)
        scale = select_scale(info, source, scale, storage.url)
        # a layer whose chunks cannot be decoded here is refused now, naming what to install
        require_codec(info.scale(scale).encoding, writing=mode != "r")
        return cls(storage, info, scale, mode, compress=compress, staged_bytes=staged_bytes)

    def __reduce__(self) -> tuple:
        # the storage travels as what reopens it (its URL and storage options)
        return _reopen, (self.storage, self.scale.key, self.mode, self.compress)

    def __repr__(self) -> str:
        return (f"ScaleHandle({self.storage.url!r}, scale={self.scale.key!r}, "
                f"mode={self.mode!r})")

    url = property(lambda self: self.storage.url, doc="The layer's URL.")
    grid = property(lambda self: self.store.grid,
                    doc="The chunk grid (of the size a staged resize gave the scale).")

    def max_chunk_bytes(self) -> int:
        """The most bytes one encoded chunk can take: a gzip-wrapped chunk inflating past it
        is corrupt (raw chunks have exactly their voxels' size; the other encodings are
        allowed a generous multiple, as tables and headers can outgrow the voxels)."""
        raw = chunk_nbytes(self.scale.chunk_size, self.info.num_channels, self.dtype)
        return raw if self.scale.encoding == "raw" else CHUNK_SLACK * raw + CHUNK_SLACK_BYTES

    # --- resizing (the staged array's owner) -------------------------------------------------

    def check_resize(self, shape: tuple[int, ...]) -> None:
        """SpecError if the scale cannot take ``shape`` (x, y, z, channels)."""
        channels = self.info.num_channels
        if shape[3] != channels:
            raise SpecError(f"a volume's channels cannot be resized ({channels} -> "
                            f"{shape[3]}): num_channels holds for every scale")
        grid, scale = self.grid, self.scale
        new = ChunkGrid(xyz(shape[:3]), scale.chunk_size, scale.voxel_offset)
        if scale.sharding is not None and new.bits != grid.bits:
            raise SpecError(
                f"resizing {self.chunk_storage.url} from {scale.size} to {tuple(shape[:3])} "
                f"changes its chunk grid from {grid.shape} to {new.shape}, and so the Morton "
                f"bits per axis from {grid.bits} to {new.bits}: every sharded chunk ID would "
                f"change. Write a new scale instead, or resize within the grid's powers of 2")

    def resize(self, shape: tuple[int, ...]) -> None:
        """Take the size ``shape[:3]`` (chunks are named after it from now on)."""
        self.scale = dataclasses.replace(self.scale, size=xyz(int(n) for n in shape[:3]))
        self.store.resize(self.scale.size)

    def describe_metadata(self) -> str:
        return f"the info: scale {self.scale.key} size {self.scale.size}"

    def write_metadata(self) -> None:
        """Record the scale's size in the info, as the info is stored now (another scale may
        have been added since it was read)."""
        self.info = read_volume_info(self.storage).with_scale(self.scale)
        write_volume_info(self.storage, self.info)


def _reopen(storage: Storage, scale: str, mode: str, compress: str | None) -> ScaleHandle:
    return ScaleHandle.open(storage, scale, mode, compress=compress)

