"""Unsharded files read and written with their compressed twins, for every layer in one place:
volume chunks, skeleton, mesh and annotation files. :class:`Twins` is the one store of files
by name: read in batches, written staged (reads see what is staged) and stored on commit.

cloud-files (under cloud-volume and igneous) stores a file ``name`` written with ``compress=``
as ``name.gz``, ``name.br``, ``name.zstd``, ``name.xz`` or ``name.bz2`` on file systems, and
reads the plain name first, then each twin. Here a batch of names costs at most three batched
reads, whatever the store: the plain names; the missing ones with the suffix found last in
this store (a store is usually written with one ``compress``); then every other suffix of the
still missing ones at once. An absent file over HTTP costs requests in three rounds, never six
round trips in turn.
"""

from __future__ import annotations

import builtins  # Twins.list hides the builtin in the class
from collections.abc import Iterable, Sequence

import numpy as np

from ..commitplan import CommitPlan
from ..compression import TWINS, compress_twin, decode, decompress_twin, split_twin, twin_suffix
from ..errors import CorruptDataError, ReadOnlyError
from ..limits import DEFAULT_MAX_VALUE_BYTES
from ..threads import pmap
from ..types import Blob
from .base import Storage


class Twins:
    """The files of ``storage`` by plain name, each read from the plain file or, failing
    that, from its compressed twin, decoded to at most ``limit`` bytes; writes staged until
    :meth:`commit`, which writes each file as its ``compress`` twin.

    Files are written whole, so a written file replaces what was there. On a local store, or
    one where a twin was read, the other variants of a written file are removed after it is
    written (the plain file would hide a new twin from every reader); object stores written
    by cloud-files record compression as a Content-Encoding, not by name, so elsewhere that
    costs no requests.

    Parameters
    ----------
    storage
        The directory of the files.
    limit
        The most bytes a file may hold: a twin decoding past it is corrupt.
    compress
        The twin files are written as: None (plain files), "gzip", "br", "zstd", ...
    writable
        False: staging a change is a ReadOnlyError.
    """

    def __init__(self, storage: Storage, limit: int | None = None,
                 compress: str | None = None, *, writable: bool = True) -> None:
        self.storage, self.limit = storage, limit or DEFAULT_MAX_VALUE_BYTES
        self.suffix, self.writable = twin_suffix(compress), writable
        self._last: str | None = None  # the suffix found last: tried first next time
        self.staged: dict[str, Blob | None] = {}  # None: a deletion

    def read_many(self, names: Sequence[str]) -> list[Blob | None]:
        """The content of each file (as staged, where it is), None where neither it nor a
        twin exists.

        Raises
        ------
        CorruptDataError
            A twin that does not decode, or decodes past the limit (the message names it).
        """
        return self.read_gzip_many(names, False)[0]

    def read_gzip_many(self, names: Sequence[str], streams: bool = True
                       ) -> tuple[list[Blob | None], list[Blob | None]]:
        """As :meth:`read_many`, and, for each file read from a ``.gz`` twin of one gzip
        stream (checked: it decodes whole), that stream as stored (None for the others): a
        writer of gzip carries it instead of compressing the content again."""
        staged = self.staged
        todo = [n for n in names if n not in staged] if staged else list(names)
        found: list = list(self.storage.read_many(todo))
        gz: list = [None] * len(todo)
        missing = [i for i, b in enumerate(found) if b is None]
        for i, content, stream in self._twins(todo, missing, streams):
            found[i], gz[i] = content, stream
        if not staged:
            return found, gz
        stored = dict(zip(todo, zip(found, gz)))
        pairs = [(staged[n], None) if n in staged else stored[n] for n in names]
        return [c for c, _ in pairs], [g for _, g in pairs]

    def read_ranges(self, requests: Sequence[tuple[str, int, int]]
                    ) -> list[Blob | None]:
        """Bytes ``[start, end)`` of each ``(name, start, end)`` file (short where the file
        ends early), None where it is absent. A twin is read and decoded whole."""
        got = self.storage.read_ranges([(n, np.array([[a, b]])) for n, a, b in requests])
        out: list = [None if chunks is None else chunks[0] for _, chunks in got]
        missing = [i for i, chunk in enumerate(out) if chunk is None]
        for i, content, _ in self._twins([n for n, _, _ in requests], missing):
            out[i] = memoryview(content)[requests[i][1]:requests[i][2]]
        return out

    def _twins(self, names: Sequence[str], missing: list[int], streams: bool = False
               ) -> list[tuple[int, Blob, Blob | None]]:
        """(index, decoded content, the stored gzip stream or None) of the ``missing`` names
        that have a twin, the first in :data:`TWINS` order where several do; the stream only
        with ``streams``, for a ``.gz`` twin of one stream."""
        first = [self._last] if self._last else []
        packed: dict[int, tuple[str, Blob]] = {}
        for suffixes in (first, [s for s in TWINS if s not in first]):
            if not missing or not suffixes:
                continue
            asks = [(i, s) for i in missing for s in suffixes]
            for (i, s), blob in zip(asks, self.storage.read_many([names[i] + s
                                                                  for i, s in asks])):
                if blob is not None and i not in packed:
                    packed[i] = (s, blob)
            missing = [i for i in missing if i not in packed]
        if not packed:
            return []
        self._last = next(iter(packed.values()))[0]
        items = list(packed.items())

        def decoded(item: tuple[int, tuple[str, Blob]]) -> tuple[int, Blob, Blob | None]:
            i, (suffix, blob) = item
            where = self.storage.path(names[i] + suffix)
            if streams and suffix == ".gz":
                try:  # one stream, as the sharded format's data_encoding takes it
                    return i, decode(blob, "gzip", where, self.limit), blob
                except CorruptDataError:
                    pass  # several streams, or damage: said below
            return i, decompress_twin(blob, suffix, where, self.limit), None

        return pmap(decoded, items, min_items=4)

    def list(self) -> list[str]:
        """The plain names of the files present, stored or staged, sorted (a twin counts as
        its file)."""
        names = set(plain_names(self.storage.list()))
        names |= {n for n, b in self.staged.items() if b is not None}
        return sorted(names - {n for n, b in self.staged.items() if b is None})

    def stored(self, names: Sequence[str], keep: str | None = None) -> builtins.list[str]:
        """The files present among ``names`` and their twins, less the ``keep`` variant
        (the suffix a writer just wrote), found with one batch of stats."""
        asks = [n + s for n in names for s in ("", *TWINS) if s != keep]
        return [n for n, info in zip(asks, self.storage.stat_many(asks)) if info is not None]

    @property
    def seen_twins(self) -> bool:
        """Whether a twin was read from this store."""
        return self._last is not None

    # --- writing ------------------------------------------------------------------------------

    def put_many(self, items: Iterable[tuple[str, Blob]]) -> None:
        """Stage ``(name, content)`` files; reads see them at once."""
        self._writable().update(items)

    def delete_many(self, names: Iterable[str]) -> None:
        """Stage the removal of the named files (and their twins); absent ones are ignored."""
        self._writable().update(dict.fromkeys(names))

    def _writable(self) -> dict:
        if not self.writable:
            raise ReadOnlyError(f"{self.storage.url}: open for reading only")
        return self.staged

    def abort(self) -> None:
        """Drop what is staged."""
        self.staged = {}

    def commit(self) -> None:
        """Write the staged files (each as its twin), then remove deleted files and the
        stale variants of written ones; then nothing is staged."""
        staged, self.staged = self.staged, {}
        written = [(n, b) for n, b in staged.items() if b is not None]
        write_twins(self.storage, written, self.suffix)
        stale = self.stored([n for n, b in staged.items() if b is None])
        if written and (self.storage.local_root is not None or self.seen_twins):
            stale += self.stored([n for n, _ in written], keep=self.suffix)
        pmap(self.storage.delete, stale, min_items=4)

    def plan(self, names: Iterable[str] = (), nbytes: int = 0) -> CommitPlan:
        """What :meth:`commit` would do, with files ``names`` (about ``nbytes`` each) staged
        too: one entry per file written or deleted, in name order."""
        sizes = {n: None if b is None else len(b) for n, b in self.staged.items()}
        return CommitPlan.files(self.storage.url, {**sizes, **dict.fromkeys(names, nbytes)})

def plain_names(names: Iterable[str]) -> list[str]:
    """The plain names of stored file names (twin suffixes removed), sorted, once each."""
    return sorted({split_twin(n)[0] for n in names})


def write_twins(storage: Storage, items: Sequence[tuple[str, Blob]],
                suffix: str = "") -> None:
    """Write ``(name, content)`` files, each as its ``suffix`` twin (plain for ""),
    compressed on threads."""
    if suffix:
        storage.write_many(pmap(lambda item: (item[0] + suffix, compress_twin(item[1], suffix)),
                                list(items), min_items=4))
    else:
        storage.write_many(items)
