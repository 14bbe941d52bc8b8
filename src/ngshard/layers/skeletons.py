"""Skeleton layers (``neuroglancer_skeletons``): typed reads by segment id, bulk writes.

Skeletons are stored in "stored model" coordinates; the info's ``transform`` maps them to
model coordinates (nanometres), applied on request (``transform=True``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from ..destination import claim
from ..errors import SpecError
from ..kinds import SKELETONS as KIND
from ..limits import SKELETON_BATCH
from ..sharded.infofile import INFO
from ..sharded.spec import ShardingSpec, as_key_array, check_key
from ..storage import Location, Storage, StorageOptions, open_storage
from ..types import Blob, Compress
from .attach import check_segmentation, publish
from .info import apply_transform, layer_info, parse_sharding, parse_transform, transform_json
from .lookup import InStore
from .sharding import resolve_sharding
from .skeleton_codec import VertexAttribute, decode_skeleton, encode_skeletons
from .store import SegmentStore, batched, count_of, pairs, unsharded_twin, write_segments

T = TypeVar("T")


@dataclass
class Skeleton:
    """One segment's skeleton: ``vertices (n, 3)`` float32, ``edges (m, 2)`` uint32 (pairs of
    vertex indices) and ``attributes`` (``{id: (n,) or (n, k) array}``, e.g. ``radius``)."""

    id: int
    vertices: np.ndarray
    edges: np.ndarray
    attributes: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def radius(self) -> np.ndarray | None:
        """The ``radius`` attribute, None if the layer has none."""
        return self.attributes.get("radius")


class Skeletons(InStore[Skeleton]):
    """A skeleton layer, opened with :func:`open_skeletons` (or :func:`ngshard.open`).

    Read as a mapping of segment id to :class:`Skeleton`: ``layer[id]`` (KeyError if
    absent), ``layer.get(id)`` (None if absent), ``id in layer``, ``len(layer)``, iteration
    over the ids; :meth:`get_many` reads many in one batch.

    Attributes
    ----------
    info : dict
        The layer's info as stored.
    transform : numpy.ndarray
        ``(3, 4)`` affine map from stored model coordinates to nanometres.
    vertex_attributes : list of VertexAttribute
        The attributes every skeleton carries, in stored order.
    sharding : ShardingSpec or None
        None for a file per segment.
    """

    def __init__(self, storage: Storage, info: dict) -> None:
        where = storage.path(INFO)
        self.storage, self.info = storage, info
        self.transform = parse_transform(info, where)
        attrs = info.get("vertex_attributes", [])
        if not isinstance(attrs, list):
            raise SpecError(f"{where}: vertex_attributes must be a list, got {attrs!r}")
        self.vertex_attributes = [VertexAttribute.from_json(a, where) for a in attrs]
        ids = [a.id for a in self.vertex_attributes]
        if len(set(ids)) != len(ids):
            raise SpecError(f"{where}: vertex attribute ids repeat: {ids}")
        self.sharding = parse_sharding(info, where)
        self.store = SegmentStore(storage, self.sharding)

    def __repr__(self) -> str:
        return f"Skeletons({self.storage.url!r})"

    def _decode(self, key: int, value: Blob, transform: bool) -> Skeleton:
        v, e, attrs = decode_skeleton(value, self.vertex_attributes,
                                      f"{self.store.where(key)}: segment {key}")
        if transform:
            v = apply_transform(v, self.transform)
        return Skeleton(key, v, e, attrs)

    def get(self, segment_id: int, default: T | None = None, *, transform: bool = False
            ) -> Skeleton | T | None:
        """The skeleton of one segment, ``default`` (None) if it has none (``layer[id]``
        raises KeyError instead).

        Parameters
        ----------
        segment_id
            A uint64 segment id.
        default
            What an absent segment gives.
        transform
            Vertices in model coordinates (nm, the info's ``transform`` applied) instead of
            stored model coordinates.

        Raises
        ------
        InvalidKeyError, CorruptDataError
            An id outside [0, 2**64); a value that does not decode (the message names the
            segment and where it lies).
        """
        key = check_key(segment_id)
        return self.get_many([key], transform=transform).get(key, default)

    def get_many(self, segment_ids: Iterable[int] | np.ndarray, *, transform: bool = False
                 ) -> dict[int, Skeleton]:
        """{id: Skeleton} of the segments present among ``segment_ids``, read in one batch."""
        found = self.store.get_many(as_key_array(segment_ids))
        return {k: self._decode(k, v, transform) for k, v in found.items()}


def open_skeletons(url: Location,
                   *, storage_options: StorageOptions | None = None) -> Skeletons:
    """Open the skeleton layer at ``url`` (the directory holding its ``info``).

    Raises
    ------
    NotFoundError
        No info there.
    SpecError
        An info that is not a valid ``neuroglancer_skeletons`` one (the member is named).
    """
    storage = open_storage(url, storage_options=storage_options)
    return Skeletons(storage, layer_info(storage, KIND))


def _attribute_spec(given: Any, first: Any) -> list[VertexAttribute]:
    """The layer's vertex attributes: as given (info entries, VertexAttributes, or ``{id:
    dtype}`` / ``{id: (dtype, num_components)}``), or learnt from the first item's arrays."""
    if given is None:
        attrs = _item_parts(first, None)[2] if first is not None else {}
        given = {}
        for name, arr in attrs.items():
            arr = np.asarray(arr)
            given[name] = (arr.dtype.name, 1 if arr.ndim <= 1 else int(arr.shape[1]))
    if isinstance(given, Mapping):
        out = []
        for name, t in given.items():
            dtype, n = (t, 1) if not isinstance(t, (tuple, list)) else t
            out.append(VertexAttribute.from_json(
                {"id": name, "data_type": np.dtype(dtype).name, "num_components": n},
                "vertex_attributes"))
        return out
    return [a if isinstance(a, VertexAttribute) else
            VertexAttribute.from_json(a, "vertex_attributes") for a in given]


