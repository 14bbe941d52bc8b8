"""Staged array changes (seed 003): an array over stored chunks that holds every changed chunk
in memory, decoded, in slabs, and writes them back on commit; every operation is a plan first.

``geometry`` (shapes, grids, slab layout), ``indexing`` (user index -> selection), ``mapper``
(IndexChunkMapper: a selection per axis onto chunks), ``slabmap`` (where each chunk lies),
``transfer`` (TransferPlan: slice copies between two slabs), ``plans`` (get, set, load,
gather), ``resize`` and ``changes`` (write-back and commit) plans, ``copy`` (executing
transfers), ``source`` (the chunk source interface, and a memory double), ``stored`` (the
chunk source over any chunk store and codec), ``array`` (StagedChangesArray).
"""

from .array import DEFAULT_STAGED_BYTES, StagedChangesArray
from .changes import ChangesPlan
from .geometry import BASE, FULL, Geometry
from .indexing import normalize
from .plans import GetItemPlan, LoadPlan, SetItemPlan
from .resize import ResizePlan
from .source import ChunkSource, MemoryChunks
from .stored import ChunkCodec, StoredChunks

__all__ = ["BASE", "DEFAULT_STAGED_BYTES", "FULL", "ChangesPlan", "ChunkCodec", "ChunkSource",
           "Geometry", "GetItemPlan", "LoadPlan", "MemoryChunks", "ResizePlan", "SetItemPlan",
           "StagedChangesArray", "StoredChunks", "normalize"]
