"""Dict semantics for every layer read by uint64 id (skeletons, meshes, annotations, segment
properties), as :class:`~ngshard.ShardedKV` has them: ``layer.get(id)`` is None (or the
default given) for an absent id, ``layer[id]`` raises KeyError, ``id in layer`` and
``for id in layer`` ask for ids only; ``get_many(ids)`` gives the present ones, batched.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, TypeVar

import numpy as np

from ..errors import InvalidKeyError
from ..sharded.spec import check_key
from .store import SegmentStore

V = TypeVar("V")
T = TypeVar("T")


class ById(Generic[V]):
    """A layer's values by id, over its batched :meth:`get_many` and :meth:`keys_array`."""

    def get_many(self, segment_ids: Iterable[int] | np.ndarray) -> dict[int, V]:
        """``{id: value}`` of the ids present among ``segment_ids``, read in one batch."""
        raise NotImplementedError

    def keys_array(self) -> np.ndarray:
        """Every id present, sorted."""
        raise NotImplementedError

    def _has(self, key: int) -> bool:
        """Whether ``key`` is present (layers that can tell without decoding say so)."""
        return key in self.get_many([key])

    def get(self, segment_id: int, default: T | None = None) -> V | T | None:
        """The value of one id, ``default`` (None) if it has none (``layer[id]`` raises
        KeyError instead).

        Raises
        ------
        InvalidKeyError
            An id outside [0, 2**64).
        CorruptDataError
            A value that does not decode (the message names the id and where it lies).
        """
        key = check_key(segment_id)
        return self.get_many([key]).get(key, default)

    def __getitem__(self, segment_id: int) -> V:
        key = check_key(segment_id)
        found = self.get_many([key])
        if key not in found:
            raise KeyError(segment_id)
        return found[key]

    def __contains__(self, segment_id: object) -> bool:
        try:
            key = check_key(segment_id)
        except InvalidKeyError:  # an id this layer cannot hold is not in it
            return False
        return self._has(key)

    def __iter__(self) -> Iterator[int]:
        return iter(self.keys_array().tolist())

    def __len__(self) -> int:
        return len(self.keys_array())


class InStore(ById[V]):
    """A layer whose values lie in a :class:`SegmentStore` (``self.store``): ids listed and
    looked up there, without decoding."""

    store: SegmentStore

    def keys_array(self) -> np.ndarray:
        """Every id present, sorted (from the shard indices, or the file names)."""
        return self.store.keys_array()

    def _has(self, key: int) -> bool:
        return self.store.get(key) is not None
