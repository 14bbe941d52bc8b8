"""Precomputed volumes: the info model, chunk grids, chunk encodings and numpy slicing.

``info`` (the info model), ``vectors``, ``grid`` (chunk grid, Morton codes), ``encodings`` and
``cseg`` (chunk codecs), ``chunks`` (chunk stores: sharded or a file per chunk), ``handle``
(a scale at the metadata level: the info on storage, grid, chunk store, codec), ``coords``
(voxel coordinates: bounds, index translation), ``volume`` (numpy indexing over a handle),
``layers`` (open and create), ``sharding`` (auto sharding), ``downsample`` and ``scales``
(coarser scales).
"""

from .coords import Bounds
from .handle import ScaleHandle
from .info import Scale, VolumeInfo
from .layers import create_volume, open_volume
from .sharding import auto_sharding
from .volume import Volume

__all__ = ["Bounds", "Scale", "ScaleHandle", "Volume", "VolumeInfo", "auto_sharding",
           "create_volume", "open_volume"]
