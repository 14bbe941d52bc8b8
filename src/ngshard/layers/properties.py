"""Segment properties (``neuroglancer_segment_properties``): inline per-segment labels,
descriptions, strings, tags and numbers, kept in one info file, read and written here.

A volume, skeleton or mesh layer points at its properties through the ``segment_properties``
member of its own info (the name of a sub-directory); :func:`write_segment_properties` given
such a layer writes the properties beside it and sets that member.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .._arrays import unique
from ..destination import claim
from ..errors import SpecError
from ..kinds import LEGACY_MESHES, MESHES, SKELETONS, VOLUME, kind_of
from ..kinds import PROPERTIES as KIND
from ..sharded.infofile import INFO, read_info, write_info
from ..sharded.spec import as_key_array
from ..storage import Location, Storage, StorageOptions, open_storage
from .attach import attach, check_segmentation
from .info import layer_info
from .lookup import ById

TYPES = ("label", "description", "string", "tags", "number")
NUMBER_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "float32")
_ONCE = ("label", "description", "tags")
_DECIMAL = re.compile(r"[0-9]{1,20}")
_TAG = re.compile(r"[^\s#][^\s]*")


class SegmentProperties(ById[dict[str, Any]]):
    """Inline segment properties, opened with :func:`open_segment_properties`.

    Read as a mapping of segment id to ``{property id: value}``: ``props[id]`` (KeyError if
    absent), ``props.get(id)`` (None if absent), ``get_many(ids)``; :meth:`values` gives one
    property of every segment.

    Attributes
    ----------
    ids : numpy.ndarray
        The segment ids (uint64), in stored order.
    properties : list of dict
        The property specs as stored (``id``, ``type``, ...), without their values.
    """

    def __init__(self, storage: Storage | None, info: dict, where: str = INFO) -> None:
        self.storage, self.info = storage, info
        inline = info.get("inline", {"ids": [], "properties": []})
        if not isinstance(inline, dict):
            raise SpecError(f"{where}: inline must be an object")
        ids = inline.get("ids", [])
        if not isinstance(ids, list) or not all(isinstance(s, str) and _DECIMAL.fullmatch(s)
                                                for s in ids):
            raise SpecError(f"{where}: inline.ids must be a list of base-10 strings")
        keys = [int(s) for s in ids]
        if keys and max(keys) >= 1 << 64:
            raise SpecError(f"{where}: inline.ids holds {max(keys)}, past 2**64 - 1")
        self.ids = np.array(keys, np.uint64)
        props = inline.get("properties", [])
        if not isinstance(props, list):
            raise SpecError(f"{where}: inline.properties must be a list")
        self._values: dict[str, Any] = {}
        self.properties: list[dict] = []
        for p in props:
            spec, values = _parse_property(p, len(keys), where)
            if spec["id"] in self._values:
                raise SpecError(f"{where}: property id {spec['id']!r} appears twice")
            self._values[spec["id"]] = values
            self.properties.append(spec)
        for kind in _ONCE:
            if sum(p["type"] == kind for p in self.properties) > 1:
                raise SpecError(f"{where}: more than one property of type {kind!r}")
        self._order = np.argsort(self.ids, kind="stable")

    def __repr__(self) -> str:
        names = ", ".join(p["id"] for p in self.properties)
        return f"SegmentProperties({len(self.ids)} ids; {names})"

    def __len__(self) -> int:
        return len(self.ids)

    def values(self, name: str) -> np.ndarray | list:
        """One property's values, aligned with :attr:`ids`: a numpy array for numbers, a list
        of strings for label/description/string, a list of tag-name lists for tags."""
        if name not in self._values:
            raise KeyError(name)
        spec = next(p for p in self.properties if p["id"] == name)
        values = self._values[name]
        if spec["type"] == "tags":
            return [[spec["tags"][i] for i in row] for row in values]
        return values

    def get_many(self, segment_ids: Iterable[int] | np.ndarray) -> dict[int, dict[str, Any]]:
        """``{id: {property id: value}}`` of the segments present among ``segment_ids``."""
        keys = unique(as_key_array(segment_ids))
        ordered = self.ids[self._order]
        pos = np.searchsorted(ordered, keys)
        hit = pos < len(ordered)
        hit[hit] = ordered[pos[hit]] == keys[hit]
        rows = self._order[pos[hit]].tolist()
        return {k: self._row(i) for k, i in zip(keys[hit].tolist(), rows)}

    def keys_array(self) -> np.ndarray:
        """Every segment id with properties, sorted."""
        return unique(self.ids)

    def _row(self, i: int) -> dict[str, Any]:
        """``{property id: value}`` of the segment in stored position ``i``."""
        out: dict[str, Any] = {}
        for p in self.properties:
            value = self._values[p["id"]][i]
            if p["type"] == "tags":
                value = [p["tags"][t] for t in value]
            elif p["type"] == "number":
                value = value.item()
            out[p["id"]] = value
        return out


def _parse_property(p: Any, n: int, where: str) -> tuple[dict, Any]:
    if not isinstance(p, dict):
        raise SpecError(f"{where}: a property must be an object, got {p!r}")
    name, kind, values = p.get("id"), p.get("type"), p.get("values")
    if not isinstance(name, str):
        raise SpecError(f"{where}: property id must be a string, got {name!r}")
    if kind not in TYPES:
        raise SpecError(f"{where}: property {name!r}: type must be one of {', '.join(TYPES)}, "
                        f"got {kind!r}")
    if not isinstance(values, list) or len(values) != n:
        raise SpecError(f"{where}: property {name!r}: values must be a list of {n} entries "
                        f"(one per id)")
    spec = {k: v for k, v in p.items() if k != "values"}
    if kind in ("label", "description", "string"):
        if not all(isinstance(v, str) for v in values):
            raise SpecError(f"{where}: property {name!r}: values must be strings")
        return spec, values
    if kind == "number":
        dtype = p.get("data_type")
        if dtype not in NUMBER_TYPES:
            raise SpecError(f"{where}: property {name!r}: data_type must be one of "
                            f"{', '.join(NUMBER_TYPES)}, got {dtype!r}")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            raise SpecError(f"{where}: property {name!r}: values must be numbers")
        arr = np.array(values, np.float64)
        info = np.iinfo(dtype) if dtype != "float32" else None
        if info is not None and len(arr) and (arr.min() < info.min or arr.max() > info.max):
            raise SpecError(f"{where}: property {name!r}: values outside the range of {dtype}")
        return spec, arr.astype(dtype)
    tags = p.get("tags")
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise SpecError(f"{where}: property {name!r}: tags must be a list of strings")
    good = all(isinstance(row, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < len(tags) for t in row)
        and all(a < b for a, b in zip(row, row[1:])) for row in values)
    if not good:
        raise SpecError(f"{where}: property {name!r}: each value must be an increasing list "
                        f"of indices into the {len(tags)} tags")
    return spec, values


def open_segment_properties(url: Location,
                            *, storage_options: StorageOptions | None = None) -> SegmentProperties:
    """Open the segment properties at ``url`` (their directory, holding the info)."""
    storage = open_storage(url, storage_options=storage_options)
    return SegmentProperties(storage, layer_info(storage, KIND), storage.path(INFO))


def _column(name: str, values: Sequence, n: int) -> list:
    values = list(values)
    if len(values) != n:
        raise ValueError(f"property {name!r}: {len(values)} values for {n} ids")
    return values


def segment_properties_json(ids: Any, *, labels: Sequence[str] | None = None,
                            descriptions: Sequence[str] | None = None,
                            strings: Mapping[str, Sequence[str]] | None = None,
                            numbers: Mapping[str, Any] | None = None,
                            tags: Sequence[Sequence[str]] | None = None,
                            tag_descriptions: Mapping[str, str] | None = None) -> dict:
    """The info document of inline segment properties (see
    :func:`write_segment_properties`)."""
    keys = as_key_array(ids)
    n = len(keys)
    props: list[dict] = []
    if labels is not None:
        props.append({"id": "label", "type": "label",
                      "values": [str(s) for s in _column("label", labels, n)]})
    if descriptions is not None:
        props.append({"id": "description", "type": "description",
                      "values": [str(s) for s in _column("description", descriptions, n)]})
    for name, values in (strings or {}).items():
        props.append({"id": name, "type": "string",
                      "values": [str(s) for s in _column(name, values, n)]})
    for name, values in (numbers or {}).items():
        arr = np.asarray(values)
        if arr.shape != (n,):
            raise ValueError(f"property {name!r}: shape {arr.shape}, expected ({n},)")
        dtype = arr.dtype.name if arr.dtype.name in NUMBER_TYPES else (
            "float32" if arr.dtype.kind == "f" else None)
        if dtype is None:
            raise ValueError(f"property {name!r}: dtype {arr.dtype} is not one of "
                             f"{', '.join(NUMBER_TYPES)}")
        props.append({"id": name, "type": "number", "data_type": dtype,
                      "values": arr.astype(dtype).tolist()})
    if tags is not None:
        rows = _column("tags", tags, n)
        vocab = sorted({t for row in rows for t in row})
        bad = [t for t in vocab if not _TAG.fullmatch(t)]
        if bad:
            raise ValueError(f"tag {bad[0]!r}: tags have no spaces and no leading '#'")
        pos = {t: i for i, t in enumerate(vocab)}
        entry = {"id": "tags", "type": "tags", "tags": vocab,
                 "values": [sorted({pos[t] for t in row}) for row in rows]}
        if tag_descriptions:
            entry["tag_descriptions"] = [tag_descriptions.get(t, t) for t in vocab]
        props.append(entry)
    return {"@type": KIND, "inline": {"ids": [str(k) for k in keys.tolist()],
                                      "properties": props}}


def write_segment_properties(url: Location, ids: Any, *,
                             labels: Sequence[str] | None = None,
                             descriptions: Sequence[str] | None = None,
                             strings: Mapping[str, Sequence[str]] | None = None,
                             numbers: Mapping[str, Any] | None = None,
                             tags: Sequence[Sequence[str]] | None = None,
                             tag_descriptions: Mapping[str, str] | None = None,
                             key: str = "segment_properties", overwrite: bool = False,
                             storage_options: StorageOptions | None = None,
                             segmentation: Location | None = None
                             ) -> SegmentProperties:
    """Write inline segment properties.

    Parameters
    ----------
    url
        Where: a directory of its own, or a volume, skeleton or mesh layer (then the
        properties go to ``<url>/<key>`` and the layer's info gets ``"segment_properties":
        key``, every other member kept).
    ids
        The segment ids.
    labels, descriptions
        One string per id.
    strings
        ``{property id: one string per id}``.
    numbers
        ``{property id: array of one number per id}`` (uint8 ... int32 or float32).
    tags
        Per id, a list of tag names (no spaces, no leading ``#``).
    tag_descriptions
        ``{tag: description}``.
    overwrite
        Replace what is where the properties go (a layer, or properties attached before);
        by default that is refused.
    storage_options, segmentation
        How to reach the storage, and a segmentation volume to attach the layer to (see
        :func:`ngshard.open_volume` and :func:`ngshard.write_meshes`).

    Returns
    -------
    SegmentProperties
        The properties written (at ``<url>/<key>`` when attached to a layer), open for
        reading.

    Raises
    ------
    ExistsError
        Where they go holds a layer or store (properties attached before, say), and not
        ``overwrite``.
    """
    doc = segment_properties_json(ids, labels=labels, descriptions=descriptions,
                                  strings=strings, numbers=numbers, tags=tags,
                                  tag_descriptions=tag_descriptions)
    if segmentation is not None:
        check_segmentation(segmentation)
    storage = open_storage(url, storage_options=storage_options)
    parent = read_info(storage)
    inside = kind_of(parent) in (VOLUME, SKELETONS, MESHES, LEGACY_MESHES)
    target = storage.child(key) if inside else storage
    parsed = SegmentProperties(target, doc)  # the checks a reader makes, before writing
    claim(target, overwrite=overwrite)
    write_info(target, doc)
    # the link last: a layer never points at properties not yet there
    if inside and parent is not None:
        write_info(storage, {**parent, "segment_properties": key})
    if segmentation is not None:
        attach(segmentation, segment_properties=target)
    return parsed
