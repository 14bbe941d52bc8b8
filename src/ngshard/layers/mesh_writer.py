"""Writing mesh layers: multi-resolution Draco meshes from per-LOD triangle meshes, and
legacy single-resolution meshes.

Per segment the octree is chosen from its LODs: ``grid_origin`` is the corner of the box of
every LOD's vertices and ``chunk_shape`` (the LOD 0 node) is that box divided by
``2**(num_lods - 1)``, so the coarsest LOD is one node (igneous' choice); ``chunk_shape=``
fixes it instead. Each LOD is cut into nodes (:mod:`.mesh_octree`), its vertices quantized to
``vertex_quantization_bits`` and each node encoded with Draco. ``lod_scales`` default to the
mean edge length of each LOD (the detail it resolves), kept increasing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..destination import claim
from ..errors import SpecError
from ..limits import DEFAULT_BUFFER_BYTES, MESH_BATCH
from ..sharded.infofile import write_info
from ..sharded.shard_writer import ShardWriter
from ..sharded.spec import ShardingSpec, check_key
from ..storage import Location, Storage, StorageOptions, open_storage
from ..storage.twins import write_twins
from ..threads import pmap
from ..types import Compress
from .attach import check_segmentation, publish
from .info import transform_json
from .mesh_codec import Manifest, encode_fragment, encode_legacy
from .mesh_octree import fragments
from .meshes import KIND, LEGACY, LegacyMeshes, Meshes
from .sharding import resolve_sharding
from .store import batched, count_of, pairs, unsharded_twin, write_segments


def _lods(value: Any, key: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The LOD list of an item: (vertices, faces), a Mesh-like object, or a list of them."""
    def one(x: Any) -> tuple[np.ndarray, np.ndarray]:
        v, f = (x.vertices, x.faces) if hasattr(x, "faces") else x
        v, f = np.asarray(v, np.float64), np.asarray(f, np.int64)
        if v.ndim != 2 or v.shape[1] != 3 or (f.size and (f.ndim != 2 or f.shape[1] != 3)):
            raise ValueError(f"mesh {key}: vertices must be (n, 3) and faces (m, 3), got "
                             f"{v.shape} and {f.shape}")
        f = f.reshape(-1, 3)
        if f.size and (f.min() < 0 or f.max() >= len(v)):
            raise ValueError(f"mesh {key}: faces name vertex {int(f.max())} (or a negative "
                             f"one) of {len(v)}")
        return v, f

    if isinstance(value, list) and value and not np.isscalar(value[0]) and (
            hasattr(value[0], "faces") or len(value[0]) == 2 and np.ndim(value[0][0]) == 2):
        return [one(x) for x in value]
    return [one(value)]


