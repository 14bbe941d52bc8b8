"""What the first phase of meshing and skeletonizing leaves for the second: per task box one
object (a "bundle") holding, per label found in the box, that label's piece made there (the
encoded bytes of a mesh's fragments, or of a skeleton).

Layout (little-endian): ``NGFRAG01``, the label count n (uint64), the labels (n uint64,
ascending), the end of each label's piece (n uint64, relative to the end of this index), then
the pieces back to back. A merge reads the indices of every bundle once (in the planner) and
then only the pieces of its shard's labels, by range.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import CorruptDataError
from ..storage import Storage

MAGIC = b"NGFRAG01"
_HEAD = 16


def encode_bundle(labels: np.ndarray, pieces: Sequence[bytes]) -> list[bytes]:
    """The parts of a bundle of ``pieces`` (one per label, labels ascending)."""
    labels = np.asarray(labels, "<u8")
    ends = np.cumsum([len(p) for p in pieces], dtype=np.uint64).astype("<u8")
    head = MAGIC + np.array([len(labels)], "<u8").tobytes()
    return [head, labels.tobytes(), ends.tobytes(), *pieces]


def read_index(storage: Storage, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A bundle's labels and the [start, end) byte range of each one's piece in the object.

    Raises
    ------
    CorruptDataError
        Not a bundle, or an index its object cannot hold (naming the object).
    """
    where = storage.path(name)
    _, head = storage.read_range(name, 0, _HEAD)
    if head is None or len(head) < _HEAD or bytes(head[:8]) != MAGIC:
        raise CorruptDataError(f"{where}: not a fragment bundle of a meshing or "
                               f"skeletonizing run")
    n = int(np.frombuffer(head, "<u8", 1, 8)[0])
    if n > 1 << 40:
        raise CorruptDataError(f"{where}: a bundle claiming {n} labels")
    _, index = storage.read_range(name, _HEAD, _HEAD + 16 * n)
    if index is None or len(index) != 16 * n:
        raise CorruptDataError(f"{where}: bundle index of {n} labels is cut short")
    labels = np.frombuffer(index, "<u8", n).astype(np.uint64)
    ends = np.frombuffer(index, "<u8", n, 8 * n).astype(np.int64) + (_HEAD + 16 * n)
    starts = np.r_[_HEAD + 16 * n, ends[:-1]].astype(np.int64)[:n]
    if n and ((ends < starts).any() or (labels[1:] <= labels[:-1]).any()):
        raise CorruptDataError(f"{where}: bundle index out of order")
    return labels, np.stack([starts, ends], axis=1)


def read_pieces(storage: Storage, requests: Sequence[tuple[str, np.ndarray]]
                ) -> list[list[bytes | bytearray | memoryview]]:
    """The pieces at ``(name, (n, 2) ranges)`` of each bundle, in one batch of reads."""
    out = []
    for (name, ranges), (_, chunks) in zip(requests, storage.read_ranges(list(requests))):
        want = (ranges[:, 1] - ranges[:, 0]).tolist()
        if chunks is None or [len(c) for c in chunks] != want:
            raise CorruptDataError(f"{storage.path(name)}: fragment bundle missing or cut "
                                   f"short; run again with resume=False")
        out.append(chunks)
    return out
