"""The scale a tensorstore spec dict selects in a volume's info, and the constraints it sets
(``dtype``, ``scale_metadata``, ``multiscale_metadata``) checked against that info, as
tensorstore checks them when it opens a layer."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import SpecError
from ..storage import Source
from .info import VolumeInfo


def select_scale(info: VolumeInfo, source: Source, scale: int | str, where: str
                 ) -> int | str:
    """The scale to open: ``scale``, or the one the spec of ``source`` selects.

    Parameters
    ----------
    info
        The volume's info.
    source
        What the URL or tensorstore spec named (its ``scale`` and ``checks``).
    scale
        The scale the caller asked for (0, the default, gives way to the spec's).
    where
        The URL or spec, for messages.

    Returns
    -------
    int or str
        A scale index or key.

    Raises
    ------
    SpecError
        The spec and ``scale`` select different scales, no scale has the spec's resolution,
        or the layer disagrees with a constraint of the spec (the message names it).
    """
    chosen: int | str | None
    if isinstance(source.scale, tuple):  # ("resolution", [x, y, z])
        wanted = source.scale[1]
        found = [i for i, s in enumerate(info.scales) if _same(s.resolution, wanted)]
        if not found:
            raise SpecError(f"{where}: no scale has resolution {wanted} (resolutions: "
                            f"{', '.join(str(list(s.resolution)) for s in info.scales)})")
        chosen = found[0]
    else:
        chosen = source.scale
    if chosen is None:
        chosen = scale
    elif scale not in (0, chosen) and _scale(info, scale, where) is not \
            _scale(info, chosen, where):
        raise SpecError(f"{where}: the spec selects scale {chosen!r}, scale= says {scale!r}")
    _check(info, info.scales.index(_scale(info, chosen, where)), source.checks or {}, where)
    return chosen


def _scale(info: VolumeInfo, which: int | str, where: str):
    try:
        return info.scale(which)
    except SpecError as e:
        raise SpecError(f"{where}: {e}") from None


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.allclose(np.asarray(a, float), np.asarray(b, float)))
    except (TypeError, ValueError):
        return False


def _check(info: VolumeInfo, index: int, checks: dict, where: str) -> None:
    """SpecError naming the first constraint the layer does not meet."""
    s = info.scales[index]
    have_scale: dict[str, Any] = {
        "key": s.key, "size": list(s.size), "voxel_offset": list(s.voxel_offset),
        "resolution": list(s.resolution), "chunk_size": list(s.chunk_size),
        "encoding": s.encoding, "sharding": None if s.sharding is None else s.sharding.to_json(),
        "compressed_segmentation_block_size": None if s.compressed_segmentation_block_size is None
        else list(s.compressed_segmentation_block_size)}
    have_layer: dict[str, Any] = {"type": info.type, "data_type": info.data_type,
                  "num_channels": info.num_channels}
    wanted = [("scale_metadata", k, v, have_scale)
              for k, v in (checks.get("scale_metadata") or {}).items()]
    wanted += [("multiscale_metadata", k, v, have_layer)
               for k, v in (checks.get("multiscale_metadata") or {}).items()]
    if "dtype" in checks:
        wanted.append(("", "dtype", checks["dtype"], {"dtype": info.data_type}))
    for group, name, value, have in wanted:
        label = f"{group}.{name}" if group else name
        if name not in have:
            raise SpecError(f"{where}: {label} is not supported when opening a layer")
        ok = _same(have[name], value) if name == "resolution" else \
            _normal(have[name]) == _normal(value)
        if not ok:
            raise SpecError(f"{where}: the spec's {label} is {value!r}, the layer's "
                            f"{have[name]!r}")


def _normal(value: Any) -> Any:
    """Sharding specs compare with their defaults filled in."""
    from ..sharded.spec import SHARDING_TYPE, ShardingSpec

    if isinstance(value, dict) and value.get("@type") == SHARDING_TYPE:
        try:
            return ShardingSpec.from_json(value).to_json()
        except SpecError:
            return value
    return value
