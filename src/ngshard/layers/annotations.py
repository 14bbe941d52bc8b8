"""Annotation collections (``neuroglancer_annotations_v1``): lookups by id, by related segment
and by box, each in batches over the collection's indices (sharded or a file per key)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import SpecError
from ..jsondoc import Doc
from ..kinds import ANNOTATIONS as KIND
from ..limits import MAX_QUERY_CELLS
from ..sharded.infofile import INFO
from ..sharded.spec import as_key_array, check_key
from ..storage import Location, Storage, StorageOptions, open_storage
from ..storage.names import check_name
from ..types import Blob
from .annotation_codec import (
    PropertySpec,
    Schema,
    decode_multiple,
    decode_single,
)
from .annotation_shapes import shapes
from .annotation_spatial import Level, cells_meeting, morton, unmorton
from .info import layer_info, parse_sharding
from .lookup import ById
from .store import SegmentStore


@dataclass
class Annotation:
    """One annotation: ``geometry`` (float32; for polylines ``(p, rank)``), ``properties``
    ``{id: value}`` and, from the id index, ``relationships`` ``{id: uint64 array}``."""

    id: int
    type: str
    geometry: np.ndarray
    properties: dict[str, Any] = field(default_factory=dict)
    relationships: dict[str, np.ndarray] | None = None

    def _half(self, second: bool) -> np.ndarray:
        rank = len(self.geometry) // 2
        return self.geometry[rank:] if second else self.geometry[:rank]

    @property
    def point(self) -> np.ndarray:
        """A point's position."""
        return self.geometry

    @property
    def point_a(self) -> np.ndarray:
        """First endpoint (line) or corner (box)."""
        return self._half(False)

    @property
    def point_b(self) -> np.ndarray:
        """Second endpoint (line) or corner (box)."""
        return self._half(True)

    center, radii = point_a, point_b  # ellipsoids

    @property
    def points(self) -> np.ndarray:
        """A polyline's points ``(p, rank)``."""
        return self.geometry


@dataclass
class AnnotationSet:
    """Many annotations as columns: ``ids`` (uint64), ``geometry`` ``(n, k)`` float32 (for
    polylines a list of ``(p, rank)`` arrays) and ``properties`` ``{id: column}``."""

    type: str
    ids: np.ndarray
    geometry: Any
    properties: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> Annotation:
        return Annotation(int(self.ids[i]), self.type, self.geometry[i],
                          {k: v[i] for k, v in self.properties.items()})

    def take(self, index: np.ndarray) -> AnnotationSet:
        geometry = [self.geometry[i] for i in index.tolist()] if isinstance(
            self.geometry, list) else self.geometry[index]
        return AnnotationSet(self.type, self.ids[index], geometry,
                             {k: v[index] for k, v in self.properties.items()})


def _concat(schema: Schema, parts: list[AnnotationSet]) -> AnnotationSet:
    if not parts:
        geometry: Any = [] if schema.kind == "polyline" else np.zeros(
            (0, schema.geometry_size), np.float32)
        empty = {p.id: np.zeros((0,) + p.dtype.shape, p.dtype.base) for p in schema.properties}
        return AnnotationSet(schema.kind, np.zeros(0, np.uint64), geometry, empty)
    geometry = [g for p in parts for g in p.geometry] if schema.kind == "polyline" else \
        np.concatenate([p.geometry for p in parts])
    return AnnotationSet(schema.kind, np.concatenate([p.ids for p in parts]), geometry,
                         {k: np.concatenate([p.properties[k] for p in parts])
                          for k in parts[0].properties})


def _child(storage: Storage, key: Any, where: str) -> Storage:
    """The sub-directory ``key`` ("/"-separated, inside the collection) of an annotation
    info."""
    return storage.child(check_name(key, where, "index key", folder=True))


