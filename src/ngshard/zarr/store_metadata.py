"""The Zarr v3 metadata a :class:`~ngshard.zarr.store.PrecomputedStore` presents: pure
functions from a volume's info to ``zarr.json`` documents, no I/O and no zarr-python.

One scale is an array of shape (x, y, z, c), as ``Volume`` indexes it but from 0 (as
``vol.translate_to[0]``; an OME group's ``translation`` says where voxel 0 lies), with the
precomputed chunk size (all channels in one chunk) as its regular chunk grid and fill value 0.
Its codecs are ``transpose`` (order [3, 2, 1, 0]) then ``bytes`` little endian: zarr lays a
chunk out as the reversed axes (c, z, y, x) in C order, which is x fastest, the Fortran order
of a precomputed raw chunk. So a whole raw chunk is handed to zarr as its stored bytes, without
a copy or a transpose in the store; zarr's transpose on decoding is a free numpy view. (Plain
C-order bytes would cost a transposing copy per chunk in the store instead.)

Several scales are an OME-Zarr 0.5 multiscale group with one array per scale, named
``s0``, ``s1``, ... in the info's order (finest first): short names that are always valid
zarr node names, where scale keys may contain ``/`` or clash with each other's prefixes. Each
array's attributes record its precomputed scale (``attributes.precomputed``).
"""

from __future__ import annotations

import json
from typing import Any

from ..volume.info import Scale, VolumeInfo

#: The axes of every presented array, in array order.
DIMENSION_NAMES = ("x", "y", "z", "c")
#: Chunk keys: zarr's default encoding, ``c/<x>/<y>/<z>/<c>``.
SEPARATOR = "/"


def level_name(index: int) -> str:
    """The array name of the scale at ``index`` in a multiscale group."""
    return f"s{index}"


def scale_attributes(info: VolumeInfo, scale: Scale) -> dict[str, Any]:
    """Where an array comes from: the layer type and the precomputed scale's own fields."""
    return {"precomputed": {"type": info.type, "key": scale.key,
                            "resolution": list(scale.resolution),
                            "voxel_offset": list(scale.voxel_offset),
                            "encoding": scale.encoding}}


def array_metadata(info: VolumeInfo, scale: Scale) -> dict[str, Any]:
    """The ``zarr.json`` of one scale, an (x, y, z, c) array (see the module's docstring)."""
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [*scale.size, info.num_channels],
        "data_type": info.data_type,  # precomputed's names are zarr v3's names
        "chunk_grid": {"name": "regular",
                       "configuration": {"chunk_shape": [*scale.chunk_size,
                                                         info.num_channels]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": SEPARATOR}},
        "fill_value": 0,
        "codecs": [{"name": "transpose", "configuration": {"order": [3, 2, 1, 0]}},
                   {"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": list(DIMENSION_NAMES),
        "attributes": scale_attributes(info, scale),
    }


def multiscales(info: VolumeInfo, name: str = "") -> dict[str, Any]:
    """The OME-Zarr 0.5 ``multiscales`` entry of a layer: axes x, y, z (space, nanometer) and
    c (channel); per scale a ``scale`` transform (the resolution) and a ``translation``
    (voxel_offset * resolution, so every scale lands where Neuroglancer shows it).

    The axes follow the arrays' (x, y, z, c) order, which OME-Zarr's rule of channel before
    space and space as z, y, x does not: readers that insist on that order will refuse it."""
    axes = [{"name": n, "type": "space", "unit": "nanometer"} for n in DIMENSION_NAMES[:3]]
    axes.append({"name": "c", "type": "channel"})
    datasets = []
    for i, s in enumerate(info.scales):
        datasets.append({"path": level_name(i), "coordinateTransformations": [
            {"type": "scale", "scale": [*map(float, s.resolution), 1.0]},
            {"type": "translation", "translation": [
                *(float(o * r) for o, r in zip(s.voxel_offset, s.resolution)), 0.0]}]})
    entry: dict[str, Any] = {"axes": axes, "datasets": datasets}
    if name:
        entry["name"] = name
    return entry


def group_metadata(info: VolumeInfo, name: str = "") -> dict[str, Any]:
    """The root ``zarr.json`` of a layer shown whole: an OME-Zarr 0.5 multiscale group."""
    return {"zarr_format": 3, "node_type": "group",
            "attributes": {"ome": {"version": "0.5", "multiscales": [multiscales(info, name)]},
                           "precomputed": {"type": info.type}}}


def to_bytes(doc: dict[str, Any]) -> bytes:
    """A metadata document as stored: indented UTF-8 JSON, as zarr-python writes it."""
    return json.dumps(doc, indent=2).encode()
