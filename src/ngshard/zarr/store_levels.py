"""What a :class:`~ngshard.zarr.store.PrecomputedStore` is made of: its keys sorted into the
generated metadata, the chunks of each scale, the layer's own files (which the Zarr view
replaces, so they are hidden) and any other file of the directory (shown as stored).

A scale's chunks are read in batches through its handle's chunk store (sharded or a file per
chunk) and handed out as whole Zarr chunks: a whole raw chunk as its stored bytes, anything
else decoded and laid out as one (Fortran order over (x, y, z, c), little endian), edge chunks
padded with the fill value 0 to the whole chunk shape, as Zarr's chunks always are.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator

import numpy as np

from ..storage.names import is_inside
from ..threads import pmap
from ..types import Blob
from ..volume.encodings import encode_chunk
from ..volume.handle import ScaleHandle
from ..volume.vectors import xyz
from .store_metadata import SEPARATOR

_INDEX = re.compile(r"0|[1-9][0-9]*")  # the canonical decimal integers zarr writes in keys
#: The files of a precomputed layer besides its scales (hidden along with them).
LAYER_FILES = ("info", "provenance")
#: Info members naming a layer's sub-directories (hidden too).
LAYER_DIRS = ("mesh", "skeletons", "segment_properties")


class Level:
    """One scale shown as a Zarr array: ``prefix`` + ``zarr.json`` and ``prefix`` +
    ``c/<x>/<y>/<z>/0``."""

    def __init__(self, handle: ScaleHandle, prefix: str, metadata: bytes) -> None:
        self.handle, self.prefix, self.metadata = handle, prefix, metadata
        self.chunk_prefix = f"{prefix}c{SEPARATOR}"
        self.grid = handle.grid
        self.channels = handle.info.num_channels
        self.chunk_shape = (*self.grid.chunk_size, self.channels)
        self.chunk_nbytes = int(np.prod(self.chunk_shape)) * handle.dtype.itemsize
        # batches are read on the event loop's executor threads, and a sharded store's index
        # cache is not thread-safe: one batch's reads at a time (each batch's own reads run
        # concurrently, and decoding runs outside the lock)
        self._lock = threading.Lock()

    def position(self, key: str) -> tuple[int, int, int] | None:
        """The grid position of a chunk key (``key`` starts with :attr:`chunk_prefix`), None
        for a key that names no chunk of the grid."""
        parts = key[len(self.chunk_prefix):].split(SEPARATOR)
        if len(parts) != 4 or parts[3] != "0" or not all(_INDEX.fullmatch(p) for p in parts):
            return None
        pos = xyz(int(p) for p in parts[:3])
        return pos if all(p < n for p, n in zip(pos, self.grid.shape)) else None

    def chunk_keys(self) -> Iterator[str]:
        """Keys of the chunks present (from shard indices or the file listing)."""
        for x, y, z in self.handle.store.list_positions().tolist():
            yield f"{self.chunk_prefix}{x}/{y}/{z}/0"

    def read(self, positions: np.ndarray) -> list[Blob | None]:
        """Whole Zarr chunks at (n, 3) positions, None where absent; one batch of reads
        through the chunk store, decoding on threads."""
        store, codec = self.handle.store, self.handle.codec
        raw = self.handle.scale.encoding == "raw"
        with self._lock:
            blobs = store.get(positions)
        starts, stops = self.grid.bounds(positions)
        extents = (stops - starts).tolist()
        whole = (stops - starts == np.array(self.grid.chunk_size)).all(axis=1).tolist()

        def one(i: int) -> Blob | None:
            blob = blobs[i]
            if blob is None:
                return None
            if whole[i] and raw and len(blob) == self.chunk_nbytes:
                return blob  # already laid out as the transpose + bytes codecs say
            arr = codec.decode(blob, (*extents[i], self.channels),
                               store.where(positions[i].tolist()))
            if not whole[i]:
                padded = np.zeros(self.chunk_shape, self.handle.dtype, order="F")
                padded[:arr.shape[0], :arr.shape[1], :arr.shape[2]] = arr
                arr = padded
            # a decoded whole chunk may lie in a buffer the next decode reuses: copied
            return encode_chunk(arr, "raw", copy=whole[i])

        return pmap(one, range(len(blobs)), min_items=4)


def hidden_names(volume_info) -> tuple[frozenset[str], tuple[str, ...]]:
    """The files (exact keys) and directories (key prefixes ending in ``/``) of the layer
    itself: the Zarr view replaces them."""
    dirs = [f"{s.key}/" for s in volume_info.scales]
    for member in LAYER_DIRS:
        name = volume_info.extra.get(member)
        if isinstance(name, str) and name and "://" not in name:
            dirs.append(f"{name.strip('/')}/")
    return frozenset(LAYER_FILES), tuple(dirs)


def safe_key(key: str) -> bool:
    """A key that names a file inside the directory: no empty, ``.`` or ``..`` parts, no
    backslash (a foreign key must never reach outside the layer)."""
    return is_inside(key)

