"""Mesh layers: multi-resolution Draco meshes (``neuroglancer_multilod_draco``) and legacy
single-resolution meshes (``neuroglancer_legacy_mesh``, or a directory of ``<id>:0``
manifests without an info), read by segment id in batches.

A multi-resolution read is two batched rounds: the manifests, then the fragment bytes of the
LODs asked for (sharded: the bytes right before each manifest in its shard; unsharded: byte
ranges of the ``<id>`` files). Then the whole batch decodes at once (:mod:`.mesh_batch`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from .._arrays import unique
from ..errors import CorruptDataError, SpecError
from ..jsondoc import Doc, parse_json
from ..kinds import LEGACY_MESHES as LEGACY
from ..kinds import MESHES as KIND
from ..kinds import kind_of
from ..sharded import open_kv
from ..sharded.infofile import INFO, read_info
from ..sharded.spec import as_key_array, check_key
from ..storage import Location, Storage, StorageOptions, open_storage
from ..storage.names import check_name, shown
from ..types import Blob
from .info import apply_transform, parse_sharding, parse_transform
from .lookup import InStore
from .mesh_batch import Piece, decode_pieces
from .mesh_codec import Manifest, decode_legacy, unindexed_sizes
from .store import SegmentStore

T = TypeVar("T")


@dataclass
class Mesh:
    """One segment's triangle mesh at one level of detail: ``vertices (n, 3)`` float32 in
    model coordinates (the info's transform applied), ``faces (m, 3)`` uint32."""

    id: int
    vertices: np.ndarray
    faces: np.ndarray
    lod: int = 0


def _concat(key: int, parts: list[tuple[np.ndarray, np.ndarray]], lod: int) -> Mesh:
    if not parts:
        return Mesh(key, np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint32), lod)
    counts = np.array([len(v) for v, _ in parts], np.int64)
    shift = np.cumsum(counts) - counts
    faces = [f.astype(np.uint32) + np.uint32(s) for (_, f), s in zip(parts, shift.tolist())]
    return Mesh(key, np.concatenate([v for v, _ in parts]).astype(np.float32),
                np.concatenate(faces), lod)


