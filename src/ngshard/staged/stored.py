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

from .._arrays import fresh
from ..chunkstore import Blob, ChunkStore
from ..commitplan import CommitPlan
from ..errors import NotFoundError
from ..limits import (
    CACHED_READ,
    ENCODED_BLOCK_BYTES,
    STAGE_BLOCK_BYTES,
    THREADED_DECODE_BYTES,
    WRITE_BEHIND_BYTES,
)
from ..progress import progress_bar
from ..storage.index_cache import IndexCache
from ..threads import ahead, pmap, pstart
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
    #: :meth:`decode` takes ``out`` and decodes straight into it (no copy afterwards).
    decodes_into: bool = False
    #: :meth:`decode` takes ``planes`` and then may decode only those (at less cost).
    decodes_prefix: bool = False

    def decode(self, blob: Blob, extent: Sequence[int], where: Place,
               out: np.ndarray | None = None, planes: int | None = None) -> np.ndarray:
        """The values of the chunk of shape ``extent`` (clipped at the array's edge) that
        ``blob`` holds (a whole chunk where the format stores edge chunks whole); they may
        lie in a buffer that this thread's next decode overwrites, for callers that copy
        them out at once. CorruptDataError naming ``where`` (a str, or a :class:`Where`
        whose str() is made only then) if it does not decode. ``out`` (only where
        :attr:`decodes_into`): an array of shape ``extent``, any strides, decoded into and
        returned. ``planes`` (only where :attr:`decodes_prefix`): the caller reads only the
        first ``planes`` along the chunk's slowest axis in memory (the first in C order),
        and the result may hold only those."""
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

    def read(self, positions: np.ndarray, consume: Callable[[int, np.ndarray | None], None],
             into: Callable[[int], np.ndarray | None] | None = None,
             planes: np.ndarray | None = None) -> None:
        batch, cache = self.batch, self.cache
        if not self.codec.decodes_into:
            into = None
        if not self.codec.decodes_prefix:
            planes = None
        if cache is not None and len(positions) * math.prod(self.geometry.chunks) * \
                self.dtype.itemsize > cache.max_bytes // CACHED_READ:
            cache = None  # a large read: it would push out every chunk cached
        # each batch fetched (every request in one) while the one before is decoded on
        # threads (the cores busy with both); a batch's decoding ends before the next's

        def fetch(first: int) -> tuple[np.ndarray, tuple]:
            numbers = np.arange(first, min(first + batch, len(positions)))
            return numbers, self._fetch(positions[numbers], cache)

        wait: Callable[[], list] = list
        try:
            for numbers, found in ahead(fetch, self._bar(len(positions), "reading chunks")):
                done, wait = wait, list
                done()
                wait = self._decode(numbers, positions[numbers], found, consume, into, cache,
                                    planes)
        finally:
            failed = sys.exc_info()[1] is not None
            try:
                wait()
            except Exception:
                if not failed:
                    raise

    def _fetch(self, part: np.ndarray, cache: IndexCache[np.ndarray] | None) -> tuple:
        """(blobs, tags, hits) of the chunks at ``part``: those ``cache`` holds (None: no
        cache for this read) are not read but found in ``hits`` by their tag."""
        lock, hits = self._lock, {}

        def known(tag: Any) -> bool:  # (object, generation, place): see get_tagged
            assert cache is not None
            with lock:
                chunk = cache.get((tag[0], tag[2]), tag[1])  # type: ignore[arg-type]
            if chunk is not None:
                hits[tag] = chunk
            return chunk is not None

        blobs, tags = self.store.get_tagged(part[:, :self.ndim],
                                            known if cache is not None else None)
        return blobs, tags, hits

    def _decode(self, numbers: np.ndarray, part: np.ndarray, found: tuple,
                consume: Callable[[int, np.ndarray | None], None],
                into: Callable[[int], np.ndarray | None] | None,
                cache: IndexCache[np.ndarray] | None, planes: np.ndarray | None
                ) -> Callable[[], list]:
        """Start decoding the fetched chunks at ``part`` (the ``numbers``-th of the read) on
        threads, into ``into``'s arrays where it gives them, only their first ``planes``
        where given (not for the cache, which keeps whole chunks); the function returned
        waits."""
        codec, store, n, lock = self.codec, self.store, self.ndim, self._lock
        blobs, tags, hits = found
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
            tag: Any = tags[i]
            uncached = cache is None or tag is None
            out = into(numbers[i]) if into is not None and uncached else None
            if out is not None and out.shape == tuple(extents[j]) and \
                    out.dtype == self.dtype:  # straight into it
                codec.decode(blobs[i], extents[j], Where(store, part[i, :n]), out)
                return
            chunk = codec.decode(blobs[i], extents[j], Where(store, part[i, :n]),
                                 planes=int(planes[numbers[i]]) if planes is not None and
                                 uncached else None)
            if cache is not None and tag is not None:
                kept = chunk if _immutable(chunk) else chunk.copy()
                kept.flags.writeable = False
                with lock:
                    cache.put((tag[0], tag[2]), kept, tag[1],  # type: ignore[arg-type]
                              kept.nbytes)
            consume(numbers[i], chunk)

        # on threads from a MiB of chunks (a hand-over costs about what decoding that takes)
        chunk_bytes = math.prod(self.geometry.chunks) * self.dtype.itemsize
        return pstart(one, range(len(present)),
                      min_items=max(2, -(-THREADED_DECODE_BYTES // chunk_bytes)), join=True)

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
        extents = self.geometry.extents(positions)
        sizes = self.codec.encoded_sizes(extents)
        positions = positions[:, :self.ndim]
        if sizes is not None:
            self._write_blocks(positions, chunks, sizes)
            return
        self._write_encoded(positions, chunks, np.prod(extents, axis=1) * self.dtype.itemsize,
                            stable)

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
                block = fresh((offsets[end] - offsets[start],), np.uint8)
            view, base = block.data, offsets[start]

            def one(j: int, view=view, base=base) -> None:
                encode_into(chunks[order[j]], view[offsets[j] - base:offsets[j + 1] - base])

            pmap(one, range(first, min(n, first + batch)), min_items=2)
        if end:
            self.store.put_block(positions[order[start:end]], sizes[start:end], block)

    def _write_encoded(self, positions: np.ndarray, chunks: Sequence[np.ndarray],
                       raw: np.ndarray, stable: bool) -> None:
        """Encode chunks of sizes known only once encoded, a batch at a time on threads in
        the order the store's commit writes them, and copy each batch (on threads) behind
        the last in a block that the store keeps: a shard's chunks are then one run of one
        block, written as it lies (no copy at commit). A block has the address space of
        the raw chunks left to write, up to ``ENCODED_BLOCK_BYTES`` (only what is written
        becomes memory); a batch that does not fit starts the next. ``raw``: each chunk's
        bytes unencoded.

        A write of ``WRITE_BEHIND_BYTES`` raw bytes or more hands each batch over as its own
        block and has the store spill it (write it to the files that become its shards)
        while the threads encode the next: the file writes overlap the encoding instead of
        following it at the commit, which then writes only the shard indices."""
        order = self.store.write_order(positions)
        left = np.cumsum(raw[order][::-1])[::-1].tolist()  # raw bytes from each on
        encode, batch, n = self.codec.encode, self.batch, len(positions)
        block, used = np.zeros(0, np.uint8), 0
        staged: list[tuple[np.ndarray, np.ndarray]] = []  # (positions, sizes)

        def flush() -> None:
            if staged:
                where, sizes = (np.concatenate(p) for p in zip(*staged))
                self.store.put_block(where, sizes, block[:used])
                staged.clear()

        behind = bool(n) and left[0] >= WRITE_BEHIND_BYTES
        for first in self._bar(n, "writing chunks"):
            picks = order[first:first + batch]
            encoded = pstart(lambda j: encode(chunks[j], not stable), picks.tolist(),
                             min_items=2)
            if behind:  # the batch before goes to the files while this one is encoded
                flush()
                block, used = np.zeros(0, np.uint8), 0
                self.store.spill()
            blobs = encoded()
            gone = np.fromiter((b is None for b in blobs), bool, len(blobs))
            if gone.any():  # not stored (a zarr chunk of only the fill value)
                self.store.delete(positions[picks[gone]])
            kept = [b for b in blobs if b is not None]
            if not kept:
                continue
            sizes = np.fromiter(map(len, kept), np.int64, len(kept))
            total = int(sizes.sum())
            if used + total > len(block):
                flush()
                room = total if behind else max(total, min(ENCODED_BLOCK_BYTES, left[first]))
                block = fresh((room,), np.uint8)
                used = 0
            ends = (used + np.cumsum(sizes)).tolist()

            def put(j: int, ends=ends, kept=kept, sizes=sizes, block=block) -> None:
                # numpy copies without the GIL, so the batch's copies run side by side
                block[ends[j] - int(sizes[j]):ends[j]] = np.frombuffer(kept[j], np.uint8)

            pmap(put, range(len(kept)), min_items=2)
            used = ends[-1]
            staged.append((positions[picks[~gone]], sizes))
        flush()
        if behind:
            self.store.spill()

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
