"""Volume: numpy indexing over one scale of a precomputed layer, sharded or not.

Indices over [x, y, z, channel] are the layer's own voxel coordinates, as in cloud-volume and
tensorstore: x, y, z in ``[voxel_offset, voxel_offset + size)`` (``vol.bounds``), the channel
from 0 (see ``coords.py``); ``vol.translate_to[0]`` is a view indexed from 0. Basic indexing
and orthogonal advanced indexing (an integer array or boolean mask per axis). The voxels go
through a staged-changes array (``ngshard.staged``, seed 003): a read fetches the stored chunks
it touches in batches and decodes them on threads; an assignment never reads a chunk it covers
wholly, reads one it covers partly once, and keeps both decoded in memory, where later
assignments update them in place; ``commit`` encodes each changed chunk once and writes them,
shard by shard. ``plan()`` prints what a commit will do.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..commitplan import CommitPlan
from ..errors import ReadOnlyError
from ..staged import DEFAULT_STAGED_BYTES, StagedChangesArray, normalize
from ..staged.stored import StoredChunks
from .chunks import ScaleStore
from .coords import Bounds, TranslateTo, array_index
from .grid import ChunkGrid
from .handle import ScaleHandle
from .info import Scale
from .vectors import Vec3, xyz


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return np.broadcast_shapes(shape, target) == target
    except ValueError:
        return False


class Volume:
    """One scale of a precomputed volume, over its :class:`ScaleHandle` (info, grid, chunk
    store, codec). Open with :func:`open_volume` or make one with :func:`create_volume`.

    Indexed in the layer's voxel coordinates (:attr:`bounds`); ``fill_missing``: absent
    chunks read as 0 (True) or raise NotFoundError (False; writes are unaffected); ``new``:
    the scale was just created, so nothing stored is read until the first commit."""

    def __init__(self, handle: ScaleHandle, *, progress: bool = False,
                 fill_missing: bool = True, staged_bytes: int = DEFAULT_STAGED_BYTES,
                 new: bool = False) -> None:
        #: The scale's metadata, chunk store and codec (what this volume writes through).
        self.handle = handle
        self.progress = progress  # progress bars on reads, writes and commits of many chunks
        self.fill_missing = fill_missing
        self._origin: Vec3 | None = None  # a translated view's origin (None: voxel_offset)
        # a new scale with nothing stored under it reads no chunk until its first commit
        empty = new and not handle.chunk_storage.list()
        self._source = StoredChunks(handle.store, handle.codec, handle, progress=progress,
                                    empty=empty)
        #: The staged-changes array holding the voxels (its ``_*_plan`` methods print plans).
        self.array = StagedChangesArray(self._source, staged_bytes)

    storage = property(lambda self: self.handle.storage, doc="The layer's storage.")
    info = property(lambda self: self.handle.info, doc="The layer's info.")
    mode = property(lambda self: self.handle.mode, doc='"r" or "r+".')
    dtype = property(lambda self: self.handle.dtype)
    compress = property(lambda self: self.handle.compress,
                        doc="The twin unsharded chunks are written as (None: plain files).")

    def __repr__(self) -> str:
        return (f"Volume({self.storage.url!r}, scale={self.scale.key!r}, shape={self.shape}, "
                f"bounds={self.bounds}, dtype={self.dtype}, mode={self.mode!r})")

    def max_chunk_bytes(self) -> int:
        """The most bytes one encoded chunk can take (see :meth:`ScaleHandle.max_chunk_bytes`)."""
        return self.handle.max_chunk_bytes()

    @property
    def scale(self) -> Scale:
        """This scale, with the size a staged resize gave it."""
        return self.handle.scale

    @property
    def grid(self) -> ChunkGrid:
        return self.handle.grid

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The size (x, y, z, channels)."""
        x, y, z, c = self.array.shape
        return x, y, z, c

    @property
    def bounds(self) -> Bounds:
        """The box of voxel coordinates this volume is indexed in: ``[voxel_offset,
        voxel_offset + size)``, or from a view's origin (:attr:`translate_to`)."""
        start = self.voxel_offset if self._origin is None else self._origin
        return Bounds(start, xyz(a + n for a, n in zip(start, self.shape[:3])))

    @property
    def translate_to(self) -> TranslateTo[Volume]:
        """``vol.translate_to[0]`` (or ``[(x, y, z)]``): a view of this volume indexed from
        that origin, as tensorstore's ``translate_to``. It shares this volume's scale and
        staged changes: a commit or abort through either acts on both.

        >>> vol.bounds                                     # doctest: +SKIP
        Bounds(start=(1000, 2000, 30), stop=(1512, 2512, 94))
        >>> vol.translate_to[0].bounds                     # doctest: +SKIP
        Bounds(start=(0, 0, 0), stop=(512, 512, 64))
        """
        return TranslateTo(self._translated)

    def _translated(self, origin: Vec3) -> Volume:
        view = copy.copy(self)
        view._origin = origin
        return view

    def _index(self, index: Any) -> tuple:
        """``index`` (voxel coordinates) as the staged array's 0-based index."""
        note = "voxel coordinates, from voxel_offset; vol.translate_to[0] indexes from 0" \
            if self._origin is None else f"a view translated to {self._origin}"
        return array_index(index, self.bounds, note)

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

    def read_chunks(self, positions: Any) -> list[np.ndarray]:
        """Whole chunks at (n, 3) chunk-grid positions (staged ones from memory, the rest
        fetched in one batch and decoded on threads); absent chunks as 0, or NotFoundError
        without ``fill_missing``. Each array is (x, y, z, channel), clipped at the edge.

        Positions are 0-based indices into the chunk grid, as the format counts them (Morton
        codes and unsharded chunk names count from voxel_offset), not voxel coordinates:
        :meth:`chunk_bounds` gives each chunk's box in coordinates, :meth:`chunk_positions`
        the chunks present."""
        positions = np.asarray(positions, np.int64).reshape(-1, 3)
        with self._source.strict_reads(not self.fill_missing):
            return self.array.read_chunks(np.pad(positions, ((0, 0), (0, 1))))

    def chunk_bounds(self, positions: Any) -> list[Bounds]:
        """The voxel box, in this volume's coordinates (:attr:`bounds`), of the chunk at each
        (n, 3) chunk-grid position, clipped at the edge as edge chunks are.

        Raises
        ------
        SpecError
            A position outside the chunk grid.
        """
        starts, stops = self.grid.bounds(np.reshape(np.asarray(positions), (-1, 3)))
        origin = np.array(self.bounds.start)
        return [Bounds(tuple(a), tuple(b)) for a, b in
                zip((starts + origin).tolist(), (stops + origin).tolist())]

    def read_box(self, start: Sequence[int], stop: Sequence[int]) -> np.ndarray:
        """The voxels of [start, stop) over (x, y, z) in voxel coordinates (within
        :attr:`bounds`), all channels, absent chunks as 0 (see :meth:`__getitem__`)."""
        return self[tuple(slice(int(a), int(b)) for a, b in zip(start, stop))]

    def __getitem__(self, index: Any) -> np.ndarray:
        """The voxels at ``index`` over [x, y, z, channel]: x, y, z in voxel coordinates
        (integers, slices with any step, integer arrays; a negative number is a coordinate),
        the channel from 0.

        Raises
        ------
        IndexError
            An index outside :attr:`bounds` (the message names them), or an invalid index.
        NotFoundError
            A chunk the read touches is absent and the volume was opened with
            ``fill_missing=False``.
        CorruptDataError
            A chunk that does not decode.
        """
        index = self._index(index)
        with self._source.strict_reads(not self.fill_missing):
            return self.array[index]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """The whole scale, for ``np.asarray(vol)`` (every read makes a new array)."""
        if copy is False:
            raise ValueError("a Volume's voxels are read from storage: they are always copied")
        return self[...] if dtype is None else self[...].astype(dtype, copy=False)

    def chunk_positions(self) -> np.ndarray:
        """(n, 3) grid positions of the chunks present: stored, or staged and changed."""
        staged = self.array.changed_positions()[:, :3]
        both = np.concatenate([self.handle.store.list_positions(), staged])
        return np.unique(both, axis=0) if len(both) else both.reshape(0, 3)

    def encoded(self) -> ScaleStore:
        """This scale's encoded chunks by (x, y, z) grid position: the one
        :class:`~ngshard.chunkstore.ChunkStore` this volume reads and writes through, for
        moving chunks between formats without decoding them. Chunks put there are staged with
        the volume's other changes and written by the same commit (an assignment staged
        here, in voxels, to the same chunk wins over them; a scale just created reads as 0
        until its first commit: it reads nothing stored before then)."""
        return self.handle.store

    # --- writing -------------------------------------------------------------------------

    def _writable(self) -> None:
        if self.mode == "r":
            raise ReadOnlyError(f"{self.storage.url}: volume is open read-only (mode 'r')")

    def __setitem__(self, index: Any, value: Any) -> None:
        """Stage an assignment (basic or orthogonal index in voxel coordinates, as for
        reading; steps of any sign)."""
        self._writable()
        value = np.asarray(value)
        self._check_value(value)
        selection = normalize(self._index(index), self.shape)
        channels, target = selection.axes[3], selection.result_shape
        if value.ndim == len(target) - 1 and not channels.drop and len(channels) == 1 and \
                not _broadcasts(value.shape, target):  # (x, y, z) for a single channel
            value = value[..., None]
        self.array._assign(selection, selection.value(value))

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

    def resize(self, shape: Sequence[int]) -> None:
        """Stage a new size of this scale; the info records it on commit.

        Edge chunks are rewritten at their new extent (their unsharded names change with it);
        chunks past the new edges are deleted on commit; new chunks read as 0.

        Parameters
        ----------
        shape
            (x, y, z), or (x, y, z, channels) with the same channels.

        Raises
        ------
        SpecError
            Other channels, or a sharded scale whose grid would need other Morton bits per
            axis (every chunk ID would change); nothing changes then.
        ReadOnlyError
            The volume is open read-only.
        """
        self._writable()
        shape = tuple(int(n) for n in shape)
        self.array.resize(shape if len(shape) == 4 else (*shape, self.info.num_channels))

    def load(self) -> None:
        """Read every stored chunk into memory (they are not written back unless changed)."""
        self.array.load()

    def add_scale(self, factor: Sequence[int] | None = None, *, method: str | None = None,
                  sparse: bool = False, overwrite: bool = False, progress: bool = False
                  ) -> Volume:
        """Make (or remake) the scale ``factor`` times coarser than this one (default
        neuroglancer's near-isotropic step: 2x2x1 for 4x4x40 nm) and fill it from this one's
        present chunks: the mean for images, the most frequent label for segmentations, or
        ``method``. The chunks are written before the info. Returns the new scale,
        committed (see :func:`scales.add_scale`; :func:`ngshard.downsample` makes several
        levels in one pass).

        Raises
        ------
        ExistsError
            That scale is there with another size, chunk size, encoding or sharding, and not
            ``overwrite`` (which removes it first).
        """
        from .scales import add_scale

        return add_scale(self, factor, method=method, sparse=sparse, overwrite=overwrite,
                         progress=progress)

    def plan(self) -> CommitPlan:
        """What :meth:`commit` would do: the chunks it encodes, then what the chunk store
        writes (``.shards``: each shard or file and how: create, append, rewrite, write,
        delete; sizes of chunks not encoded yet are counted at their decoded size), then the
        info after a resize. ``print(vol.plan())`` shows a summary."""
        self._writable()
        return self.array.plan()

    def commit(self, *, progress: bool | None = None) -> None:
        """Encode the changed chunks, in batches on threads, and write them (shard by shard
        for a sharded scale, each shard once), with the deletions and size of a resize."""
        self._writable()
        self._source.progress = self.progress if progress is None else progress
        try:
            self.array.commit()
        finally:
            self._source.progress = self.progress

    def abort(self) -> None:
        """Drop every staged change (and a staged resize); storage was never touched."""
        self.array.abort()

    def __enter__(self) -> Volume:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.mode == "r":
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()