class Meshes(InStore[Mesh]):
    """A multi-resolution mesh layer, opened with :func:`open_meshes` (or
    :func:`ngshard.open`).

    Read as a mapping of segment id to :class:`Mesh` (at LOD 0 by ``layer[id]``, KeyError
    if absent; any LOD by ``layer.get(id, lod=n)``, None if absent).

    Attributes
    ----------
    vertex_quantization_bits : int
    transform : numpy.ndarray
        ``(3, 4)`` stored model to model coordinates.
    sharding : ShardingSpec or None
    kv : ShardedKV or None
        The sharded store (its rewrites and compactions keep the fragment data).
    """

    def __init__(self, storage: Storage, info: dict) -> None:
        where = storage.path(INFO)
        self.storage, self.info = storage, info
        bits = info.get("vertex_quantization_bits")
        if bits not in (10, 16):
            raise SpecError(f"{where}: vertex_quantization_bits must be 10 or 16, got {bits!r}")
        self.vertex_quantization_bits = bits
        self.transform = parse_transform(info, where)
        multiplier = info.get("lod_scale_multiplier", 1)
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)):
            raise SpecError(f"{where}: lod_scale_multiplier must be a number")
        self.lod_scale_multiplier = float(multiplier)
        self.sharding = parse_sharding(info, where)
        kv = None
        if self.sharding is not None:
            if self.sharding.data_encoding != "raw":
                raise SpecError(f"{where}: mesh shards need data_encoding raw (fragments are "
                                f"read by byte range), not {self.sharding.data_encoding}")
            kv = open_kv(storage, self.sharding, info=False, unindexed=unindexed_sizes)
        self.kv = kv
        self.store = SegmentStore(storage, self.sharding, ".index", kv=kv)

    def __repr__(self) -> str:
        return f"Meshes({self.storage.url!r})"

    def manifests(self, segment_ids: Iterable[int] | np.ndarray) -> dict[int, Manifest]:
        """The manifests of the segments present, in one batch."""
        found = self.store.get_many(as_key_array(segment_ids))
        return {k: Manifest.from_bytes(v, f"{self.store.where(k)}: segment {k} manifest")
                for k, v in found.items()}

    def _fetch(self, keys: np.ndarray, lod: int | None
               ) -> dict[int, tuple[Manifest, Any, int | None]]:
        """{key: (manifest, fragment bytes of ``lod`` (all LODs if None), LOD index)}."""
        chosen: dict[int, tuple[Manifest, int | None]] = {}

        def pick(key: int, value: Blob) -> tuple[int, int, int]:
            m = Manifest.from_bytes(value, f"{self.store.where(key)}: segment {key} manifest")
            index = lod if lod is None or lod >= 0 else m.num_lods + lod
            if index is not None and not 0 <= index < m.num_lods:
                raise ValueError(f"segment {key} has {m.num_lods} levels of detail, not "
                                 f"{lod}")
            chosen[key] = (m, index)
            begin, end = (0, m.total_size) if index is None else m.lod_range(index)
            return begin, end, m.total_size

        def before(key: int, value: Blob) -> tuple[int, int]:
            """The fragments' span, relative to the manifest's start."""
            begin, end, total = pick(key, value)
            return begin - total, end - total

        if self.kv is not None:
            found = self.kv.get_many_with_unindexed(keys, before)
            return {k: (chosen[k][0], data, chosen[k][1]) for k, (data, _) in found.items()}
        manifests = self.store.get_many(keys)
        spans = {k: pick(k, manifests[k]) for k in keys.tolist() if k in manifests}
        reads = self.store.files.read_ranges([(str(k), b, e) for k, (b, e, _) in
                                              spans.items()])
        out = {}
        for (k, (b, e, _)), chunk in zip(spans.items(), reads):
            if chunk is None or len(chunk) != e - b:
                raise CorruptDataError(f"{self.storage.path(str(k))}: fragment data of segment "
                                       f"{k} ends before byte {e} its manifest names")
            out[k] = (chosen[k][0], chunk, chosen[k][1])
        return out

    def encoded_many(self, segment_ids: Iterable[int] | np.ndarray
                     ) -> dict[int, tuple[bytes, bytes]]:
        """{id: (fragment data of every LOD, manifest)} as stored, for the segments present:
        a layer copied without decoding its meshes (two batched reads)."""
        fetched = self._fetch(unique(as_key_array(segment_ids)), None)
        return {k: (bytes(data), m.to_bytes()) for k, (m, data, _) in fetched.items()}

    def get(self, segment_id: int, default: T | None = None, *, lod: int = 0
            ) -> Mesh | T | None:
        """One segment's mesh at one level of detail (``lod``: 0 the finest, -1 the
        coarsest), ``default`` (None) if the segment has none (``layer[id]``, LOD 0, raises
        KeyError instead).

        Raises
        ------
        ValueError
            The segment has no such level of detail.
        CorruptDataError
            A manifest, fragment range or Draco fragment that does not decode; the message
            names the segment (and LOD and fragment).
        """
        key = check_key(segment_id)
        return self.get_many([key], lod).get(key, default)

    def get_many(self, segment_ids: Iterable[int] | np.ndarray, lod: int | str = 0
                 ) -> dict[int, Any]:
        """{id: Mesh} of the segments present at one LOD, or with ``lod="all"`` {id: [Mesh
        per LOD, finest first]}; two batched reads for all of them."""
        keys = unique(as_key_array(segment_ids))
        every = lod == "all"
        fetched = self._fetch(keys, None if every else int(lod))
        if every:
            pieces = [Piece(k, i, m, data, 0) for k, (m, data, _) in fetched.items()
                      for i in range(m.num_lods)]
        else:
            pieces = [Piece(k, i, m, data, m.lod_range(i)[0])
                      for k, (m, data, i) in fetched.items() if i is not None]
        decoded = decode_pieces(pieces, self.vertex_quantization_bits, self.transform,
                                self.store.where)
        meshes = [Mesh(p.key, v, f, p.lod) for p, (v, f) in zip(pieces, decoded)]
        if not every:
            return {m.id: m for m in meshes}
        out: dict[int, list[Mesh]] = {}
        for m in meshes:
            out.setdefault(m.id, []).append(m)
        return out


