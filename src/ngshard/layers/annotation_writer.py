"""Writing annotation collections: every index (by id, per relationship, the multi-level
spatial index), sharded or a file per key, from numpy columns.

Nothing is held per annotation but numbers in arrays: records are encoded for all
annotations at once, and the values of each index are produced in batches of about
``ANNOTATION_BATCH_BYTES`` and streamed into the store (sharded stores spill past their
buffer), so millions of annotations cost memory proportional to their arrays, not to Python
objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .._arrays import unique
from ..destination import claim
from ..errors import SpecError
from ..limits import ANNOTATION_BATCH_BYTES, DEFAULT_ANNOTATIONS_PER_CELL
from ..sharded import ShardingSpec
from ..sharded.infofile import write_info
from ..sharded.spec import as_key_array
from ..storage import Location, Storage, StorageOptions, open_storage
from ..types import Compress
from .annotation_codec import (
    PROPERTY_TYPES,
    TYPES,
    PropertySpec,
    Records,
    Schema,
    encode_multiple,
    encode_records,
    encode_single,
)
from .annotation_shapes import shapes
from .annotation_spatial import morton, spatial_levels
from .annotations import KIND, Annotations
from .sharding import resolve_sharding
from .store import unsharded_twin, write_segments


def _property_columns(properties: Mapping[str, Any] | None, n: int
                      ) -> tuple[list[PropertySpec], dict[str, np.ndarray]]:
    """Specs (in stored order: 32-bit, 16-bit, then 8-bit types) and columns of the user's
    properties: ``{id: array}`` (type from the dtype; (n, 3) or (n, 4) uint8 are rgb/rgba)
    or ``{id: {"values": array, "type": ..., "description": ..., "enum_values": ...,
    "enum_labels": ...}}``."""
    specs, columns = [], {}
    for name, given in (properties or {}).items():
        meta = dict(given) if isinstance(given, Mapping) else {"values": given}
        values = np.asarray(meta.pop("values"))
        kind = meta.pop("type", None) or _infer_type(name, values)
        base, _, comps = PROPERTY_TYPES.get(kind, (None, 0, 1))
        if base is None:
            raise SpecError(f"property {name!r}: type {kind!r} is not one of "
                            f"{', '.join(PROPERTY_TYPES)}")
        if values.shape != ((n,) if comps == 1 else (n, comps)):
            raise ValueError(f"property {name!r}: shape {values.shape}, expected "
                             f"{(n,) if comps == 1 else (n, comps)}")
        if values.dtype.kind in "iu" and len(values) and np.dtype(base).kind in "iu":
            info = np.iinfo(base)
            if values.min() < info.min or values.max() > info.max:
                raise ValueError(f"property {name!r}: values outside the range of {kind}")
        enum_values = meta.pop("enum_values", None)
        enum_labels = meta.pop("enum_labels", None)
        specs.append(PropertySpec(name, kind, meta.pop("description", None),
                                  None if enum_values is None else tuple(enum_values),
                                  None if enum_labels is None else tuple(enum_labels)))
        if meta:
            raise ValueError(f"property {name!r}: unknown members {sorted(meta)}")
        columns[name] = values.astype(base)
    specs.sort(key=lambda p: -p.alignment)
    return specs, columns


def _infer_type(name: str, values: np.ndarray) -> str:
    if values.ndim == 2 and values.dtype == np.uint8 and values.shape[1] in (3, 4):
        return "rgb" if values.shape[1] == 3 else "rgba"
    if values.dtype.name in PROPERTY_TYPES:
        return values.dtype.name
    if values.dtype.kind == "f":
        return "float32"
    if values.dtype.kind == "b":
        return "uint8"
    if values.dtype.kind in "iu" and len(values):
        signed = values.min() < 0
        for kind in (("int32",) if signed else ("uint32", "int32")):
            info = np.iinfo(kind)
            if info.min <= values.min() and values.max() <= info.max:
                return kind
    if values.dtype.kind in "iu":
        return "int32" if values.dtype.kind == "i" else "uint32"
    raise SpecError(f"property {name!r}: cannot store dtype {values.dtype} (give a type)")


def _relations(relationships: Mapping[str, Any] | None, n: int
               ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per relationship (counts (n,), flat uint64 ids): from per-annotation id lists, a 1-D
    array (one id each) or a 2-D array (k ids each)."""
    out = {}
    for name, value in (relationships or {}).items():
        if isinstance(value, np.ndarray) and value.ndim in (1, 2):
            flat = as_key_array(value.reshape(-1))
            counts = np.full(n, 1 if value.ndim == 1 else value.shape[1], np.int64)
        else:
            lists = [np.atleast_1d(np.asarray(v)) for v in value]
            counts = np.fromiter(map(len, lists), np.int64, count=len(lists))
            flat = as_key_array(np.concatenate(lists)) if lists else np.zeros(0, np.uint64)
        if len(counts) != n or counts.sum() != len(flat):
            raise ValueError(f"relationship {name!r}: {len(counts)} id lists for {n} "
                             f"annotations")
        out[name] = (counts, flat)
    return out


