"""Annotation encodings (``neuroglancer_annotations_v1``), pure and vectorized: the schema an
info describes, and the bytes of many annotations at once.

One annotation's record: its geometry as float32le (a point: ``rank`` numbers; line, box,
ellipsoid: ``2 * rank``; polyline: a uint32le point count, then that many points), then its
properties grouped by size (32-bit, then 16-bit, then 8-bit types and rgb/rgba, each group in
info order, as neuroglancer lays them out), zero-padded to a multiple of 4 bytes.

- single encoding (``by_id``): the record, then per relationship a uint32le count and that
  many uint64le ids;
- multiple encoding (relationship and spatial indices): a uint64le count, the records, then
  the annotation ids as uint64le.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..bounded import take
from ..errors import CorruptDataError, SpecError
from ..types import Blob

TYPES = ("point", "line", "axis_aligned_bounding_box", "ellipsoid", "polyline")
# type -> (numpy type, alignment group, components)
PROPERTY_TYPES = {"uint32": ("<u4", 4, 1), "int32": ("<i4", 4, 1), "float32": ("<f4", 4, 1),
                  "uint16": ("<u2", 2, 1), "int16": ("<i2", 2, 1), "uint8": ("u1", 1, 1),
                  "int8": ("i1", 1, 1), "rgb": ("u1", 1, 3), "rgba": ("u1", 1, 4)}
_PROPERTY_ID = re.compile(r"[a-z][a-zA-Z0-9_]*")
_U8 = np.dtype("u1")
_U32 = np.dtype("<u4")


@dataclass(frozen=True)
class PropertySpec:
    """One entry of the info's ``properties``."""

    id: str
    type: str
    description: str | None = None
    enum_values: tuple | None = None
    enum_labels: tuple | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _PROPERTY_ID.fullmatch(self.id):
            raise SpecError(f"annotation property id {self.id!r} must match "
                            f"[a-z][a-zA-Z0-9_]*")
        if self.type not in PROPERTY_TYPES:
            raise SpecError(f"annotation property {self.id!r}: type must be one of "
                            f"{', '.join(PROPERTY_TYPES)}, got {self.type!r}")
        values, labels = self.enum_values, self.enum_labels
        if (values is None) != (labels is None) or (
                values is not None and labels is not None and (
                    self.type in ("rgb", "rgba") or len(values) != len(labels))):
            raise SpecError(f"annotation property {self.id!r}: enum_values and enum_labels "
                            f"go together, with as many labels as values, on numeric types")

    @property
    def dtype(self) -> np.dtype:
        base, _, n = PROPERTY_TYPES[self.type]
        return np.dtype((base, (n,))) if n > 1 else np.dtype(base)

    @property
    def alignment(self) -> int:
        return PROPERTY_TYPES[self.type][1]

    def to_json(self) -> dict:
        doc: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.description is not None:
            doc["description"] = self.description
        if self.enum_values is not None and self.enum_labels is not None:
            doc["enum_values"] = list(self.enum_values)
            doc["enum_labels"] = list(self.enum_labels)
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> PropertySpec:
        if not isinstance(doc, dict):
            raise SpecError(f"annotation property must be an object, got {doc!r}")
        values, labels = doc.get("enum_values"), doc.get("enum_labels")
        ident: Any = doc.get("id")  # checked by the constructor, as type is
        kind: Any = doc.get("type")
        return cls(ident, kind, doc.get("description"),
                   None if values is None else tuple(values),
                   None if labels is None else tuple(labels))


@dataclass(frozen=True)
class Schema:
    """What every annotation of a collection holds: geometry kind and rank, properties,
    relationships."""

    kind: str
    rank: int
    properties: tuple[PropertySpec, ...] = ()
    relationships: tuple[str, ...] = ()
    _order: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in TYPES:
            raise SpecError(f"annotation_type must be one of {', '.join(TYPES)} (any case), "
                            f"got {self.kind!r}")
        if not 1 <= self.rank <= 32:
            raise SpecError(f"annotation rank must be in [1, 32], got {self.rank}")
        ids = [p.id for p in self.properties]
        if len(set(ids)) != len(ids):
            raise SpecError(f"annotation property ids repeat: {ids}")
        order = sorted(range(len(ids)), key=lambda i: -self.properties[i].alignment)
        object.__setattr__(self, "_order", tuple(order))

    @property
    def geometry_size(self) -> int:
        """Floats of geometry per annotation (per point for polylines)."""
        return self.rank if self.kind in ("point", "polyline") else 2 * self.rank

    @property
    def property_dtype(self) -> np.dtype:
        """The properties in stored order, padded to a multiple of 4 bytes."""
        fields = [(f"p{i}", self.properties[i].dtype) for i in self._order]
        size = np.dtype(fields).itemsize if fields else 0
        pad = -size % 4
        return np.dtype(fields + ([("pad", "u1", (pad,))] if pad else []))

    @property
    def record_dtype(self) -> np.dtype:
        """One fixed-size record (every kind but polyline)."""
        return np.dtype([("geometry", "<f4", (self.geometry_size,)),
                         ("props", self.property_dtype)])

    def property_columns(self, table: np.ndarray) -> dict[str, np.ndarray]:
        """{property id: column} of a structured array of ``property_dtype``."""
        return {self.properties[i].id: table[f"p{i}"] for i in self._order}

    def property_table(self, values: dict[str, np.ndarray], n: int) -> np.ndarray:
        """A structured ``property_dtype`` array of ``n`` rows from {id: column}."""
        table = np.zeros(n, self.property_dtype)
        for i in self._order:
            p = self.properties[i]
            table[f"p{i}"] = values[p.id]
        return table