class LegacyMeshes(InStore[Mesh]):
    """A legacy single-resolution mesh layer: per segment a ``<id>:0`` JSON manifest naming
    fragment files (unsharded), or the fragment itself as the value (sharded). Read as a
    mapping of segment id to :class:`Mesh`, as :class:`Meshes` is."""

    def __init__(self, storage: Storage, info: dict | None) -> None:
        self.storage, self.info = storage, info or {"@type": LEGACY}
        self.sharding = parse_sharding(self.info, storage.path(INFO))
        self.transform = parse_transform(self.info, storage.path(INFO))
        self.store = SegmentStore(storage, self.sharding, ":0")
        self.kv = self.store.kv

    def __repr__(self) -> str:
        return f"LegacyMeshes({self.storage.url!r})"

    def get(self, segment_id: int, default: T | None = None, *, lod: int = 0
            ) -> Mesh | T | None:
        """One segment's mesh (all its fragments), ``default`` (None) if it has none
        (``layer[id]`` raises KeyError instead); ``lod`` 0 or -1, its one level of detail."""
        if lod not in (0, -1):
            raise ValueError(f"a legacy mesh has one level of detail, not {lod}")
        key = check_key(segment_id)
        return self.get_many([key]).get(key, default)

    def get_many(self, segment_ids: Iterable[int] | np.ndarray, lod: int | str = 0
                 ) -> dict[int, Any]:
        """{id: Mesh} of the segments present (``lod="all"``: {id: [Mesh]})."""
        keys = unique(as_key_array(segment_ids))
        found = self.store.get_many(keys)
        if self.kv is not None:
            parts = {k: [(v, self.store.where(k))] for k, v in found.items()}
        else:
            parts = self._fragments(found)
        out = {}
        for k, frags in parts.items():
            meshes = [decode_legacy(b, f"{w}: segment {k}") for b, w in frags]
            mesh = _concat(k, [(apply_transform(v, self.transform), f) for v, f in meshes], 0)
            out[k] = [mesh] if lod == "all" else mesh
        return out

    def _fragments(self, manifests: dict[int, Blob]) -> dict[int, list]:
        names: dict[int, list[str]] = {}
        for k, raw in manifests.items():
            where = self.storage.path(f"{k}:0")
            doc = Doc(parse_json(raw, where, error=CorruptDataError), where,
                      error=CorruptDataError)
            frags = doc.texts("fragments")
            if len(set(frags)) != len(frags):  # a mesh as many times as named: no
                twice = next(f for f, n in Counter(frags).items() if n > 1)
                raise CorruptDataError(f"{where}: names fragment {shown(twice)} twice")
            names[k] = [check_name(f, where, "fragment name", error=CorruptDataError)
                        for f in frags]
        flat = list(dict.fromkeys(n for frags in names.values() for n in frags))
        blobs = dict(zip(flat, self.store.files.read_many(flat)))
        missing = [n for n, b in blobs.items() if b is None]
        if missing:
            raise CorruptDataError(f"{self.storage.path(missing[0])}: a fragment a manifest "
                                   f"names is missing")
        return {k: [(blobs[n], self.storage.path(n)) for n in frags]
                for k, frags in names.items()}


def open_meshes(url: Location,
                *, storage_options: StorageOptions | None = None) -> Meshes | LegacyMeshes:
    """Open the mesh layer at ``url``: multi-resolution (its info says
    ``neuroglancer_multilod_draco``) or legacy (``neuroglancer_legacy_mesh``, or no info)."""
    storage = open_storage(url, storage_options=storage_options)
    doc = read_info(storage)
    if doc is not None and kind_of(doc) == KIND:
        return Meshes(storage, doc)
    if doc is None or kind_of(doc) == LEGACY:
        return LegacyMeshes(storage, doc)
    raise SpecError(f"{storage.path(INFO)}: @type {doc.get('@type')!r} is not a mesh layer")
