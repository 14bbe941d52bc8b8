"""StoredChunks: the chunk source of a staged array over any chunk store, through a codec.

A :class:`~ngshard.chunkstore.ChunkStore` holds encoded chunks by grid position; a
:class:`ChunkCodec` turns a chunk's bytes into values and back (precomputed: the scale's
encoding, Fortran order, edge chunks clipped; zarr: the codec pipeline, C order, whole edge
chunks, chunks of only the fill value not stored). This adapter is the one place that fetches
and decodes chunks in batches on threads, encodes and stages them, and commits. An owner (the
array's handle) checks and adopts resizes and writes the array's metadata after the data.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from ..chunkstore import Blob, ChunkStore
from ..commitplan import CommitPlan
from ..errors import NotFoundError
from ..limits import CACHED_READ, STAGE_BLOCK_BYTES
from ..progress import progress_bar
from ..storage.index_cache import IndexCache
from ..threads import pmap, pstart
from ..types import MemoryOrder, Place
from .geometry import Geometry
from .source import ChunkSource


def _immutable(chunk: np.ndarray) -> bool:
    """Whether ``chunk``'s memory is all of a bytes object (a decompressor's output), which
    nothing can change or share: a cache keeps it as it is (anything else, a copy)."""
    root = chunk
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    return isinstance(root, bytes) and len(root) == chunk.nbytes


class ChunkCodec:
    """How one format's chunks turn into values and back.

    Attributes
    ----------
    order : {"C", "F"}
        The memory order the codec wants chunks in ("C" or "F"): encoding is then a copy.
    fill_value
        What an absent chunk holds.
    inner : tuple of int
        Trailing axes of the array held whole inside every chunk (a volume's channels),
        which the store's grid does not have.
    """

    order: MemoryOrder = "C"
    fill_value: Any = 0
    inner: tuple[int, ...] = ()

    def decode(self, blob: Blob, extent: Sequence[int], where: Place) -> np.ndarray:
        """The values of the chunk of shape ``extent`` (clipped at the array's edge) that
        ``blob`` holds (a whole chunk where the format stores edge chunks whole); they may
        lie in a buffer that this thread's next decode overwrites, for callers that copy
        them out at once. CorruptDataError naming ``where`` (a str, or a :class:`Where`
        whose str() is made only then) if it does not decode."""
        raise NotImplementedError

    def encode(self, chunk: np.ndarray, copy: bool = True) -> Blob | None:
        """The stored bytes of ``chunk`` (clipped at the array's edge), None where the
        chunk is not stored (only the fill value); ``copy=False``: the bytes may be a view
        of ``chunk``'s memory."""
        raise NotImplementedError

    def encoded_sizes(self, extents: np.ndarray) -> np.ndarray | None:
        """Bytes of the stored chunk of each of ``extents`` ((k, ndim) shapes) where they are
        known before encoding and every chunk is stored (raw values), else None: such chunks
        are encoded by :meth:`encode_into` straight into the blocks the store keeps."""
        return None

    def encode_into(self, chunk: np.ndarray, out: memoryview) -> None:
        """Encode ``chunk`` into ``out``, of the size :meth:`encoded_sizes` gave."""
        raise NotImplementedError


class Where:
    """A chunk's location (``store.where``) for messages, made only when one is written
    (it costs more than decoding a small chunk): what a codec's ``where`` gets."""

    __slots__ = ("store", "position")

    def __init__(self, store: ChunkStore, position: np.ndarray) -> None:
        self.store, self.position = store, position

    def __str__(self) -> str:
        return self.store.where(self.position.tolist())


class Owner(Protocol):
    """The array's metadata, as a staged resize changes it (a volume's or a zarr handle)."""

    def check_resize(self, shape: tuple[int, ...]) -> None: ...

    def resize(self, shape: tuple[int, ...]) -> None: ...

    def describe_metadata(self) -> str: ...

    def write_metadata(self) -> None: ...


class StoredChunks(ChunkSource):
    """The chunks of ``store``, decoded and encoded by ``codec``; ``owner`` hears of resizes
    and writes the metadata after the data of a commit that changes the shape."""

    def __init__(self, store: ChunkStore, codec: ChunkCodec, owner: Owner, *,
                 progress: bool = False, empty: bool = False, cache_bytes: int = 0) -> None:
        self.store, self.codec, self.owner = store, codec, owner
        #: Decoded chunks by their stored bytes' tag (``ChunkStore.get_tagged``), within
        #: ``cache_bytes``, for reads of few chunks (a read of more than 1 / CACHED_READ of
        #: it would only push out what is there). Tied to the generation of the object the
        #: bytes came from, as the index cache is: a chunk rewritten by anyone is decoded
        #: again. Shared by the decoding threads, under ``_lock``.
        self.cache: IndexCache[np.ndarray] | None = IndexCache(cache_bytes) \
            if cache_bytes > 0 else None
        self._lock = threading.Lock()
        self.progress, self.empty = progress, empty
        self.dtype, self.fill_value = store.dtype, codec.fill_value
        self.clipped_edges = store.clipped_edges
        self.ndim = len(store.shape)  # the store's axes: the array's, less the codec's inner
        self.geometry = Geometry((*store.shape, *codec.inner), (*store.chunks, *codec.inner),
                                 codec.order)
        self.committed = self.geometry.shape
        self._reads = threading.local()  # .strict: see strict_reads

    def _bar(self, n: int, desc: str) -> Iterable[int]:
        batch = self.batch
        return progress_bar(range(0, n, batch), desc=desc, unit="batch", total=-(-n // batch),
                            enabled=self.progress and n > batch)

    # --- chunks ----------------------------------------------------------------------------

    def read(self, positions: np.ndarray,
             consume: Callable[[int, np.ndarray | None], None]) -> None:
        batch, cache = self.batch, self.cache
        if cache is not None and len(positions) * math.prod(self.geometry.chunks) * \
                self.dtype.itemsize > cache.max_bytes // CACHED_READ:
            cache = None  # a large read: it would push out every chunk cached
        for first in self._bar(len(positions), "reading chunks"):
            part = positions[first:first + batch]
            # in the store's groups, each decoded on threads while the next is fetched here:
            # the decoding starts after the first group's fetch rather than the whole batch's
            waits: list[Callable[[], list]] = []
            try:
                for group in self.store.read_groups(part[:, :self.ndim]):
                    waits.append(self._read_group(first + group, part[group], consume, cache))
            finally:
                failed = sys.exc_info()[1] is not None
                for wait in waits:
                    try:
                        wait()
                    except Exception:
                        if not failed:
                            raise

    def _read_group(self, numbers: np.ndarray, part: np.ndarray,
                    consume: Callable[[int, np.ndarray | None], None],
                    cache: IndexCache[np.ndarray] | None) -> Callable[[], list]:
        """Fetch the chunks at ``part`` (the ``numbers``-th of the read), but those
        ``cache`` holds (None: no cache for this read), and start decoding them on threads;
        the function returned waits for that."""
        codec, store, n = self.codec, self.store, self.ndim
        lock, hits = self._lock, {}

        def known(tag: Any) -> bool:  # (object, generation, place): see get_tagged
            assert cache is not None
            with lock:
                chunk = cache.get((tag[0], tag[2]), tag[1])  # type: ignore[arg-type]
            if chunk is not None:
                hits[tag] = chunk
            return chunk is not None

        blobs, tags = store.get_tagged(part[:, :n], known if cache is not None else None)
        numbers = numbers.tolist()
        for i, tag in enumerate(tags):
            if blobs[i] is None and tag in hits:
                consume(numbers[i], hits[tag])
        absent = [i for i, blob in enumerate(blobs) if blob is None and tags[i] not in hits]
        if absent and getattr(self._reads, "strict", False):
            self._missing(part, absent)
        for i in absent:
            consume(numbers[i], None)  # nothing to decode, no thread needed
        present = [i for i, blob in enumerate(blobs) if blob is not None]
        extents = self.geometry.extents(part[present]).tolist() if present else []

        def one(j: int) -> None:
            i = present[j]
            chunk = codec.decode(blobs[i], extents[j],  # type: ignore[arg-type]
                                 Where(store, part[i, :n]))
            tag: Any = tags[i]
            if cache is not None and tag is not None:
                kept = chunk if _immutable(chunk) else chunk.copy()
                kept.flags.writeable = False
                with lock:
                    cache.put((tag[0], tag[2]), kept, tag[1],  # type: ignore[arg-type]
                              kept.nbytes)
            consume(numbers[i], chunk)

        return pstart(one, range(len(present)), min_items=2)  # a chunk a thread pays

    @contextmanager
    def strict_reads(self, strict: bool = True) -> Iterator[None]:
        """Within it, absent chunks that this thread reads raise NotFoundError rather than
        read as the fill value (a Volume's ``fill_missing=False``, for its reads but not for
        the reads an assignment makes); per thread, as one array may be read on many."""
        before = getattr(self._reads, "strict", False)
        self._reads.strict = strict
        try:
            yield
        finally:
            self._reads.strict = before

    def _missing(self, part: np.ndarray, absent: list[int]) -> None:
        more = f" (and {len(absent) - 1} more chunks of this read)" if len(absent) > 1 else ""
        raise NotFoundError(f"{self.store.where(part[absent[0], :self.ndim].tolist())}: the "
                            f"chunk is absent{more}, and the volume was opened with "
                            f"fill_missing=False")

    def write(self, positions: np.ndarray, chunks: Sequence[np.ndarray], *,
              stable: bool = False) -> None:
        sizes = self.codec.encoded_sizes(self.geometry.extents(positions))
        positions = positions[:, :self.ndim]
        if sizes is not None:
            self._write_blocks(positions, chunks, sizes)
            return
        encode, batch = self.codec.encode, self.batch
        done, blobs = 0, []
        for first in self._bar(len(positions), "writing chunks"):
            blobs += pmap(lambda c: encode(c, not stable), chunks[first:first + batch],
                          min_items=2)
            # stable chunks may be views of memory that stays: staged all at once, the store
            # lays them out in the order its commit writes them (one run per shard)
            if not stable or first + batch >= len(positions):
                self._stage(positions[done:first + batch], blobs)
                done, blobs = first + batch, []

    def _write_blocks(self, positions: np.ndarray, chunks: Sequence[np.ndarray],
                      sizes: np.ndarray) -> None:
        """Encode chunks of sizes known beforehand straight into blocks that the store keeps
        (no copy between the encoding and the file), laid out in the order its commit
        writes them, so that a shard's chunks are one run of one block; a block holds the
        batches that start within its first ``STAGE_BLOCK_BYTES``."""
        order = self.store.write_order(positions)
        sizes = sizes[order]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        encode_into, batch, n = self.codec.encode_into, self.batch, len(positions)
        start = end = 0  # the chunks of the block being filled
        block = np.zeros(0, np.uint8)
        for first in self._bar(n, "writing chunks"):
            if first == end:  # a new block: the batches that start in its window
                if end:
                    self.store.put_block(positions[order[start:end]], sizes[start:end], block)
                start, end = first, first + batch
                while end < n and offsets[end] - offsets[start] < STAGE_BLOCK_BYTES:
                    end += batch
                end = min(end, n)
                block = np.empty(offsets[end] - offsets[start], np.uint8)
            view, base = block.data, offsets[start]

            def one(j: int, view=view, base=base) -> None:
                encode_into(chunks[order[j]], view[offsets[j] - base:offsets[j + 1] - base])

            pmap(one, range(first, min(n, first + batch)), min_items=2)
        if end:
            self.store.put_block(positions[order[start:end]], sizes[start:end], block)

    def _stage(self, positions: np.ndarray, blobs: list[Blob | None]) -> None:
        gone = np.fromiter((b is None for b in blobs), bool, len(blobs))
        if gone.any():
            self.store.delete(positions[gone])
            positions = positions[~gone]
        kept = [b for b in blobs if b is not None]
        if kept:
            self.store.put(positions, kept)

    def delete(self, positions: np.ndarray) -> None:
        self.store.delete(positions[:, :self.ndim])

    # --- shape -----------------------------------------------------------------------------

    def check_resize(self, shape: tuple[int, ...]) -> None:
        self.owner.check_resize(shape)

    def resize(self, shape: tuple[int, ...]) -> None:
        self.owner.resize(shape)
        self.geometry = self.geometry.resized(shape)

    # --- committing ------------------------------------------------------------------------

    def spill(self) -> None:
        self.store.spill()

    def plan(self, positions: np.ndarray, nbytes: int) -> CommitPlan:
        plan = self.store.plan(positions[:, :self.ndim], nbytes)
        if self.geometry.shape != self.committed:
            plan = replace(plan, then=(*plan.then, self.owner.describe_metadata()))
        return plan

    def commit(self) -> None:
        self.store.commit(progress=self.progress)
        if self.cache is not None:  # new generations miss anyway; this frees the memory
            with self._lock:
                self.cache.forget()
        if self.geometry.shape != self.committed:
            self.owner.write_metadata()  # last: the data it describes is stored
        self.committed = self.geometry.shape
        self.empty = False

    def abort(self) -> None:
        self.store.abort()
        if self.geometry.shape != self.committed:
            self.owner.resize(self.committed)
            self.geometry = self.geometry.resized(self.committed)
