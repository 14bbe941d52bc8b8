"""The encoded skeleton of one segment (``neuroglancer_skeletons``), pure bytes <-> arrays.

Layout: ``num_vertices`` and ``num_edges`` (uint32le), vertex positions ``[n, 3]`` float32le,
edges ``[m, 2]`` uint32le, then per vertex attribute of the info ``n * num_components``
little-endian values of its type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..bounded import take
from ..errors import CorruptDataError, SpecError
from ..types import Blob

ATTRIBUTE_TYPES = ("float32", "int8", "uint8", "int16", "uint16", "int32", "uint32")
_HEAD = np.dtype("<u4")
_DTYPES = {t: np.dtype(t).newbyteorder("<") for t in ATTRIBUTE_TYPES}


class VertexAttribute(NamedTuple):
    """One ``vertex_attributes`` entry of a skeleton info."""

    id: str
    data_type: str
    num_components: int

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.data_type]

    def to_json(self) -> dict:
        return {"id": self.id, "data_type": self.data_type,
                "num_components": self.num_components}

    @classmethod
    def from_json(cls, doc: object, where: str) -> VertexAttribute:
        if not isinstance(doc, dict):
            raise SpecError(f"{where}: a vertex attribute must be an object, got {doc!r}")
        name, dtype, n = doc.get("id"), doc.get("data_type"), doc.get("num_components")
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}: vertex attribute id must be a non-empty string, "
                            f"got {name!r}")
        if dtype not in ATTRIBUTE_TYPES:
            raise SpecError(f"{where}: vertex attribute {name!r}: data_type must be one of "
                            f"{', '.join(ATTRIBUTE_TYPES)}, got {dtype!r}")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1 << 16:
            raise SpecError(f"{where}: vertex attribute {name!r}: num_components must be a "
                            f"positive integer, got {n!r}")
        return cls(name, dtype, n)


def encode_skeleton(vertices: np.ndarray, edges: np.ndarray,
                    attributes: Mapping[str, np.ndarray] | None = None,
                    spec: Sequence[VertexAttribute] = (), key: object = "") -> bytes:
    """One skeleton's bytes (see :func:`encode_skeletons`)."""
    return encode_skeletons([(key, vertices, edges, attributes)], spec)[0]


def encode_skeletons(items: Sequence[tuple[object, Any, Any, Mapping | None]],
                     spec: Sequence[VertexAttribute] = ()) -> list[bytes]:
    """The bytes of many skeletons, given as ``(key, vertices, edges, attributes)``.

    vertices
        ``(n, 3)`` positions in stored model coordinates (converted to float32).
    edges
        ``(m, 2)`` vertex indices (converted to uint32); each must be below n.
    attributes
        ``{id: array}`` with one entry per attribute of ``spec`` (the layer's, in info
        order): ``(n,)`` or ``(n, num_components)`` values.

    Per skeleton only the shapes are checked in Python; the arrays of the whole batch are
    concatenated, checked and converted in one numpy pass each, and each skeleton's bytes
    are joined from those with one copy.

    Raises
    ------
    ValueError
        Shapes that do not fit, edges naming missing vertices, attributes missing or extra
        (the message names the skeleton's key).
    """
    ids = _ids(spec)
    vs, es = [], []
    cols: list[list[np.ndarray]] = [[] for _ in spec]
    for key, vertices, edges, attributes in items:
        v, e = np.asarray(vertices), np.asarray(edges)
        if v.ndim != 2 or v.shape[1] != 3:
            raise ValueError(f"skeleton {key}: vertices must have shape (n, 3), got {v.shape}")
        if e.size == 0:
            e = np.zeros((0, 2), np.uint32)
        if e.ndim != 2 or e.shape[1] != 2:
            raise ValueError(f"skeleton {key}: edges must have shape (m, 2), got {e.shape}")
        if len(v) >= 1 << 32 or len(e) >= 1 << 32:
            raise ValueError(f"skeleton {key}: more than 2**32 - 1 vertices or edges")
        attributes = attributes or {}
        if len(attributes) > len(spec) or not ids.issuperset(attributes):
            extra = set(attributes) - ids
            raise ValueError(f"skeleton {key}: attribute(s) {', '.join(sorted(extra))} are "
                             f"not in the layer's vertex_attributes "
                             f"({', '.join(a.id for a in spec) or 'none'})")
        for a, col in zip(spec, cols):
            if a.id not in attributes:
                raise ValueError(f"skeleton {key}: no values for vertex attribute {a.id!r}")
            values = np.asarray(attributes[a.id])
            if values.size != len(v) * a.num_components or (values.ndim and
                                                             len(values) != len(v)):
                raise ValueError(f"skeleton {key}: attribute {a.id!r} has shape "
                                 f"{values.shape}, expected ({len(v)}, {a.num_components})")
            col.append(values.reshape(-1))
        vs.append(v)
        es.append(e)
    count = len(vs)
    n = np.fromiter(map(len, vs), np.int64, count)
    m = np.fromiter(map(len, es), np.int64, count)
    edges = np.concatenate(es) if count else np.zeros((0, 2), np.uint32)
    if len(edges):
        # column by column (a reduction along axis 1 is several times slower)
        bad = np.maximum(edges[:, 0], edges[:, 1]) >= np.repeat(n, m)
        if edges.dtype.kind != "u":
            bad |= np.minimum(edges[:, 0], edges[:, 1]) < 0
        if bad.any():
            i = int(np.searchsorted(np.cumsum(m), np.argmax(bad), "right"))
            e = np.asarray(items[i][2])
            raise ValueError(f"skeleton {items[i][0]}: edges name vertex {int(e.max())} (or "
                             f"a negative one) but there are {n[i]} vertices")
    heads = np.stack([n, m], axis=1).astype(_HEAD).view(np.uint8).reshape(-1)
    blocks = [(heads, np.full(count, 8)), (_bytes(vs, "<f4"), 12 * n),
              (_bytes([edges], "<u4"), 8 * m)]
    blocks += [(_bytes(col, a.dtype), a.dtype.itemsize * a.num_components * n)
               for a, col in zip(spec, cols)]
    # each skeleton's bytes joined straight from the blocks (one copy): a byte-level numpy
    # gather into one buffer measured 4x slower than these count * len(blocks) slices
    views = [data.data for data, _ in blocks]  # each a 1-D uint8 array
    cuts = [np.concatenate(([0], np.cumsum(sizes))).tolist() for _, sizes in blocks]
    join = b"".join
    return [join([v[c[i]:c[i + 1]] for v, c in zip(views, cuts)]) for i in range(count)]


