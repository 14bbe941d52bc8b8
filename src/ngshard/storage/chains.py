"""Reads in dependent steps, one chain of them per object: the shape of a batch read of
sharded data, where an object's second read depends on what its first one said.

A chain is a generator that yields the read it needs next (a :class:`Head` or a
:class:`Ranges` of one object), is sent that read's answer (what :meth:`Storage.read_heads
<ngshard.storage.Storage.read_heads>` or :meth:`Storage.read_ranges
<ngshard.storage.Storage.read_ranges>` answer for that one object) and finally returns its
result. :meth:`Storage.run_chains <ngshard.storage.Storage.run_chains>` drives many chains:

- here, in lockstep (:func:`run_lockstep`): the first reads of every chain go out as one
  batch, then the second reads, and so on, so a store that batches its reads (local files:
  one pass of preads on threads) sees the same batches as phase by phase;
- on object stores and HTTP, each chain on its own on the event loop: one object's next read
  goes out as soon as its previous answer arrived, not when the slowest object of the batch
  answered, and no Python work between steps leaves the network idle.

A chain that raises stops the whole run (the others are cancelled, their reads dropped); it
runs on the store's event loop thread where the store has one, so it must not call the
store's blocking methods.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from .base import Storage


class Head(NamedTuple):
    """The first ``length`` bytes of object ``name`` (None: all of it, in one request) with
    its size and generation: answered as one item of :meth:`Storage.read_heads
    <ngshard.storage.Storage.read_heads>`."""

    name: str
    length: int | None


class Ranges(NamedTuple):
    """``(n, 2)`` [start, end) ranges of object ``name``: answered as one item of
    :meth:`Storage.read_ranges <ngshard.storage.Storage.read_ranges>`, ``(generation,
    chunks)``."""

    name: str
    ranges: np.ndarray


#: A chain of reads: yields :class:`Head` or :class:`Ranges`, is sent their answers.
Chain = Generator["Head | Ranges", Any, Any]


def run_lockstep(storage: Storage, chains: Sequence[Chain]) -> list[Any]:
    """The results of ``chains``, each step of every chain read in one batch with the same
    step of the others."""
    out: list[Any] = [None] * len(chains)
    asks: dict[int, Head | Ranges] = {}

    def advance(i: int, answer: Any) -> None:
        try:
            asks[i] = chains[i].send(answer)
        except StopIteration as done:
            out[i] = done.value

    for i in range(len(chains)):
        advance(i, None)
    while asks:
        now, asks = asks, {}
        answers: dict[int, Any] = {}
        heads = [(i, a) for i, a in now.items() if isinstance(a, Head)]
        for length in dict.fromkeys(a.length for _, a in heads):
            mine = [(i, a) for i, a in heads if a.length == length]
            answers.update(zip([i for i, _ in mine],
                               storage.read_heads([a.name for _, a in mine], length)))
        ranges = [(i, a) for i, a in now.items() if isinstance(a, Ranges)]
        answers.update(zip([i for i, _ in ranges],
                           storage.read_ranges([(a.name, a.ranges) for _, a in ranges])))
        for i in now:
            advance(i, answers[i])
    return out