def _spread(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate(arange(s, s + n) for s, n in zip(starts, lengths))``, vectorized."""
    lengths = np.asarray(lengths, np.int64)
    total = int(lengths.sum())
    if not total:
        return np.zeros(0, np.int64)
    return np.repeat(np.asarray(starts, np.int64) - (np.cumsum(lengths) - lengths),
                     lengths) + np.arange(total)


class Records:
    """The encoded records of n annotations as 32-bit words (every record is a multiple of
    4 bytes): record i is ``words[offsets[i]:offsets[i + 1]]``; ``width`` is the words of
    every record when they all have one size (all kinds but polyline)."""

    def __init__(self, words: np.ndarray, offsets: np.ndarray, width: int | None) -> None:
        self.words, self.offsets, self.width = words, offsets, width

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def sizes(self) -> np.ndarray:
        """Words per record."""
        return np.diff(self.offsets)

    def take(self, index: np.ndarray) -> np.ndarray:
        """The words of records ``index``, back to back."""
        if self.width is not None:
            return self.words.reshape(-1, self.width)[index].reshape(-1)
        return self.words[_spread(self.offsets[index], self.sizes[index])]

    def slice(self, a: int, b: int) -> Records:
        o = self.offsets
        return Records(self.words[o[a]:o[b]], o[a:b + 1] - o[a], self.width)


def encode_records(schema: Schema, geometry: Any, properties: dict[str, np.ndarray]
                   ) -> Records:
    """The records of n annotations: ``geometry`` ``(n, k)`` floats, or for polylines a list
    of ``(p_i, rank)`` arrays; ``properties`` {id: column of n values}."""
    if schema.kind != "polyline":
        geometry = np.asarray(geometry, np.float32).reshape(-1, schema.geometry_size)
        n = len(geometry)
        table = np.zeros(n, schema.record_dtype)
        table["geometry"] = geometry
        table["props"] = schema.property_table(properties, n)
        width = schema.record_dtype.itemsize // 4
        return Records(table.view(_U32).reshape(-1),
                       np.arange(n + 1, dtype=np.int64) * width, width)
    points = [np.asarray(p, np.float32).reshape(-1, schema.rank) for p in geometry]
    n = len(points)
    counts = np.fromiter(map(len, points), np.int64, count=n)
    props = schema.property_table(properties, n).view(_U32).reshape(n, -1)
    pwords = props.shape[1]
    sizes = 1 + schema.rank * counts + pwords
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    words = np.zeros(int(offsets[-1]), _U32)
    words[offsets[:-1]] = counts
    flat = np.concatenate(points).reshape(-1) if n else np.zeros(0, np.float32)
    words[_spread(offsets[:-1] + 1, counts * schema.rank)] = flat.view(_U32)
    if pwords:
        words[_spread(offsets[1:] - pwords, np.full(n, pwords))] = props.reshape(-1)
    return Records(words, offsets, None)


@dataclass
class Decoded:
    """Annotations decoded from one value: geometry ``(n, k)`` float32 (for polylines a list
    of ``(p, rank)`` arrays), property columns, ids, and relationship id lists (by_id)."""

    geometry: Any
    properties: dict[str, np.ndarray]
    ids: np.ndarray | None = None
    relationships: dict[str, np.ndarray] | None = None


def decode_records(schema: Schema, buf: memoryview, offset: int, count: int, where: str
                   ) -> tuple[Decoded, int]:
    """``count`` records starting at ``offset`` of ``buf``; returns them and where they end.
    Every count is checked against the bytes there before anything is allocated."""
    if schema.kind != "polyline":
        dtype = schema.record_dtype
        if count > (len(buf) - offset) // max(1, dtype.itemsize):
            raise CorruptDataError(f"{where}: {count} annotations of {dtype.itemsize} bytes "
                                   f"do not fit the {len(buf) - offset} bytes left")
        table = take(buf, dtype, count, offset, where=where, what="annotations")
        return (Decoded(table["geometry"], schema.property_columns(table["props"])),
                offset + count * dtype.itemsize)
    pdtype = schema.property_dtype
    step = 4 * schema.rank
    if count > (len(buf) - offset) // (4 + pdtype.itemsize):
        raise CorruptDataError(f"{where}: {count} polylines do not fit the "
                               f"{len(buf) - offset} bytes left")
    points, starts = [], np.zeros(count, np.int64)
    # Each record's length follows from its own count: a walk, bounded by the value's size.
    for i in range(count):
        if offset + 4 > len(buf):
            raise CorruptDataError(f"{where}: polyline {i} starts past the end of the value")
        p = int(take(buf, "<u4", 1, offset, where=where, what="point count")[0])
        end = offset + 4 + step * p + pdtype.itemsize
        if end > len(buf):
            raise CorruptDataError(f"{where}: polyline {i} claims {p} points, past the end "
                                   f"of the value")
        points.append(take(buf, "<f4", p * schema.rank, offset + 4, where=where,
                           what="polyline points").reshape(p, schema.rank))
        starts[i] = end - pdtype.itemsize
        offset = end
    raw = np.frombuffer(buf, _U8, len(buf))
    props = raw[_spread(starts, np.full(count, pdtype.itemsize))].view(pdtype) \
        if pdtype.itemsize else np.zeros(count, pdtype)
    return Decoded(points, schema.property_columns(props)), offset


def encode_single(records: Records, relations: list[tuple[np.ndarray, np.ndarray]]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The by_id values of n annotations, back to back: (uint8 data, byte offsets (n + 1,)).
    ``relations`` holds per relationship (counts (n,), flat ids) in annotation order."""
    n = len(records)
    sizes = records.sizes.copy()
    for counts, _ in relations:
        sizes += 1 + 2 * counts
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    words = np.zeros(int(offsets[-1]), _U32)
    words[_spread(offsets[:-1], records.sizes)] = records.words
    at = offsets[:-1] + records.sizes
    for counts, ids in relations:
        words[at] = counts
        words[_spread(at + 1, 2 * counts)] = np.asarray(ids, "<u8").view(_U32)
        at = at + 1 + 2 * counts
    return words.view(_U8), offsets * 4


def decode_single(schema: Schema, buf: Blob, where: str) -> Decoded:
    """One by_id value: its record and relationship id lists (exact length checked)."""
    buf = memoryview(buf)
    decoded, offset = decode_records(schema, buf, 0, 1, where)
    relationships = {}
    for name in schema.relationships:
        if offset + 4 > len(buf):
            raise CorruptDataError(f"{where}: relationship {name!r} starts past the end")
        count = int(take(buf, "<u4", 1, offset, where=where, what=name)[0])
        if count > (len(buf) - offset - 4) // 8:
            raise CorruptDataError(f"{where}: relationship {name!r} claims {count} ids, past "
                                   f"the end of the value")
        relationships[name] = take(buf, "<u8", count, offset + 4, where=where, what=name)
        offset += 4 + 8 * count
    if offset != len(buf):
        raise CorruptDataError(f"{where}: {len(buf) - offset} bytes left over after the "
                               f"annotation")
    decoded.relationships = relationships
    return decoded


def encode_multiple(records: Records, ids: np.ndarray, groups: np.ndarray,
                    bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lists of annotations in the multiple encoding, back to back: ``groups`` indexes the
    annotations (records and ``ids``) of every list in turn, list j being
    ``groups[bounds[j]:bounds[j + 1]]``. Returns (uint8 data, byte offsets of the lists)."""
    lengths = np.diff(bounds)
    rec = records.sizes[groups]
    body = np.zeros(len(lengths), np.int64)
    nonempty = lengths > 0
    if len(rec):
        body[nonempty] = np.add.reduceat(rec, bounds[:-1][nonempty])
    sizes = 2 + body + 2 * lengths
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    words = np.zeros(int(offsets[-1]), _U32)
    heads = words[:0]
    if len(lengths):
        heads = np.stack([lengths & 0xFFFFFFFF, lengths >> 32], axis=1).astype(_U32)
    words[_spread(offsets[:-1], np.full(len(lengths), 2))] = heads.reshape(-1)
    words[_spread(offsets[:-1] + 2, body)] = records.take(groups)
    words[_spread(offsets[:-1] + 2 + body, 2 * lengths)] = \
        np.asarray(ids, "<u8")[groups].view(_U32)
    return words.view(_U8), offsets * 4


def decode_multiple(schema: Schema, buf: Blob, where: str) -> Decoded:
    """A list of annotations (relationship or spatial index value), exact length checked."""
    buf = memoryview(buf)
    if len(buf) < 8:
        raise CorruptDataError(f"{where}: {len(buf)} bytes, shorter than the 8-byte count")
    count = int(take(buf, "<u8", 1, where=where, what="count")[0])
    if count > (len(buf) - 8) // 12:  # a record is at least 4 bytes, an id 8
        raise CorruptDataError(f"{where}: claims {count} annotations, more than its "
                               f"{len(buf)} bytes hold")
    decoded, offset = decode_records(schema, buf, 8, count, where)
    if offset + 8 * count != len(buf):
        raise CorruptDataError(f"{where}: {count} annotations should take "
                               f"{offset + 8 * count} bytes, the value has {len(buf)}")
    decoded.ids = take(buf, "<u8", count, offset, where=where, what="ids")
    return decoded
