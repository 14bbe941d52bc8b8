"""Volume: numpy indexing over one scale of a precomputed layer, sharded or not.

Indices run from 0 over [x, y, z, channel] (voxel_offset is applied for you). A read fetches
every chunk the selection touches in one batch, decodes them on threads and copies them into
the result; absent chunks read as 0. An assignment reads the chunks it covers only partly,
merges, and stages the new chunks; ``commit`` writes them, shard by shard.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import ReadOnlyError
from ..progress import progress_bar
from ..sharded import ShardedKV
from ..storage import Storage
from ..threads import pmap
from .chunks import ChunkStore, FileChunks, ShardedChunks
from .encodings import decode_chunk, encode_chunk
from .grid import ChunkGrid
from .info import Scale, VolumeInfo, chunk_nbytes

_BATCH = 256  # chunks read and decoded, or encoded and staged, together


def _normalize(index: Any, shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Basic numpy index -> (box start, box stop, index into the box array) per dimension."""
    if not isinstance(index, tuple):
        index = (index,)
    if sum(i is Ellipsis for i in index) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (len(shape) - len(index) + 1) + index[at + 1:]
    if len(index) > len(shape):
        raise IndexError(f"too many indices: volume has {len(shape)} dimensions [x, y, z, c]")
    index = index + (slice(None),) * (len(shape) - len(index))
    start, stop, post = [], [], []
    for dim, (i, n) in enumerate(zip(index, shape)):
        if isinstance(i, slice):
            r = range(*i.indices(n))
            if not r:
                start.append(0), stop.append(0), post.append(slice(0, 0))
                continue
            lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
            start.append(lo), stop.append(hi)
            post.append(slice(r[0] - lo, None if r.step < 0 else hi - lo, r.step))
            continue
        try:
            i = int(np.asarray(i).item()) if not isinstance(i, bool) else None
        except (TypeError, ValueError):
            i = None
        if i is None:
            raise IndexError(f"only integers, slices and ... index a volume, got {index[dim]!r}")
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
        i %= n
        start.append(i), stop.append(i + 1), post.append(0)
    return np.array(start), np.array(stop), tuple(post)


