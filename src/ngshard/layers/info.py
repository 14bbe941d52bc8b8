"""Members shared by the info files of segment layers: the ``@type``, the ``transform`` from
stored model to model coordinates, the optional ``sharding`` and ``segment_properties``; and
the members of a segmentation's info naming the layers that go with it."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import NotFoundError, SpecError
from ..kinds import LINKS, VOLUME, kind_of
from ..sharded import ShardingSpec
from ..sharded.infofile import INFO, read_info, write_info
from ..storage import Storage

IDENTITY = (1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0)


def layer_info(storage: Storage, kind: str) -> dict:
    """The info of the layer at ``storage``, checked to have ``"@type": kind``."""
    doc = read_info(storage)
    where = storage.path(INFO)
    if doc is None:
        raise NotFoundError(f"{where}: no info file: not a precomputed layer")
    if doc.get("@type") != kind:
        raise SpecError(f"{where}: @type is {doc.get('@type')!r}, not {kind!r}")
    return doc


def parse_transform(doc: dict, where: str) -> np.ndarray:
    """The ``transform`` member as a ``(3, 4)`` float64 array (rows: x, y, z; the last column
    the translation); identity when absent."""
    value = doc.get("transform", list(IDENTITY))
    if not isinstance(value, list) or len(value) != 12 or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        raise SpecError(f"{where}: transform must be a list of 12 numbers, got {value!r}")
    out = np.array(value, np.float64).reshape(3, 4)
    if not np.isfinite(out).all():
        raise SpecError(f"{where}: transform holds a non-finite number")
    return out


def apply_transform(points: np.ndarray, transform: np.ndarray) -> np.ndarray:
    """``(n, 3)`` points mapped by a ``(3, 4)`` affine transform, as float32."""
    out = points.astype(np.float64) @ transform[:, :3].T + transform[:, 3]
    return out.astype(np.float32)


def parse_sharding(doc: dict, where: str) -> ShardingSpec | None:
    """The optional ``sharding`` member."""
    sharding = doc.get("sharding")
    if sharding is None:
        return None
    try:
        return ShardingSpec.from_json(sharding)
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


def transform_json(transform: Any) -> list[float]:
    """A user's transform (12 numbers, a (3, 4) or (4, 4) matrix, or None) as info JSON."""
    if transform is None:
        return list(IDENTITY)
    t = np.asarray(transform, np.float64)
    if t.shape == (4, 4):
        t = t[:3]
    if t.size != 12:
        raise SpecError(f"transform must have 12 numbers (a 3x4 matrix), got shape {t.shape}")
    return [float(x) for x in t.reshape(-1)]


def link_layer(volume: Storage, member: str, folder: str) -> None:
    """Name the layer in ``folder`` (relative to the volume) as the volume's ``member``
    ("mesh", "skeletons" or "segment_properties") in its info, rewritten atomically (call
    it after the layer is written: a volume's info is the last thing a writer changes).

    Raises
    ------
    NotFoundError, SpecError
        No info at ``volume``, or not a volume's.
    """
    if member not in LINKS:
        raise ValueError(f"member must be one of {LINKS}, not {member!r}")
    doc = read_info(volume)
    where = volume.path(INFO)
    if doc is None:
        raise NotFoundError(f"{where}: no info file: not a precomputed layer")
    if kind_of(doc) != VOLUME:
        raise SpecError(f"{where}: not a volume: {member} cannot be attached to it")
    if doc.get(member) != folder:
        write_info(volume, {**doc, member: folder})