def _item_parts(value: Any, key: object) -> tuple[Any, Any, Mapping]:
    if isinstance(value, Skeleton):
        return value.vertices, value.edges, value.attributes
    if isinstance(value, (tuple, list)) and len(value) in (2, 3):
        return value[0], value[1], (value[2] if len(value) == 3 else {}) or {}
    raise TypeError(f"skeleton {key}: expected (vertices, edges), (vertices, edges, "
                    f"{{name: array}}) or a Skeleton, got {type(value).__name__}")


def write_skeletons(url: Location,
                    items: Mapping[int, Any] | Iterable[tuple[int, Any]], *,
                    vertex_attributes: Any = None,
                    sharding: None | str | dict | ShardingSpec = "auto",
                    transform: Any = None,
                    buffer_bytes: int | None = None, progress: bool = False,
                    durable: bool = True, overwrite: bool = False,
                    compress: Compress | None = None,
                    storage_options: StorageOptions | None = None,
                    segmentation: Location | None = None) -> Skeletons:
    """Write a skeleton layer at ``url``: its shards (or a file per segment) and its info.

    Parameters
    ----------
    url, storage_options
        The layer's directory (a local path, any fsspec URL, or an open Storage), and how
        to reach it (see :func:`ngshard.open_volume`).
    items
        ``{id: (vertices, edges)}`` or ``{id: (vertices, edges, {name: array})}`` (or
        :class:`Skeleton` values), or an iterable of such (id, value) pairs of any length:
        they are encoded and written in a stream, memory bounded by ``buffer_bytes``.
    vertex_attributes
        The attributes every skeleton carries: ``{id: dtype}``, ``{id: (dtype,
        num_components)}`` or info entries; by default those of the first item.
    sharding
        "auto" (murmurhash shards sized by the number of skeletons, see
        :func:`~ngshard.layers.sharding.segment_sharding`), a spec, or None for a file per
        segment.
    transform
        Stored model to nm: 12 numbers (a 3x4 matrix); identity by default.
    buffer_bytes
        Encoded skeletons held before they are spilled by shard (192 MiB by default; a
        local shard's spill file becomes the shard, so spilling costs little).
    progress, durable
        As for :func:`ngshard.write_kv` (``durable=False`` skips the fsyncs: scratch work).
    overwrite
        Replace a layer or store already at ``url`` (all it owns is removed first); by
        default such a destination is refused.
    compress
        With ``sharding=None``: each file written as its compressed twin, as cloud-volume's
        ``compress=`` does: None (plain), "gzip" (``<id>.gz``), "br" or "zstd".
    segmentation
        A segmentation volume to attach the layer to, as :func:`ngshard.write_meshes` does.

    Returns
    -------
    Skeletons
        The layer, open for reading.

    Raises
    ------
    ValueError
        A skeleton whose arrays do not fit (the message names the segment).
    ExistsError
        ``url`` holds a layer or store, and not ``overwrite``.
    SpecError
        A bad ``compress``, or one given with sharding; ``segmentation`` is not one
        (checked before anything is written).
    """
    twin = unsharded_twin(compress, sharding)
    if segmentation is not None:
        check_segmentation(segmentation)
    storage = open_storage(url, durable=durable, storage_options=storage_options)
    it = iter(pairs(items))
    head = list(itertools.islice(it, SKELETON_BATCH))
    spec = _attribute_spec(vertex_attributes, head[0][1] if head else None)

    def encoded(items: Iterable[tuple[int, Any]]) -> Iterable[tuple[int, bytes]]:
        for batch in batched(items, SKELETON_BATCH):
            keys = [check_key(key) for key, _ in batch]
            yield from zip(keys, encode_skeletons(
                [(k, *_item_parts(value, k)) for k, (_, value) in zip(keys, batch)], spec))

    first = list(encoded(head))
    count = count_of(items) if len(head) == SKELETON_BATCH else len(head)
    mean = sum(len(b) for _, b in first) / len(first) if first else None
    shards = resolve_sharding(sharding, count, mean)
    claim(storage, overwrite=overwrite)  # after the first items are known to encode
    write_segments(storage, shards, itertools.chain(first, encoded(it)),
                   buffer_bytes=buffer_bytes, progress=progress, twin=twin)
    info: dict[str, Any] = {"@type": KIND, "transform": transform_json(transform),
            "vertex_attributes": [a.to_json() for a in spec]}
    if shards is not None:
        info["sharding"] = shards.to_json()
    publish(storage, info, segmentation, "skeletons")
    return Skeletons(storage, info)

