"""The ``info`` file of a Neuroglancer precomputed image or segmentation layer, validated.

Unknown members (mesh, skeletons, segment_properties, ...) are kept and written back as they
were, so rewriting an info never drops what another tool put there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, get_args

import numpy as np

from ..errors import SpecError
from ..kinds import VOLUME_TYPE
from ..kinds import VOLUME_TYPES as LAYER_TYPES
from ..sharded.infofile import parse_info
from ..sharded.spec import ShardingSpec
from ..storage.names import check_name
from ..types import Encoding
from .encodings import ENCODINGS as SUPPORTED
from .encodings import check_encoding
from .vectors import vec3

DATA_TYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "float32")
ENCODINGS: tuple[str, ...] = get_args(Encoding)
_SCALE_FIELDS = ("key", "size", "voxel_offset", "resolution", "chunk_sizes", "encoding",
                 "sharding", "compressed_segmentation_block_size")


def chunk_nbytes(chunk_size: Sequence[int], num_channels: int, data_type: Any) -> int:
    """Bytes of one whole chunk's voxels, unencoded."""
    return math.prod(chunk_size) * num_channels * np.dtype(data_type).itemsize


def _vector(doc: dict, name: str, where: str, *, kind: type = int, positive: bool = True,
            default: Any = None) -> tuple:
    """Member ``name`` of ``doc`` as a 3-vector (a JSON list)."""
    value = doc.get(name, default)
    if value is None:
        raise SpecError(f"{where}: missing {name}")
    if not isinstance(value, list):
        raise SpecError(f"{where}: {name} must be a list of 3 numbers, got {value!r}")
    return vec3(value, f"{where}: {name}", kind=kind, positive=positive)


def _one_of(doc: dict, name: str, choices: Sequence[str], where: str) -> Any:
    """The member ``name`` of ``doc``, which must be one of ``choices``."""
    value = doc.get(name)
    if value not in choices:
        raise SpecError(f"{where}: {name} must be one of {', '.join(choices)}, got {value!r}")
    return value


@dataclass(frozen=True)
class Scale:
    """One resolution level of a volume."""

    key: str
    size: tuple[int, int, int]
    chunk_size: tuple[int, int, int]
    resolution: tuple[float, float, float] = (1.0, 1.0, 1.0)
    voxel_offset: tuple[int, int, int] = (0, 0, 0)
    encoding: str = "raw"
    sharding: ShardingSpec | None = None
    compressed_segmentation_block_size: tuple[int, int, int] | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, doc: Any, where: str, data_type: str, num_channels: int = 1) -> Scale:
        if not isinstance(doc, dict):
            raise SpecError(f"{where}: must be a JSON object")
        key = check_name(doc.get("key"), where, "scale key")
        chunk_sizes = doc.get("chunk_sizes")
        if not isinstance(chunk_sizes, list) or not chunk_sizes:
            raise SpecError(f"{where}: chunk_sizes must be a non-empty list of [x, y, z]")
        sharding = doc.get("sharding")
        if sharding is not None:
            if len(chunk_sizes) != 1:
                raise SpecError(f"{where}: a sharded scale must have exactly one chunk size")
            sharding = ShardingSpec.from_json(sharding)
        encoding = _one_of(doc, "encoding", ENCODINGS, where)
        if encoding in SUPPORTED:  # the others are valid, but ngshard cannot decode them
            try:
                check_encoding(encoding, data_type, num_channels)
            except SpecError as e:
                raise SpecError(f"{where}: {e}") from None
        block = None
        if encoding == "compressed_segmentation":
            block = _vector(doc, "compressed_segmentation_block_size", where)
        return cls(
            key=key,
            size=_vector(doc, "size", where),
            chunk_size=_vector({"chunk_sizes": chunk_sizes[0]}, "chunk_sizes", where),
            resolution=_vector(doc, "resolution", where, kind=float),
            voxel_offset=_vector(doc, "voxel_offset", where, positive=False,
                                 default=[0, 0, 0]),
            encoding=encoding,
            sharding=sharding,
            compressed_segmentation_block_size=block,
            extra={k: v for k, v in doc.items() if k not in _SCALE_FIELDS},
        )

    def to_json(self) -> dict:
        doc = {"key": self.key, "size": list(self.size), "voxel_offset": list(self.voxel_offset),
               "resolution": list(self.resolution), "chunk_sizes": [list(self.chunk_size)],
               "encoding": self.encoding, **self.extra}
        if self.sharding is not None:
            doc["sharding"] = self.sharding.to_json()
        if self.compressed_segmentation_block_size is not None:
            doc["compressed_segmentation_block_size"] = list(
                self.compressed_segmentation_block_size)
        return doc


@dataclass(frozen=True)
class VolumeInfo:
    """The whole ``info`` of a layer: type, data type, channels and scales (finest first)."""

    type: str
    data_type: str
    num_channels: int
    scales: tuple[Scale, ...]
    extra: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_json(cls, doc: Any, where: str = "info") -> VolumeInfo:
        """Parse and validate; SpecError names the member that is wrong."""
        if isinstance(doc, (str, bytes)):
            doc = parse_info(doc, where)
        if not isinstance(doc, dict):
            raise SpecError(f"{where}: must be a JSON object")
        layer_type = _one_of(doc, "type", LAYER_TYPES, where)
        data_type = _one_of(doc, "data_type", DATA_TYPES, where)
        channels = doc.get("num_channels")
        if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
            raise SpecError(f"{where}: num_channels must be a positive integer, got {channels!r}")
        scales = doc.get("scales")
        if not isinstance(scales, list) or not scales:
            raise SpecError(f"{where}: scales must be a non-empty list")
        parsed = tuple(Scale.from_json(s, f"{where}: scales[{i}]", data_type, channels)
                       for i, s in enumerate(scales))
        for i, s in enumerate(parsed):  # a chunk is one array: its bytes must fit int64
            if chunk_nbytes(s.chunk_size, channels, data_type) >= 1 << 63:
                raise SpecError(f"{where}: scales[{i}]: a chunk of {list(s.chunk_size)} "
                                f"voxels x {channels} channels of {data_type} passes 2**63 "
                                f"bytes")
        keys = [s.key for s in parsed]
        if len(set(keys)) != len(keys):
            raise SpecError(f"{where}: scale keys must be unique, got {keys}")
        return cls(layer_type, data_type, channels, parsed, extra={
            k: v for k, v in doc.items()
            if k not in ("type", "data_type", "num_channels", "scales", "@type")})

    def to_json(self) -> dict:
        return {"@type": VOLUME_TYPE, "type": self.type,
                "data_type": self.data_type, "num_channels": self.num_channels,
                "scales": [s.to_json() for s in self.scales], **self.extra}

    def scale(self, which: int | str) -> Scale:
        """A scale by index or key."""
        if isinstance(which, str):
            for s in self.scales:
                if s.key == which:
                    return s
            raise SpecError(f"no scale with key {which!r}; keys: "
                            f"{', '.join(s.key for s in self.scales)}")
        try:
            return self.scales[which]
        except (IndexError, TypeError):
            raise SpecError(f"scale must be an index below {len(self.scales)} or a key, "
                            f"got {which!r}") from None

    def with_scale(self, scale: Scale) -> VolumeInfo:
        """A copy with ``scale`` replacing the scale of the same key, or added last."""
        scales = [scale if s.key == scale.key else s for s in self.scales]
        if scale.key not in (s.key for s in self.scales):
            scales.append(scale)
        return replace(self, scales=tuple(scales))
