"""The byte-store interface every storage implements, and the range arithmetic they share.

Everything above the storage layer addresses objects by name relative to a root URL. A store
says what it can do through capability flags (``supports_writes``, ``supports_append``,
``local_root``, ``reads_report_generation``) so callers never test for a concrete class.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import ConflictError, NotFoundError, SpecError
from ..limits import MAX_GAP, SLICED_BYTES
from ..threads import pmap
from ..types import Blob
from .chains import Chain, run_lockstep
from .names import name_problem, shown
from .retry import RetryPolicy

#: ``if_generation`` value that skips the generation check.
ANY = object()



def changed_on_storage(path: str, since: str = "it was read") -> ConflictError:
    """The one error for an object another writer changed under us."""
    return ConflictError(f"{path}: changed on storage since {since} (another writer?); "
                         f"nothing was written")

class ObjectInfo(NamedTuple):
    """Size of an object and a token that changes whenever the object is replaced or modified.

    ``modified`` (seconds since the epoch) is given where the filesystem's timestamps are too
    coarse to tell two changes apart (whole milliseconds or seconds): a token taken within a
    second of a change may then survive another, so callers confirm such objects by content."""

    size: int
    generation: Hashable
    modified: float | None = None


def coalesce(ranges: np.ndarray, max_gap: int = MAX_GAP) -> tuple[np.ndarray, np.ndarray]:
    """Merge ``(n, 2)`` [start, end) ranges that overlap or lie within ``max_gap`` of each other.

    Returns the merged ranges and, for each input range, the index of the merged one holding it.
    A merged range wastes at most ``max_gap`` bytes per input range, so its size needs no cap.
    """
    ranges = np.asarray(ranges, np.int64).reshape(-1, 2)
    if len(ranges) == 0:
        return ranges, np.zeros(0, np.intp)
    order = np.argsort(ranges[:, 0], kind="stable")
    starts, ends = ranges[order, 0], ranges[order, 1]
    reach = np.maximum.accumulate(ends)
    new = np.empty(len(starts), bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1] + max_gap
    group = np.cumsum(new) - 1
    last = np.r_[np.flatnonzero(new)[1:], len(starts)] - 1
    assignment = np.empty(len(ranges), np.intp)
    assignment[order] = group
    return np.stack([starts[new], reach[last]], axis=1), assignment


def split_merged(merged: np.ndarray, blobs: Sequence[Blob], ranges: np.ndarray,
           assignment: np.ndarray) -> list[Blob]:
    """The requested ranges out of the merged reads: views, not copies (a volume read of many
    chunks would otherwise copy every byte once more); a range read alone is its blob as
    read (bytes from a file: a caller that wants bytes need not copy it), and a small range
    of a bytes blob is bytes (slicing bytes costs less than a view that is copied later:
    measured on 10,000 1 KiB values, ``tools/bench_kv.py``)."""
    if len(ranges) == len(merged) and (ranges == merged).all():  # nothing was merged
        return list(blobs)
    alone = (np.bincount(assignment, minlength=len(merged)) == 1)[assignment] & \
        (ranges[:, 0] == merged[assignment, 0])
    offsets = ranges[:, 0] - merged[assignment, 0]
    out: list[Blob] = []
    views: dict[int, memoryview] = {}
    for g, o, n, whole in zip(assignment.tolist(), offsets.tolist(),
                              (ranges[:, 1] - ranges[:, 0]).tolist(), alone.tolist()):
        if whole:
            out.append(blobs[g])
            continue
        if n <= SLICED_BYTES and type(blobs[g]) is bytes:  # a copy costs less than a view
            out.append(blobs[g][o:o + n])  # that a caller copies after
            continue
        view = views.get(g)
        if view is None:
            view = views[g] = memoryview(blobs[g])
        out.append(view[o:o + n])
    return out


def held_ranges(spans: np.ndarray, blobs: Sequence[Blob], ranges: np.ndarray
                ) -> tuple[np.ndarray, list[Blob | None]]:
    """Which of ``(n, 2)`` ranges lie wholly inside bytes already read (sorted, disjoint
    ``spans`` read as ``blobs``), and those ranges' bytes (views; None for the others)."""
    ranges = np.asarray(ranges, np.int64).reshape(-1, 2)
    if not len(spans):
        return np.zeros(len(ranges), bool), [None] * len(ranges)
    which = np.searchsorted(spans[:, 0], ranges[:, 0], side="right") - 1
    inside = (which >= 0) & (ranges[:, 1] <= spans[np.maximum(which, 0), 1])
    views = [memoryview(b) for b in blobs]
    out: list[Blob | None] = [None] * len(ranges)
    for i in np.flatnonzero(inside).tolist():
        w = int(which[i])
        first = int(spans[w, 0])
        out[i] = views[w][int(ranges[i, 0]) - first:int(ranges[i, 1]) - first]
    return inside, out