def _by_id(schema: Schema, records: Records, ids: np.ndarray,
           relations: dict[str, tuple[np.ndarray, np.ndarray]]) -> Iterator[tuple[int, bytes]]:
    n = len(ids)
    per = max(1, ANNOTATION_BATCH_BYTES // (4 * max(1, int(records.offsets[-1]) // max(1, n)) + 16))
    starts = {k: np.r_[0, np.cumsum(c)] for k, (c, _) in relations.items()}
    for a in range(0, n, per):
        b = min(n, a + per)
        rel = [(c[a:b], flat[starts[k][a]:starts[k][b]])
               for k, (c, flat) in relations.items()]
        data, offsets = encode_single(records.slice(a, b), rel)
        yield from _split(ids[a:b], data, offsets)


def _split(keys: Any, data: np.ndarray, offsets: np.ndarray) -> Iterator[tuple[Any, bytes]]:
    view = data.data
    for key, o0, o1 in zip(keys.tolist() if hasattr(keys, "tolist") else keys,
                           offsets[:-1].tolist(), offsets[1:].tolist()):
        yield key, bytes(view[o0:o1])


def _lists(records: Records, ids: np.ndarray, keys: list, members: np.ndarray,
           bounds: np.ndarray) -> Iterator[tuple[Any, bytes]]:
    """Multiple-encoded lists (list j: annotations ``members[bounds[j]:bounds[j + 1]]``)
    under ``keys``, in batches of about ANNOTATION_BATCH_BYTES."""
    sizes = np.zeros(len(keys), np.int64)
    if len(members):
        used = np.diff(bounds) > 0
        sizes[used] = np.add.reduceat(4 * records.sizes[members] + 8, bounds[:-1][used])
    step = ANNOTATION_BATCH_BYTES
    cut = np.searchsorted(np.cumsum(sizes), np.arange(1, 1 + int(sizes.sum()) // step) * step)
    edges = unique(np.r_[0, cut, len(keys)])
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist()):
        part = bounds[a:b + 1]
        data, offsets = encode_multiple(records, ids, members[part[0]:part[-1]],
                                        part - part[0])
        yield from _split(keys[a:b], data, offsets)


def _write(storage: Storage, spec: ShardingSpec | None, items: Iterator, progress: bool,
           twin: str) -> None:
    # unsharded: files named by id, or x_y_z for spatial cells
    write_segments(storage, spec, items, progress=progress, twin=twin)


def write_annotations(url: Location, kind: str, geometry: Any, *,
                      ids: Any = None, properties: Mapping[str, Any] | None = None,
                      relationships: Mapping[str, Any] | None = None,
                      dimensions: Mapping[str, Any] | None = None,
                      sharding: None | str | dict | ShardingSpec = "auto",
                      lower_bound: Any = None, upper_bound: Any = None,
                      limit: int | None = None, seed: int = 0, progress: bool = False,
                      durable: bool = True, overwrite: bool = False,
                      compress: Compress | None = None,
                      storage_options: StorageOptions | None = None) -> Annotations:
    """Write an annotation collection: by_id, relationship and spatial indices and the info.

    Parameters
    ----------
    url
        Where the collection goes: its directory as a local path, any fsspec URL, or an
        open Storage.
    kind
        "point", "line", "axis_aligned_bounding_box", "ellipsoid" or "polyline".
    geometry
        ``(n, rank)`` points, ``(n, 2 * rank)`` endpoints / corners / center and radii, or
        for polylines a list of ``(p_i, rank)`` arrays.
    ids
        uint64 annotation ids (default 0 .. n - 1); unique.
    properties
        ``{id: column}`` (uint8 ... int32, float32; ``(n, 3)``/``(n, 4)`` uint8 for
        rgb/rgba) or ``{id: {"values": column, "type": ..., "description": ...,
        "enum_values": [...], "enum_labels": [...]}}``.
    relationships
        ``{id: related segment ids per annotation}``: a list of id lists, a 1-D array (one
        id each) or a 2-D array.
    dimensions
        ``{name: [scale, unit]}``; default x, y, z in nm (for rank 3).
    sharding
        "auto" (each index sharded by its key count), a spec used for every index, or None
        for a file per key.
    lower_bound, upper_bound
        The box of the spatial index (default: that of the geometry).
    limit
        Most annotations per spatial cell (default 5000; collections up to it get one
        level of one cell).
    seed
        The spatial index's sampling is pseudo-random: the same seed writes the same bytes.
    progress, durable, overwrite, compress, storage_options
        As for :func:`ngshard.write_skeletons`.

    Returns
    -------
    Annotations
        The collection, open for reading.

    Raises
    ------
    SpecError
        An unknown ``kind``, or ``compress`` given with sharding.
    ExistsError
        ``url`` holds a layer or store, and not ``overwrite``.
    """
    twin = unsharded_twin(compress, sharding)
    kind = kind.lower()
    if kind not in TYPES:
        raise SpecError(f"kind must be one of {', '.join(TYPES)}, got {kind!r}")
    if kind == "polyline":
        geometry = [np.asarray(p, np.float32) for p in geometry]
        n = len(geometry)
        rank = geometry[0].shape[-1] if n else len(dimensions or "xyz")
    else:
        geometry = np.asarray(geometry, np.float32)
        if geometry.ndim != 2:
            raise ValueError(f"geometry must be (n, k), got shape {geometry.shape}")
        n = len(geometry)
        rank = geometry.shape[1] // (1 if kind == "point" else 2)
    dims = dict(dimensions) if dimensions is not None else (
        {d: [1, "nm"] for d in "xyz"} if rank == 3 else {f"d{i}": [1, ""] for i in range(rank)})
    if len(dims) != rank:
        raise SpecError(f"dimensions name {len(dims)} axes, the geometry has {rank}")
    ids = np.arange(n, dtype=np.uint64) if ids is None else as_key_array(ids)
    if len(ids) != n or len(unique(ids)) != n:
        raise ValueError(f"ids must be {n} distinct uint64 values")
    specs, columns = _property_columns(properties, n)
    relations = _relations(relationships, n)
    schema = Schema(kind, rank, tuple(specs), tuple(relations))
    records = encode_records(schema, geometry, columns)
    placed = shapes(kind, rank, geometry)
    lo, hi = placed.lo, placed.hi
    lower = np.asarray(lower_bound if lower_bound is not None else
                       (lo.min(axis=0) if n else np.zeros(rank)), np.float64)
    upper = np.asarray(upper_bound if upper_bound is not None else
                       (hi.max(axis=0) if n else np.ones(rank)), np.float64)
    upper = np.where(upper > lower, upper, lower + 1)
    if limit is None:
        limit = min(max(n, 1), DEFAULT_ANNOTATIONS_PER_CELL)
    limit = max(1, int(limit))
    storage = open_storage(url, durable=durable, storage_options=storage_options)
    claim(storage, overwrite=overwrite, into=[storage.child(name) for name in (
        "by_id", "spatial0", *(f"rel_{r}" for r in relations))])
    mean = 4 * float(records.sizes.mean()) if n else None

    def spec_for(count: int, value_bytes: float | None) -> ShardingSpec | None:
        return resolve_sharding(sharding, count, value_bytes)

    by_id_spec = spec_for(n, mean)
    _write(storage.child("by_id"), by_id_spec, _by_id(schema, records, ids, relations),
           progress, twin)
    rel_info = []
    for name, (counts, flat) in relations.items():
        owner = np.repeat(np.arange(n), counts)
        order = np.lexsort((owner, flat))
        segs, members = flat[order], owner[order]
        starts = np.flatnonzero(np.r_[True, segs[1:] != segs[:-1]]) if len(segs) else \
            np.zeros(0, np.int64)
        bounds = np.r_[starts, len(segs)].astype(np.int64)
        keys = segs[starts]
        spec = spec_for(len(keys), mean * len(segs) / max(1, len(keys)) if mean else None)
        _write(storage.child(f"rel_{name}"), spec,
               _lists(records, ids, keys.tolist(), members, bounds), progress, twin)
        rel_info.append({"id": name, "key": f"rel_{name}",
                         **({"sharding": spec.to_json()} if spec else {})})
    spatial_info = []
    for i, level in enumerate(spatial_levels(placed, lower, upper, limit, seed)):
        cells = level.cells
        spec = spec_for(len(cells), mean * len(level.annotations) / max(1, len(cells))
                        if mean else None)
        names = morton(cells, level.level.grid_shape).tolist() if spec else \
            ["_".join(map(str, c)) for c in cells.tolist()]
        _write(storage.child(f"spatial{i}"), spec,
               _lists(records, ids, names, level.annotations, level.bounds), progress, twin)
        spatial_info.append({"key": f"spatial{i}",
                             "grid_shape": level.level.grid_shape.tolist(),
                             "chunk_size": level.level.chunk_size.tolist(), "limit": limit,
                             **({"sharding": spec.to_json()} if spec else {})})
    info = {"@type": KIND, "dimensions": dims, "lower_bound": lower.tolist(),
            "upper_bound": upper.tolist(), "annotation_type": kind,
            "properties": [p.to_json() for p in specs], "relationships": rel_info,
            "by_id": {"key": "by_id", **({"sharding": by_id_spec.to_json()}
                                         if by_id_spec else {})},
            "spatial": spatial_info}
    write_info(storage, info)
    return Annotations(storage, info)