def _bytes(arrays: list, dtype: Any) -> np.ndarray:
    """The arrays joined as little-endian ``dtype`` bytes (no copy when one already is)."""
    joined = arrays[0] if len(arrays) == 1 else \
        np.concatenate(arrays) if arrays else np.zeros(0, dtype)
    return np.ascontiguousarray(joined, dtype).view(np.uint8).reshape(-1)


def _ids(spec: Sequence[VertexAttribute]) -> set[str]:
    return {a.id for a in spec}


def decode_skeleton(buf: Blob, spec: Sequence[VertexAttribute], where: str
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """(vertices ``(n, 3)`` float32, edges ``(m, 2)`` uint32, {attribute id: array}).

    Attributes with one component come back as ``(n,)`` arrays, others as
    ``(n, num_components)``. A value that ends right after its edges has no attributes
    (cloud-volume writes such values for skeletons without radii); any other length that
    does not match the counts, and any edge naming a missing vertex, raise CorruptDataError
    naming ``where``. Nothing larger than ``buf`` is allocated.
    """
    size = len(buf)
    if size < 8:
        raise CorruptDataError(f"{where}: skeleton of {size} bytes is shorter than its "
                               f"8-byte header")
    n, m = (int(x) for x in take(buf, _HEAD, 2, where=where, what="header"))
    base = 8 + 12 * n + 8 * m
    per_vertex = sum(a.dtype.itemsize * a.num_components for a in spec)
    full = base + n * per_vertex
    if size not in (base, full):
        raise CorruptDataError(
            f"{where}: skeleton claims {n} vertices and {m} edges "
            f"({full} bytes with its attributes) but holds {size} bytes")
    vertices = take(buf, "<f4", 3 * n, 8, where=where, what="vertices").reshape(n, 3)
    edges = take(buf, "<u4", 2 * m, 8 + 12 * n, where=where, what="edges").reshape(m, 2)
    if m and int(edges.max()) >= n:
        i = int(np.argmax(edges.max(axis=1) >= n))
        raise CorruptDataError(f"{where}: edge {i} {edges[i].tolist()} names a vertex past "
                               f"the {n} vertices")
    attributes: dict[str, np.ndarray] = {}
    offset = base
    if size == full:
        for a in spec:
            values = take(buf, a.dtype, n * a.num_components, offset, where=where,
                          what=f"attribute {a.id}")
            attributes[a.id] = values if a.num_components == 1 else \
                values.reshape(n, a.num_components)
            offset += values.nbytes
    return vertices, edges, attributes