class FileSlice(NamedTuple):
    """Bytes [offset, offset + size) of a local file, written into an object without passing
    through this process's memory where the system allows (copy_file_range)."""

    path: str
    offset: int
    size: int
    owned: bool = False  # a temporary file the writer may take over instead of copying

    def read(self) -> bytes:
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), self.size, self.offset)




class Storage:
    """A directory of objects addressed by name. Use :func:`open_storage` to get one."""

    url: str
    #: False where objects can only be read (plain HTTP): :meth:`write`, :meth:`write_many`
    #: and :meth:`delete` raise ReadOnlyError.
    supports_writes = True
    #: True where every read returns the generation of the bytes it read (pinned by one file
    #: descriptor), so a cached index can be used first and checked by the read itself.
    reads_report_generation = False
    #: True where objects can be appended to and patched in place (local files).
    supports_append = False
    #: The directory of a store on a local filesystem (temporary files can be renamed into
    #: place there), None elsewhere.
    local_root: str | None = None
    #: False where the objects under a folder cannot be listed (a web server without
    #: directory listings): :meth:`list` raises UnlistableError there, and callers that can
    #: find objects another way (probing known names with :meth:`stat_many`) ask this first.
    supports_listing = True
    _retry: RetryPolicy | None = None

    def require_folder(self, what: str = "a store's or layer's directory", *,
                       missing_ok: bool = False) -> None:
        """Raise NotFoundError when this store is local and its directory is a plain file or
        (unless ``missing_ok``: a store about to be made) missing, naming the path and which
        (``what`` says what was expected), rather than the first file read under it
        (``seg.h5/info: Not a directory``)."""
        root = self.local_root
        if root is None or os.path.isdir(root) or missing_ok and not os.path.exists(root):
            return
        raise NotFoundError(f"{root}: " + (f"a file, not {what}" if os.path.exists(root)
                                           else "no such directory"))

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy of this store's requests and of the reads through it: its
        readers share it, so their ``stats()`` count both kinds of retries (see
        :mod:`ngshard.storage.retry`); stores derived by :meth:`child` and :meth:`parent`
        share it too."""
        if self._retry is None:
            self._retry = RetryPolicy()
        return self._retry

    @retry.setter
    def retry(self, policy: RetryPolicy) -> None:
        self._retry = policy

    @property
    def max_gap(self) -> int:
        """Ranges of one object closer than this are read in one request."""
        return MAX_GAP

    def path(self, name: str) -> str:
        """The full location of ``name``, for messages."""
        return f"{self.url.rstrip('/')}/{name}"

    def inside(self, name: str, *, folder: bool = False) -> str:
        """``name`` if it names something inside this store, else SpecError: every store
        checks each name it is given (:mod:`.names`), so no name reaches outside its root
        whatever computed it. Callers that take names from data check them first, where
        they can name the file that gave them."""
        problem = name_problem(name, folder=folder)
        if problem is not None:
            raise SpecError(f"{self.url}: the name {shown(name)} {problem}: it must name "
                            f"something inside the store")
        return name.rstrip("/") if folder else name

    def stat(self, name: str) -> ObjectInfo | None:
        """Size and generation of an object, None if it does not exist."""
        raise NotImplementedError

    def read(self, name: str) -> bytes | None:
        """The whole object, None if it does not exist."""
        raise NotImplementedError

    def stat_many(self, names: Sequence[str]) -> list[ObjectInfo | None]:
        """:meth:`stat` of many objects (remote stores ask for them all at once)."""
        return [self.stat(name) for name in names]

    def read_many(self, names: Sequence[str]) -> list[bytes | None]:
        """:meth:`read` of many whole objects (remote stores ask for them all at once)."""
        return pmap(self.read, names, min_items=4)

    def write_many(self, items: Sequence[tuple[str, Blob]]) -> None:
        """Write many whole objects, each atomically (remote stores send them all at once)."""
        pmap(lambda item: self.write(item[0], [item[1]]), items, min_items=4)

    def read_ranges(self, requests: Sequence[tuple[str, np.ndarray]]
                    ) -> list[tuple[Hashable | None, list[Blob] | None]]:
        """Read ``(name, (n, 2) ranges)`` requests in one batch, coalescing near ranges; the
        chunks may be views into one larger read.

        For each request returns ``(generation, chunks)``: the generation the bytes were read
        from (None if the store cannot tell), and None instead of chunks if the object is gone.
        A chunk comes back short where the object ends early (empty for a range that starts
        at or past the end); the caller judges why.
        """
        raise NotImplementedError

    def read_heads(self, names: Sequence[str], length: int | None
                   ) -> list[tuple[ObjectInfo, Blob | None] | None]:
        """The first ``length`` bytes of each object (all of it where shorter or ``length``
        is None), with the size and generation they were read from; None where the object
        does not exist, and None instead of the bytes where it changed while being read
        (read it again).

        Here a stat, then a read of the range; stores whose reads report what they read
        (object stores, HTTP) answer each name from one ranged GET, with no HEAD before it.
        """
        infos = self.stat_many(names)
        have = [(k, info) for k, info in enumerate(infos) if info is not None]
        reads = self.read_ranges([(names[k], np.array([[0, info.size if length is None
                                                         else min(length, info.size)]]))
                                  for k, info in have])
        out: list[tuple[ObjectInfo, Blob | None] | None] = [None] * len(names)
        for (k, info), (generation, chunks) in zip(have, reads):
            same = chunks is not None and generation in (None, info.generation)
            out[k] = (info, chunks[0] if same and chunks else None)
        return out

    def run_chains(self, chains: Sequence[Chain]) -> list[Any]:
        """The results of read chains (see :mod:`ngshard.storage.chains`): here in
        lockstep, each step of every chain in one batch; stores with an event loop run each
        chain on its own, its next read sent as soon as its last one is answered."""
        return run_lockstep(self, chains)

    def read_range(self, name: str, start: int, end: int) -> tuple[Hashable | None, Blob | None]:
        """One range of one object: the single-read fast path of :meth:`read_ranges`."""
        gen, chunks = self.read_ranges([(name, np.array([[start, end]]))])[0]
        return gen, None if chunks is None else chunks[0]

    def write(self, name: str, parts: Sequence[Blob | FileSlice], if_generation: Any = ANY
              ) -> None:
        """Write an object atomically: readers see the old object or the whole new one;
        ``parts``: its bytes in order (a FileSlice: bytes of a local file, not read here).

        ``if_generation``: the generation the object must still have (None: it must not
        exist), else ConflictError; ANY writes regardless.
        """
        raise NotImplementedError

    def delete(self, name: str, if_generation: Any = ANY) -> None:
        """Remove an object if it exists (``if_generation`` as for :meth:`write`)."""
        raise NotImplementedError

    def delete_many(self, names: Sequence[str]) -> None:
        """Remove many objects (absent ones are ignored); object stores remove them in
        batched requests (S3: a thousand per request)."""
        pmap(self.delete, names, min_items=8)

    def append_and_patch(self, name: str, generation: Hashable, offset: int,
                         tail: Sequence[Blob | FileSlice], head: Blob) -> None:
        """Write ``tail`` at ``offset`` (the end of the object), then ``head`` at 0, only if
        the object still has ``generation``. Only where :attr:`supports_append`."""
        raise NotImplementedError(f"{type(self).__name__} cannot append")

    def _check(self, name: str, expected: Any) -> None:
        if expected is ANY:
            return
        info = self.stat(name)
        if (info is None and expected is not None) or (
                info is not None and info.generation != expected):
            raise changed_on_storage(self.path(name))

    def list(self, *, dirs: bool = False) -> list[str]:
        """Names of the objects directly under the root (empty if the root does not exist);
        with ``dirs``, the names of sub-directories too. UnlistableError where
        :attr:`supports_listing` is False: an empty list would claim there is nothing."""
        raise NotImplementedError

    def child(self, name: str) -> Storage:
        """The storage rooted at a sub-directory."""
        raise NotImplementedError

    def parent(self) -> Storage | None:
        """The storage rooted at the directory above, None at the top."""
        raise NotImplementedError