class Annotations(ById[Annotation]):
    """An annotation collection, opened with :func:`open_annotations` (or
    :func:`ngshard.open`).

    Read by id as a mapping of annotation id to :class:`Annotation` (``coll[id]`` KeyError
    if absent, ``coll.get(id)`` None), through its by_id index; by related segment with
    :meth:`related`, by box with :meth:`query`.

    Attributes
    ----------
    type : str
        point, line, axis_aligned_bounding_box, ellipsoid or polyline.
    dimensions : dict
        ``{name: [scale, unit]}`` in order; the rank is its length.
    lower_bound, upper_bound : numpy.ndarray
        The box holding every annotation.
    properties : tuple of PropertySpec
    relationships : list of str
    """

    def __init__(self, storage: Storage, info: dict) -> None:
        where = storage.path(INFO)
        self.storage, self.info = storage, info
        d = Doc(info, where)
        dims = d.obj("dimensions")
        if not dims.value:
            raise d.fail("must be a non-empty object", "dimensions")
        self.dimensions = dims.value
        rank = len(dims.value)
        self.lower_bound = np.array(d.numbers("lower_bound", length=rank), np.float64)
        self.upper_bound = np.array(d.numbers("upper_bound", length=rank), np.float64)
        try:
            props = tuple(PropertySpec.from_json(p.value) for p in d.objects("properties", []))
        except (TypeError, ValueError) as e:  # SpecError is a ValueError: named below
            raise SpecError(f"{where}: {e}") from None
        rels = d.objects("relationships", [])
        self.schema = Schema(d.text("annotation_type").lower(), rank, props,
                             tuple(r.text("id") for r in rels))
        self.type, self.properties = self.schema.kind, props
        self.relationships = list(self.schema.relationships)
        self._rel = {r.text("id"): self._store(r.value, where) for r in rels}
        by_id = d.obj("by_id", None)
        self.by_id = None if by_id is None else self._store(by_id.value, where)
        self.levels = []
        for s in d.objects("spatial", []):
            level = Level(np.array(s.numbers("chunk_size", length=rank), np.float64),
                          np.array(s.integers("grid_shape", length=rank, lo=0, hi=1 << 62),
                                   np.int64))
            if (level.grid_shape < 1).any() or not (level.chunk_size > 0).all():
                raise s.fail("grid_shape and chunk_size must be positive")
            if sum(int(g - 1).bit_length() for g in level.grid_shape) > 64:
                raise s.fail(f"grid_shape {level.grid_shape.tolist()} has too many cells "
                             f"for 64-bit cell codes")
            self.levels.append((level, self._store(s.value, where),
                                s.integer("limit", None, lo=0)))

    def _store(self, doc: Any, where: str) -> SegmentStore:
        if not isinstance(doc, dict):
            raise SpecError(f"{where}: an index must be an object with a key, got {doc!r}")
        return SegmentStore(_child(self.storage, doc.get("key"), where),
                            parse_sharding(doc, where))

    def __repr__(self) -> str:
        return f"Annotations({self.storage.url!r}, {self.type})"

    @property
    def store(self) -> SegmentStore | None:
        """The by_id index (raw values by annotation id)."""
        return self.by_id

    def describe(self) -> list[tuple[str, str]]:
        """(name, text) rows for ``ngshard info``."""
        dims = ", ".join(f"{k} {v[0]:g} {v[1]}" for k, v in self.dimensions.items())
        rows = [("type", self.type), ("dimensions", dims),
                ("bounds", f"{self.lower_bound.tolist()} .. {self.upper_bound.tolist()}")]
        rows += [("property", f"{p.id} ({p.type}"
                  f"{', enum' if p.enum_values is not None else ''})") for p in self.properties]
        rows += [("relationship", f"{r} ({'sharded' if s.sharding else 'a file per id'})")
                 for r, s in self._rel.items()]
        for i, (level, store, limit) in enumerate(self.levels):
            rows.append((f"spatial {i}", f"grid {level.grid_shape.tolist()}, cells of "
                         f"{[float(f'{c:.4g}') for c in level.chunk_size]}, limit {limit}, "
                         f"{'sharded' if store.sharding else 'a file per cell'}"))
        if self.by_id is not None:
            rows.append(("by_id", "sharded (its store below)" if self.by_id.sharding else
                         f"{len(self.keys_array())} annotations, a file each"))
        return rows

    # --- by id -------------------------------------------------------------------------

    def _single(self, key: int, value: Blob, where: str) -> Annotation:
        d = decode_single(self.schema, value, f"{where}: annotation {key}")
        props = {k: v[0] for k, v in d.properties.items()}
        return Annotation(key, self.type, d.geometry[0], props, d.relationships)

    def get_many(self, annotation_ids: Iterable[int] | np.ndarray) -> dict[int, Annotation]:
        """{id: Annotation} of the ids present, read in one batch."""
        store = self.by_id
        if store is None:
            return {}
        found = store.get_many(as_key_array(annotation_ids))
        return {k: self._single(k, v, store.where(k)) for k, v in found.items()}

    def keys_array(self) -> np.ndarray:
        """Every annotation id (from the by_id index), sorted."""
        return self.by_id.keys_array() if self.by_id is not None else np.zeros(0, np.uint64)

    def _has(self, key: int) -> bool:
        return self.by_id is not None and self.by_id.get(key) is not None

    # --- lists: relationships and the spatial index -----------------------------------

    def _lists(self, store: SegmentStore, keys: list, names: list[str] | None
               ) -> list[AnnotationSet]:
        """Decode the annotation lists stored under ``keys`` (morton codes, or for an
        unsharded spatial level the cell file ``names``)."""
        items: list[tuple[str, int | str, Blob]]
        if names is None:
            found = store.get_many(np.array(keys, np.uint64))
            items = [(store.where(k), k, found[k]) for k in sorted(found)]
        else:
            blobs = store.files.read_many(names)
            items = [(store.storage.path(n), n, b) for n, b in zip(names, blobs)
                     if b is not None]
        out = []
        for where, key, blob in items:
            d = decode_multiple(self.schema, blob, f"{where}: chunk {key}")
            assert d.ids is not None, "decode_multiple gives the ids"
            out.append(AnnotationSet(self.type, d.ids, d.geometry, d.properties))
        return out

    def related(self, relationship: str, segment_id: int) -> AnnotationSet:
        """The annotations related to one segment through ``relationship`` (empty if none).

        Raises
        ------
        KeyError
            No relationship of that id.
        """
        store = self._rel[relationship]
        return _concat(self.schema, self._lists(store, [check_key(segment_id)], None))

    def query(self, lower: Any = None, upper: Any = None) -> AnnotationSet:
        """Every annotation that meets the box ``[lower, upper]`` (closed; defaults: the
        collection's bounds), each once: points and boxes that lie in it or overlap it, lines
        and polylines that pass through it, ellipsoids that reach into it.

        Walks the spatial index from the coarsest level down, reading per level all the
        cells the box meets in one batch; an annotation stored in several cells or levels
        is returned once, from the coarsest. Without a bound, the box is open on that side
        (the info's bounds may round below a float32 coordinate on them).
        """
        rank = self.schema.rank
        lo = np.full(rank, -np.inf) if lower is None else np.asarray(lower, np.float64)
        hi = np.full(rank, np.inf) if upper is None else np.asarray(upper, np.float64)
        parts = []
        for level, store, _ in self.levels:
            cells = self._cells(level, store, lo, hi)
            if not len(cells):
                continue
            if store.sharding is None:
                names = ["_".join(map(str, c)) for c in cells.tolist()]
                parts += self._lists(store, [], names)
            else:
                parts += self._lists(store, morton(cells, level.grid_shape).tolist(), None)
        found = _concat(self.schema, parts)
        inside = shapes(self.type, self.schema.rank, found.geometry).meeting(lo, hi)
        _, first = np.unique(found.ids, return_index=True)
        keep = np.zeros(len(found), bool)
        keep[first] = True
        return found.take(np.flatnonzero(keep & inside))

    def _cells(self, level: Level, store: SegmentStore, lo: np.ndarray, hi: np.ndarray
               ) -> np.ndarray:
        """The cells of a level meeting the box; past MAX_QUERY_CELLS, the stored ones
        among them (from the level's listing) rather than every one."""
        lo = np.maximum(lo, self.lower_bound)
        hi = np.minimum(hi, self.lower_bound + level.chunk_size * level.grid_shape)
        if (hi < lo).any():
            return np.zeros((0, len(lo)), np.int64)
        first, last = level.cell_ranges(lo[None], hi[None], self.lower_bound)
        if int(np.prod(last - first + 1)) <= MAX_QUERY_CELLS:
            return cells_meeting(level, self.lower_bound, lo, hi)
        stored = _stored_cells(store, level)
        within = ((stored >= first) & (stored <= last)).all(axis=1)
        return stored[within]


def _stored_cells(store: SegmentStore, level: Level) -> np.ndarray:
    """The cells a spatial level holds, from its shard indices or file names."""
    rank = len(level.grid_shape)
    if store.sharding is not None:
        return unmorton(store.keys_array(), level.grid_shape)
    names = [n.split("_") for n in store.files.list()]
    cells = [list(map(int, p)) for p in names if len(p) == rank and all(s.isdigit() for s in p)]
    return np.array(cells, np.int64).reshape(-1, rank)


def open_annotations(url: Location,
                     *, storage_options: StorageOptions | None = None) -> Annotations:
    """Open the annotation collection at ``url`` (the directory holding its info)."""
    storage = open_storage(url, storage_options=storage_options)
    return Annotations(storage, layer_info(storage, KIND))
