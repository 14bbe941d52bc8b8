"""Precomputed volumes: the info model, chunk grids, chunk encodings and numpy slicing."""

from .info import Scale, VolumeInfo
from .volume import Volume, auto_sharding, create_volume, open_volume

__all__ = ["Scale", "Volume", "VolumeInfo", "auto_sharding", "create_volume", "open_volume"]
