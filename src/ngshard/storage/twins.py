"""Unsharded files read and written with their compressed twins, for every layer in one place:
volume chunks, skeleton, mesh and annotation files.

cloud-files (under cloud-volume and igneous) stores a file ``name`` written with ``compress=``
as ``name.gz``, ``name.br``, ``name.zstd``, ``name.xz`` or ``name.bz2`` on file systems, and
reads the plain name first, then each twin. Here a batch of names costs at most three batched
reads, whatever the store: the plain names; the missing ones with the suffix found last in
this store (a store is usually written with one ``compress``); then every other suffix of the
still missing ones at once. An absent file over HTTP costs requests in three rounds, never six
round trips in turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from ..compression import TWINS, compress_twin, decompress_twin, split_twin
from ..limits import DEFAULT_MAX_VALUE_BYTES
from ..threads import pmap
from .base import Storage


class Twins:
    """The files of ``storage`` by plain name, each read from the plain file or, failing
    that, from its compressed twin, decoded to at most ``limit`` bytes.

    Parameters
    ----------
    storage
        The directory of the files.
    limit
        The most bytes a file may hold: a twin decoding past it is corrupt.
    """

    def __init__(self, storage: Storage, limit: int | None = None) -> None:
        self.storage, self.limit = storage, limit or DEFAULT_MAX_VALUE_BYTES
        self._last: str | None = None  # the suffix found last: tried first next time

    def read_many(self, names: Sequence[str]) -> list[bytes | None]:
        """The content of each file, None where neither it nor a twin exists.

        Raises
        ------
        CorruptDataError
            A twin that does not decode, or decodes past the limit (the message names it).
        """
        out: list = list(self.storage.read_many(names))
        for i, content in self._twins(names, [i for i, b in enumerate(out) if b is None]):
            out[i] = content
        return out

    def read_ranges(self, requests: Sequence[tuple[str, int, int]]
                    ) -> list[bytes | memoryview | None]:
        """Bytes ``[start, end)`` of each ``(name, start, end)`` file (short where the file
        ends early), None where it is absent. A twin is read and decoded whole."""
        got = self.storage.read_ranges([(n, np.array([[a, b]])) for n, a, b in requests])
        out: list = [None if chunks is None else chunks[0] for _, chunks in got]
        missing = [i for i, chunk in enumerate(out) if chunk is None]
        for i, content in self._twins([n for n, _, _ in requests], missing):
            out[i] = memoryview(content)[requests[i][1]:requests[i][2]]
        return out

    def _twins(self, names: Sequence[str], missing: list[int]) -> list[tuple[int, bytes]]:
        """(index, decoded content) of the ``missing`` names that have a twin, the first in
        :data:`TWINS` order where several do."""
        first = [self._last] if self._last else []
        packed: dict[int, tuple[str, bytes]] = {}
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
        decoded = pmap(lambda item: decompress_twin(
            item[1][1], item[1][0], self.storage.path(names[item[0]] + item[1][0]),
            self.limit), items, min_items=4)
        return [(i, content) for (i, _), content in zip(items, decoded)]

    def list(self) -> list[str]:
        """The plain names of the files present, sorted (a twin counts as its file)."""
        return plain_names(self.storage.list())

    def stored(self, names: Sequence[str], keep: str | None = None) -> list[str]:
        """The files present among ``names`` and their twins, less the ``keep`` variant
        (the suffix a writer just wrote), found with one batch of stats."""
        asks = [n + s for n in names for s in ("", *TWINS) if s != keep]
        return [n for n, info in zip(asks, self.storage.stat_many(asks)) if info is not None]

    @property
    def seen_twins(self) -> bool:
        """Whether a twin was read from this store."""
        return self._last is not None


def plain_names(names: Iterable[str]) -> list[str]:
    """The plain names of stored file names (twin suffixes removed), sorted, once each."""
    return sorted({split_twin(n)[0] for n in names})


def write_twins(storage: Storage, items: Sequence[tuple[str, bytes | memoryview]],
                suffix: str = "") -> None:
    """Write ``(name, content)`` files, each as its ``suffix`` twin (plain for ""),
    compressed on threads."""
    if suffix:
        items = pmap(lambda item: (item[0] + suffix, compress_twin(item[1], suffix)),
                     list(items), min_items=4)
    storage.write_many(items)