class Volume:
    """One scale of a precomputed volume. Open with :func:`open_volume` or make one with
    :func:`create_volume`."""

    def __init__(self, storage: Storage, info: VolumeInfo, scale: int | str = 0,
                 mode: str = "r", *, progress: bool = False) -> None:
        self.storage, self.info, self.mode = storage, info, mode
        self.progress = progress  # progress bars on reads, writes and commits of many chunks
        self.scale: Scale = info.scale(scale)
        self.grid = ChunkGrid(self.scale.size, self.scale.chunk_size, self.scale.voxel_offset)
        self.dtype = np.dtype(info.data_type)
        scale_storage = storage.child(self.scale.key)
        limit = self.max_chunk_bytes()
        if self.scale.sharding is not None:
            kv_mode = "r" if mode == "r" else "a"
            self.chunks: ChunkStore = ShardedChunks(
                ShardedKV(scale_storage, self.scale.sharding, kv_mode, max_value_bytes=limit),
                self.grid)
        else:
            self.chunks = FileChunks(scale_storage, self.grid, limit)

    def __repr__(self) -> str:
        return (f"Volume({self.storage.url!r}, scale={self.scale.key!r}, shape={self.shape}, "
                f"dtype={self.dtype}, mode={self.mode!r})")

    def max_chunk_bytes(self) -> int:
        """The most bytes one encoded chunk can take: a gzip-wrapped chunk inflating past it
        is corrupt (raw chunks have exactly their voxels' size; the other encodings are
        allowed a generous multiple, as tables and headers can outgrow the voxels)."""
        raw = chunk_nbytes(self.chunk_size, self.info.num_channels, self.dtype)
        return raw if self.scale.encoding == "raw" else 4 * raw + (64 << 10)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (*self.scale.size, self.info.num_channels)

    @property
    def scales(self) -> tuple[Scale, ...]:
        return self.info.scales

    @property
    def voxel_offset(self) -> tuple[int, int, int]:
        return self.scale.voxel_offset

    @property
    def resolution(self) -> tuple[float, float, float]:
        return self.scale.resolution

    @property
    def chunk_size(self) -> tuple[int, int, int]:
        return self.scale.chunk_size

    # --- reading -------------------------------------------------------------------------

    def _decode(self, positions: np.ndarray, blobs: list[bytes | memoryview | None],
                consume: Callable[[int, np.ndarray], None] | None = None
                ) -> list[np.ndarray | None]:
        """Decode chunks on threads; ``consume(i, array)``, if given, also runs there (for each
        present chunk) and its arrays are not returned."""
        starts, stops = self.grid.bounds(positions)
        shapes = [(*shape, self.info.num_channels) for shape in (stops - starts).tolist()]
        block = self.scale.compressed_segmentation_block_size

        def one(i: int) -> np.ndarray | None:
            if blobs[i] is None:
                return None
            array = decode_chunk(blobs[i], self.scale.encoding, shapes[i], self.dtype,
                                 block_size=block, where=self.chunks.where(positions[i].tolist()),
                                 reuse=consume is not None)  # consumed on this thread, now
            if consume is None:
                return array
            consume(i, array)
            return None

        return pmap(one, range(len(blobs)), min_items=4)

    def read_chunks(self, positions: Any) -> list[np.ndarray]:
        """Whole chunks at (n, 3) chunk-grid positions, fetched in one batch and decoded on
        threads; absent chunks as 0. Each array is (x, y, z, channel), clipped at the edge."""
        positions = np.asarray(positions, np.int64).reshape(-1, 3)
        arrays = self._decode(positions, self.chunks.get(positions))
        starts, stops = self.grid.bounds(positions)
        return [a if a is not None else
                np.zeros((*(b - s), self.info.num_channels), self.dtype, order="F")
                for a, s, b in zip(arrays, starts, stops)]

    def read_box(self, start: Sequence[int], stop: Sequence[int]) -> np.ndarray:
        """The voxels of [start, stop) over (x, y, z), all channels, absent chunks as 0."""
        start, stop = np.asarray(start), np.asarray(stop)
        out = np.zeros((*(stop - start), self.info.num_channels), self.dtype, order="F")
        if (stop <= start).any():
            return out
        positions = self.grid.positions_in(start, stop)
        c_starts = self.grid.bounds(positions)[0]

        def place(i: int, array: np.ndarray) -> None:  # on the decoding thread
            a = c_starts[i]
            lo, hi = np.maximum(a, start), np.minimum(a + array.shape[:3], stop)
            out[tuple(slice(x, y) for x, y in zip(lo - start, hi - start))] = \
                array[tuple(slice(x, y) for x, y in zip(lo - a, hi - a))]

        # Batches bound the encoded bytes held at once and give the progress bar its steps.
        for first in self._batches(len(positions), "reading chunks"):
            part = positions[first:first + _BATCH]
            self._decode(part, self.chunks.get(part), lambda i, a, first=first: place(first + i, a))
        return out

    def _batches(self, n: int, desc: str) -> Iterable[int]:
        """Starts of batches of ``n`` chunks, with a progress bar if asked for and worth it."""
        return progress_bar(range(0, n, _BATCH), desc=desc, unit="batch",
                            total=-(-n // _BATCH), enabled=self.progress and n > _BATCH)

    def __getitem__(self, index: Any) -> np.ndarray:
        start, stop, post = _normalize(index, self.shape)
        box = self.read_box(start[:3], stop[:3])[..., start[3]:stop[3]]
        return box[post]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """The whole scale, for ``np.asarray(vol)`` (every read makes a new array)."""
        if copy is False:
            raise ValueError("a Volume's voxels are read from storage: they are always copied")
        return self[...] if dtype is None else self[...].astype(dtype, copy=False)

    # --- writing -------------------------------------------------------------------------

    def __setitem__(self, index: Any, value: Any) -> None:
        if self.mode == "r":
            raise ReadOnlyError(f"{self.storage.url}: volume is open read-only (mode 'r')")
        start, stop, post = _normalize(index, self.shape)
        if any(isinstance(p, slice) and p.step not in (None, 1) for p in post):
            raise IndexError("assignment takes steps of 1 only")
        value = np.asarray(value)
        self._check_value(value)
        box = tuple(int(n) for n in stop - start)
        if value.shape == box and value.dtype == self.dtype and \
                all(isinstance(p, slice) for p in post):  # the box itself: no copy
            self._write_box(start, stop, value)
            return
        target = np.zeros(box, self.dtype)
        selected = target[post]
        if value.ndim == selected.ndim - 1 and isinstance(post[3], slice) and \
                selected.shape[-1] == 1:  # an (x, y, z) array for a single channel
            value = value[..., None]
        try:
            target[post] = value
        except ValueError as e:
            raise ValueError(f"value of shape {value.shape} does not fit the selection: {e}") \
                from None
        self._write_box(start, stop, target)

    def _check_value(self, value: np.ndarray) -> None:
        """Refuse values the volume's dtype cannot hold, rather than wrap or truncate them."""
        if value.dtype == self.dtype or np.can_cast(value.dtype, self.dtype, "safe"):
            return
        both_ints = value.dtype.kind in "iu" and self.dtype.kind in "iu"
        if both_ints and value.size:
            info = np.iinfo(self.dtype)
            if info.min <= value.min() and value.max() <= info.max:
                return
            raise ValueError(f"values outside [{info.min}, {info.max}] do not fit a "
                             f"{self.dtype} volume")
        if value.dtype.kind == "f" and self.dtype.kind == "f":
            return
        raise TypeError(f"cannot assign {value.dtype} values to a {self.dtype} volume")

    def _write_box(self, start: np.ndarray, stop: np.ndarray, data: np.ndarray) -> None:
        if (stop <= start).any():
            return
        positions = self.grid.positions_in(start[:3], stop[:3])
        for first in self._batches(len(positions), "writing chunks"):
            self._write_chunks(positions[first:first + _BATCH], start, stop, data)

    def _write_chunks(self, positions: np.ndarray, start: np.ndarray, stop: np.ndarray,
                      data: np.ndarray) -> None:
        """Encode and stage the chunks at ``positions`` from ``data``, the box [start, stop),
        merging into the stored chunks those it covers only in part."""
        c_starts, c_stops = self.grid.bounds(positions)
        all_channels = start[3] == 0 and stop[3] == self.info.num_channels
        whole = all_channels & (c_starts >= start[:3]).all(axis=1) & \
            (c_stops <= stop[:3]).all(axis=1)
        partial = np.flatnonzero(~whole)
        old = dict(zip(partial.tolist(), self._decode(positions[partial],
                                                      self.chunks.get(positions[partial]))))
        block = self.scale.compressed_segmentation_block_size

        def chunk(i: int) -> bytes:
            a, b = c_starts[i], c_stops[i]
            if whole[i]:  # encode straight from the data
                return encode_chunk(data[tuple(slice(x, y) for x, y in zip(a - start[:3],
                                                                         b - start[:3]))],
                                    self.scale.encoding, block_size=block)
            array = old.get(i)
            if array is None:
                array = np.zeros((*(b - a), self.info.num_channels), self.dtype, order="F")
            elif not array.flags.writeable:  # decoders may return views of the bytes
                array = array.copy(order="F")
            lo, hi = np.maximum(a, start[:3]), np.minimum(b, stop[:3])
            array[(*(slice(x, y) for x, y in zip(lo - a, hi - a)), slice(start[3], stop[3]))] = \
                data[tuple(slice(x, y) for x, y in zip(lo - start[:3], hi - start[:3]))]
            return encode_chunk(array, self.scale.encoding, block_size=block)

        self.chunks.put(positions, pmap(chunk, range(len(positions)), min_items=4))

    def add_scale(self, factor: Sequence[int] = (2, 2, 2), *, progress: bool = False
                  ) -> Volume:
        """Make (or remake) the scale ``factor`` times coarser than this one and fill it from
        this one's present chunks: the mean for images, the most frequent label for
        segmentations. Returns the new scale, committed (see :func:`scales.add_scale`)."""
        from .scales import add_scale

        return add_scale(self, factor, progress=progress)

    def commit(self, *, progress: bool | None = None) -> None:
        """Write the staged chunks (shard by shard for a sharded scale)."""
        self.chunks.commit(progress=self.progress if progress is None else progress)

    def __enter__(self) -> Volume:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self.mode != "r":
            self.commit()
