"""The volume tests share a spy on the chunk stores' batch calls."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ngshard.volume.chunks import FileChunks, ShardedChunks


@pytest.fixture
def spy_chunk_stores(monkeypatch) -> Callable:
    """``spy(count)``: from then on, ``count(op, store, positions)`` is called before every
    ``get`` (chunks fetched) and ``put`` (chunks staged encoded) on both kinds of chunk store."""

    def spy(count: Callable) -> None:
        def wrap(op, original):
            def counted(self, positions, *rest):
                count(op, self, positions)
                return original(self, positions, *rest)
            return counted

        for cls in (ShardedChunks, FileChunks):
            for op in ("get", "put"):
                monkeypatch.setattr(cls, op, wrap(op, getattr(cls, op)))
            if "put_block" in vars(cls):  # raw chunks staged as one block (else through put)
                monkeypatch.setattr(cls, "put_block", wrap("put", cls.put_block))

    return spy