def _lod_scales(lods: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    scales = []
    for v, f in lods:
        edges = np.linalg.norm(v[f] - v[np.roll(f, 1, axis=1)], axis=2) if len(f) else \
            np.zeros(0)
        scales.append(float(edges.mean()) if edges.size else 1.0)
    return np.maximum.accumulate(np.maximum(scales, 1e-6))


def encode_mesh(lods: list[tuple[np.ndarray, np.ndarray]], bits: int,
                chunk_shape: Any = None, compression_level: int = 7,
                grid_origin: Any = None) -> tuple[Manifest, list[bytes]]:
    """The manifest and Draco fragments (LOD 0 first, Z-curve order) of one segment; the
    octree's ``grid_origin`` (with ``chunk_shape``) may be given, for pieces of a segment
    that must share one grid (vertices at or past it)."""
    everything = np.concatenate([v for v, _ in lods])
    if not len(everything):
        everything = np.zeros((1, 3))
    origin = everything.min(axis=0) if grid_origin is None else \
        np.asarray(grid_origin, np.float64).reshape(3)
    extent = everything.max(axis=0) - origin
    if chunk_shape is None:
        extent = np.where(extent > 0, extent, max(float(extent.max()), 1.0))
        chunk = extent / (1 << (len(lods) - 1))
    else:
        chunk = np.broadcast_to(np.asarray(chunk_shape, np.float64), (3,)).copy()
        if not (chunk > 0).all():
            raise SpecError(f"chunk_shape must be positive, got {chunk_shape}")
    chunk = chunk.astype(np.float32).astype(np.float64)  # as the manifest stores it
    origin = origin.astype(np.float32).astype(np.float64)
    positions, sizes, blobs = [], [], []
    for lod, (v, f) in enumerate(lods):
        node = chunk * (1 << lod)
        cut = node / 2 if lod else node
        pos, frags = fragments(v, f, origin, node, cut, bits)
        encoded = pmap(lambda pf: encode_fragment(pf[0], pf[1], bits, compression_level),
                       frags, min_items=4)
        positions.append(pos)
        sizes.append(np.fromiter(map(len, encoded), np.uint32, count=len(encoded)))
        blobs += encoded
    manifest = Manifest(chunk, origin, _lod_scales(lods), np.zeros((len(lods), 3)),
                        positions, sizes)
    return manifest, blobs


def write_meshes(url: Location,
                 items: Mapping[int, Any] | Iterable[tuple[int, Any]], *,
                 sharding: None | str | dict = "auto", vertex_quantization_bits: int = 16,
                 transform: Any = None, chunk_shape: Any = None,
                 lod_scale_multiplier: float = 1.0, compression_level: int = 7,
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES, durable: bool = True,
                 overwrite: bool = False, compress: Compress | None = None,
                 storage_options: StorageOptions | None = None,
                 segmentation: Location | None = None) -> Meshes:
    """Write a multi-resolution (``neuroglancer_multilod_draco``) mesh layer at ``url``.

    Parameters
    ----------
    url
        The layer's directory (a local path, any fsspec URL, or an open Storage).
    items
        ``{id: (vertices, faces)}`` or ``{id: [(vertices, faces), ...]}`` (one per level of
        detail, finest first; objects with ``.vertices`` and ``.faces`` too), or an iterable
        of such pairs. Vertices in stored model coordinates.
    sharding
        "auto" (murmurhash shards sized by the count, data raw), a spec (data_encoding raw),
        or None for ``<id>.index`` manifests and ``<id>`` fragment files.
    vertex_quantization_bits
        10 or 16: the grid each fragment's vertices are rounded to (2**bits - 1 steps across
        a node).
    transform
        Stored model to model (nm) coordinates: 12 numbers; identity by default.
    chunk_shape
        The LOD 0 node size (stored model units) for every segment; by default per segment,
        so that the coarsest LOD is one node.
    compression_level
        Draco's, 0 to 10.
    buffer_bytes, durable
        Encoded segments held before they are spilled by shard; ``durable=False`` skips
        fsyncs.
    overwrite
        Replace a layer or store already at ``url`` (all it owns is removed first); by
        default such a destination is refused.
    compress
        With ``sharding=None``: the ``<id>.index`` manifests written as their compressed
        twins (None: plain, "gzip", "br" or "zstd"). The fragment files stay plain: readers
        (cloud-volume, Neuroglancer) fetch byte ranges of them.
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).
    segmentation
        A segmentation volume to attach the layer to once it is written (its info, written
        last, names it: see :func:`ngshard.attach`); None attaches it to none.

    Returns
    -------
    Meshes
        The layer, open for reading.

    Raises
    ------
    ExistsError
        ``url`` holds a layer or store, and not ``overwrite``.
    SpecError
        ``segmentation`` is not one (checked before anything is written).
    """
    twin = unsharded_twin(compress, sharding)
    if segmentation is not None:
        check_segmentation(segmentation)
    if vertex_quantization_bits not in (10, 16):
        raise SpecError(f"vertex_quantization_bits must be 10 or 16, got "
                        f"{vertex_quantization_bits}")
    storage = open_storage(url, durable=durable, storage_options=storage_options)
    spec = resolve_sharding(sharding, count_of(items), None, data_encoding="raw")
    if spec is not None and spec.data_encoding != "raw":
        raise SpecError("mesh shards need data_encoding raw (fragments are read by range)")
    claim(storage, overwrite=overwrite)

    def encoded() -> Iterable[list[tuple[int, bytes, bytes]]]:
        for batch in batched(pairs(items), MESH_BATCH):
            out = []
            for key, value in batch:
                k = check_key(key)
                manifest, blobs = encode_mesh(_lods(value, k), vertex_quantization_bits,
                                              chunk_shape, compression_level)
                out.append((k, b"".join(blobs), manifest.to_bytes()))
            yield out

    store_meshes(storage, spec, encoded(), buffer_bytes, twin)
    info = {"@type": KIND, "vertex_quantization_bits": vertex_quantization_bits,
            "transform": transform_json(transform),
            "lod_scale_multiplier": float(lod_scale_multiplier)}
    if spec is not None:
        info["sharding"] = spec.to_json()
    publish(storage, info, segmentation, "meshes")
    return Meshes(storage, info)


def store_meshes(storage: Storage, spec: ShardingSpec | None,
                 batches: Iterable[list[tuple[int, bytes, bytes]]],
                 buffer_bytes: int = DEFAULT_BUFFER_BYTES, twin: str = "") -> None:
    """Store encoded multi-resolution meshes, batches of (id, fragment data, manifest): in
    shards (the data unindexed before each manifest, memory bounded by ``buffer_bytes``),
    or as ``<id>`` fragment files and ``<id>.index`` manifests (as their ``twin``)."""
    writer = ShardWriter(storage, spec, buffer_bytes) if spec is not None else None
    for batch in batches:
        if writer is not None:
            writer.add_many(np.array([k for k, _, _ in batch], np.uint64),
                            [m for _, _, m in batch], [d for _, d, _ in batch])
        else:
            storage.write_many([(str(k), data) for k, data, _ in batch])
            write_twins(storage, [(f"{k}.index", manifest) for k, _, manifest in batch], twin)
    if writer is not None:
        writer.close()


def write_legacy_meshes(url: Location,
                        items: Mapping[int, Any] | Iterable[tuple[int, Any]], *,
                        sharding: None | str | dict = None, durable: bool = True,
                        overwrite: bool = False, compress: Compress | None = None,
                        storage_options: StorageOptions | None = None) -> LegacyMeshes:
    """Write a legacy single-resolution (``neuroglancer_legacy_mesh``) layer: per segment a
    ``<id>:0`` manifest naming one fragment file ``<id>:0:0`` (unsharded, the default), or
    the fragment itself as the value (sharded, as cloud-volume writes them).

    ``items``, ``overwrite`` as for :func:`write_meshes`, one LOD each (vertices in nm).
    ``compress`` (unsharded only): the fragment files written as their compressed twins, as
    igneous writes them (its default is gzip); the manifests stay plain, as igneous leaves
    them. Returns the layer written, open for reading (:class:`LegacyMeshes`)."""
    twin = unsharded_twin(compress, sharding)
    storage = open_storage(url, durable=durable, storage_options=storage_options)

    def encoded() -> Iterable[tuple[int, bytes]]:
        for key, value in pairs(items):
            k = check_key(key)
            v, f = _lods(value, k)[0]
            yield k, encode_legacy(v, f)

    spec = resolve_sharding(sharding, count_of(items), None)
    claim(storage, overwrite=overwrite)
    store_legacy(storage, spec, encoded(), twin)
    info: dict[str, Any] = {"@type": LEGACY}
    if spec is not None:
        info["sharding"] = spec.to_json()
    write_info(storage, info)
    return LegacyMeshes(storage, info)


def store_legacy(storage: Storage, spec: ShardingSpec | None,
                 items: Iterable[tuple[int, bytes]], twin: str = "") -> None:
    """Store encoded legacy fragments, (id, fragment) pairs: as the values of shards, or as
    a ``<id>:0`` manifest naming one ``<id>:0:0`` fragment file (as its ``twin``)."""
    if spec is not None:
        write_segments(storage, spec, items)
        return
    for batch in batched(items, 1024):
        storage.write_many([(f"{k}:0", f'{{"fragments": ["{k}:0:0"]}}'.encode())
                            for k, _ in batch])
        write_twins(storage, [(f"{k}:0:0", blob) for k, blob in batch], twin)
