"""Typed segment layers over the sharded (or a file per id) store: skeletons, multi-resolution
meshes, annotations and segment properties, and :func:`open_layer`, which opens any
precomputed layer by its info.

Modules: ``store`` (id -> bytes, both layouts, batched), ``sharding`` ("auto" specs), ``info``
(shared info members), ``dispatch`` (open by info), and per layer kind a pure codec module
beside its reader/writer.
"""

from .annotation_writer import write_annotations
from .annotations import Annotation, Annotations, AnnotationSet, open_annotations
from .attach import attach
from .dispatch import open_layer
from .mesh_writer import write_legacy_meshes, write_meshes
from .meshes import LegacyMeshes, Mesh, Meshes, open_meshes
from .properties import (
    SegmentProperties,
    open_segment_properties,
    write_segment_properties,
)
from .skeletons import Skeleton, Skeletons, open_skeletons, write_skeletons

__all__ = ["Annotation", "AnnotationSet", "Annotations", "LegacyMeshes", "Mesh", "Meshes",
           "attach",
           "SegmentProperties", "Skeleton", "Skeletons", "open_annotations", "open_layer",
           "open_meshes", "open_segment_properties", "open_skeletons", "write_annotations",
           "write_legacy_meshes", "write_meshes", "write_segment_properties",
           "write_skeletons"]
