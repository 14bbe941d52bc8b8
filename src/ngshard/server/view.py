"""A Neuroglancer viewer over a served tree (``ngshard view``): a viewer state holding the
tree's layers, with a sensible position, zoom and selection, shown by the client that the
``neuroglancer`` package ships and serves itself (the ``view`` extra), reading the data from
this package's server.

The state is built here as plain JSON (:func:`viewer_state`), so it is testable without a
browser and the ``neuroglancer`` package is needed only to show it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import webbrowser
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ..errors import MissingDependencyError, NgShardError
from ..kinds import IMAGE, SEGMENTATION
from ..limits import MAX_LAYERS
from ..storage import Location, Storage, StorageOptions, open_storage
from ..volume import open_volume
from .files import open_files
from .layers import Layer, find_layers
from .placement import Placement, place, unplaced_notice

#: What to install for the viewer, in the words of the one-line hint.
INSTALL_HINT = "pip install 'ngshard[view]'"
#: Segments selected in a segmentation layer at first.
SELECTED = 6
# The part of the coarsest scale read to choose them: a plane of at most this many voxels a side.
_PLANE = 512
# The 3D view from above and aside (a unit quaternion x, y, z, w): depth shows.
_OBLIQUE = [0.27, -0.21, -0.07, 0.94]


def require_neuroglancer() -> Any:
    """The ``neuroglancer`` module.

    Raises
    ------
    MissingDependencyError
        It is not installed (the message says how to get it, in one line).
    """
    try:
        import neuroglancer
    except ImportError:
        raise MissingDependencyError(
            f"the viewer needs the neuroglancer package: {INSTALL_HINT}") from None
    return neuroglancer


def _name(layer: Layer) -> str:
    return layer.path.rsplit("/", 1)[-1] if layer.path else "data"


def _central_segments(storage: Storage, info: dict) -> list[str]:
    """The segments covering most of a plane through the middle of the coarsest scale
    (central :data:`_PLANE` voxels a side at most), largest first, as decimal strings."""
    scale = len(info["scales"]) - 1
    vol = open_volume(storage, scale).translate_to[0]
    sx, sy, sz = vol.shape[:3]
    x0, y0 = max(0, sx // 2 - _PLANE // 2), max(0, sy // 2 - _PLANE // 2)
    plane = vol[x0:min(sx, x0 + _PLANE), y0:min(sy, y0 + _PLANE), sz // 2, 0]
    ids, counts = np.unique(plane[plane != 0], return_counts=True)
    return [str(i) for i in ids[np.argsort(-counts, kind="stable")][:SELECTED].tolist()]


#: Neuroglancer's layer type per served kind, in the order layers are listed: images, then
#: segmentations (skeletons and meshes alone are segmentation layers), then annotations.
_TYPES = {IMAGE: "image", SEGMENTATION: "segmentation", "skeletons": "segmentation",
          "mesh": "segmentation", "annotations": "annotation"}
_ORDER = {IMAGE: 0, SEGMENTATION: 1, "skeletons": 2, "mesh": 2, "annotations": 3}
#: What a segmentation layer takes as a further source (when its info does not name it).
_ATTACHABLE = ("skeletons", "mesh", "segment_properties")


def viewer_state(layers: list[Layer], base_url: str, storage: Storage | None = None, *,
                 resolution: tuple[float, ...] | None = None,
                 notices: list[str] | None = None) -> dict:
    """The Neuroglancer state (JSON) showing ``layers`` served at ``base_url``, as a user
    would set it up by hand.

    Parameters
    ----------
    layers
        What :func:`~ngshard.server.layers.find_layers` found.
    base_url
        The data server's URL.
    storage
        The served root, read to place zarr layers and to choose the segments selected at
        first (the middle plane of each segmentation's coarsest scale); None does neither.
    resolution
        x, y, z nm per voxel of layers whose metadata has no units (plain zarr arrays);
        default 1 nm.
    notices
        A list that gets one line naming the layers shown at an assumed voxel size.

    Returns
    -------
    dict
        At most :data:`MAX_LAYERS` layers, images first, then segmentations, then
        annotations. Skeletons, meshes and segment properties that a segmentation's info
        names are attached by Neuroglancer itself; others found beside a segmentation (in
        its folder or its parent's, or anywhere when there is one segmentation) become
        further sources of it (one of each kind it lacks), the rest segmentation layers of
        their own. Annotations with
        relationships link to the first segmentation. Every layer is placed in one space
        of display dimensions x, y, z in metres (zarr axes named and scaled by a source
        transform); the position is the centre of all the data, the zooms fit it all, the
        largest segments in the middle plane are selected, and the 3D view has no slices,
        so that skeletons and meshes show whole.
    """
    found = sorted((layer for layer in layers if layer.source(base_url) is not None),
                   key=lambda layer: _ORDER.get(layer.kind, 9))
    segmentations = [layer for layer in found if layer.kind == SEGMENTATION]
    extra: dict[str, list[str]] = {}  # a segmentation's path -> further sources
    taken = {(seg.path, kind) for seg in segmentations for kind in seg.attached}
    out: list[dict] = []
    paths: list[str] = []
    names: set[str] = set()
    places: list[Placement] = []
    unplaced: list[str] = []
    for layer in found:
        source = layer.source(base_url)
        if source is None:
            continue
        host = _host(layer, segmentations) if layer.kind in _ATTACHABLE else None
        if host is not None and (host.path, layer.kind) not in taken:
            taken.add((host.path, layer.kind))  # one of each kind per segmentation
            extra.setdefault(host.path, []).append(source)
            continue
        if layer.kind not in _TYPES or len(out) == MAX_LAYERS:
            continue
        name = _name(layer)
        while name in names:
            name += "'"
        names.add(name)
        entry: dict[str, Any] = {"type": _TYPES[layer.kind], "source": source, "name": name}
        where = place(layer, storage, resolution)
        if where is not None:
            places.append(where)
            if where.transform is not None:
                entry["source"] = {"url": source, "transform": where.transform}
            if not where.known:
                unplaced.append(name)
        if _climbs(layer) and notices is not None and not urlsplit(base_url).path.strip("/"):
            # Neuroglancer refuses a ".." that climbs to the top of a URL's path
            notices.append(f"{name}: its info names layers beside it (../), which "
                           f"Neuroglancer resolves only below the served folder: serve its "
                           f"parent folder instead")
        if layer.kind == SEGMENTATION and layer.format == "precomputed":
            entry["skeletonRendering"] = {"mode2d": "lines_and_points", "mode3d": "lines"}
            if storage is not None:
                sub = storage.child(layer.path) if layer.path else storage
                # a damaged volume still gets its layer; the viewer will say what is wrong
                with contextlib.suppress(NgShardError, OSError, ValueError):
                    entry["segments"] = _central_segments(sub, layer.info)
        if layer.kind == "annotations":
            _link(entry, layer.info, out)
        out.append(entry)
        paths.append(layer.path)
    for entry, path in zip(out, paths):
        if extra.get(path) and entry["type"] == "segmentation":
            entry["source"] = [entry["source"], *extra[path]]
    # without the slices in the 3D view, the selected segments' skeletons show whole
    state: dict[str, Any] = {"layers": out, "layout": "4panel", "showSlices": False}
    if any(e["type"] == "segmentation" for e in out):
        state["selectedLayer"] = {"layer": next(e["name"] for e in out
                                                if e["type"] == "segmentation")}
    if places:
        state.update(_framing(places))
    if unplaced and notices is not None:
        notices.append(unplaced_notice(unplaced, resolution))
    return state


def _host(layer: Layer, segmentations: list[Layer]) -> Layer | None:
    """The segmentation a skeleton, mesh or segment properties layer belongs with: the one
    whose folder holds it or is beside it, else the only one."""
    parent = layer.path.rsplit("/", 1)[0] if "/" in layer.path else ""
    for seg in segmentations:
        seg_parent = seg.path.rsplit("/", 1)[0] if "/" in seg.path else ""
        if seg.path == parent or (seg_parent == parent and seg.path != ""):
            return seg
    return segmentations[0] if len(segmentations) == 1 else None


def _link(entry: dict, info: dict, before: list[dict]) -> None:
    """An annotation layer whose info has relationships links them to the first
    segmentation layer (listed before it) and shows those of its selected segments (which
    Neuroglancer then lists in the layer's panel)."""
    seg = next((e["name"] for e in before if e["type"] == "segmentation"), None)
    ids = [r["id"] for r in info.get("relationships") or [] if isinstance(r, dict)
           and isinstance(r.get("id"), str)]
    if seg is not None and ids:
        entry["linkedSegmentationLayer"] = dict.fromkeys(ids, seg)
        entry["filterBySegmentation"] = ids  # those of the selected segments, listed


def _framing(places: list[Placement]) -> dict:
    """Display dimensions x, y, z (in the first layer's voxels), the position (the voxel at
    the centre of all the layers' bounds) and zooms (all of it in view)."""
    res = np.asarray(places[0].resolution, float)
    lower = np.min([p.lower for p in places], axis=0)
    upper = np.max([p.upper for p in places], axis=0)
    extent = (upper - lower) / res.min()  # in canonical voxels (the finest resolution)
    centre = np.floor((lower + upper) / 2 / res) + 0.5  # a voxel's centre
    return {"dimensions": {d: [float(r) / 1e9, "m"] for d, r in zip("xyz", res)},
            "position": centre.tolist(),
            "crossSectionScale": float(max(extent[:2].max() / 320, 0.05)),
            "projectionScale": float(1.3 * extent.max()),
            "projectionOrientation": _OBLIQUE}


class Viewing:
    """A running viewer: ``url`` (the page to open), ``server`` (the data server),
    ``state`` (what the viewer was given), ``notices`` (lines worth telling the user, such
    as layers shown at an assumed voxel size); :meth:`close` stops both servers."""

    def __init__(self, server: Any, viewer: Any, url: str, state: dict,
                 notices: list[str] | None = None) -> None:
        self.server, self.viewer, self.url, self.state = server, viewer, url, state
        self.notices = notices or []

    def close(self) -> None:
        import neuroglancer

        neuroglancer.stop()
        self.server.close()

    def __enter__(self) -> Viewing:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_viewer(path_or_url: Location, host: str = "127.0.0.1",
                port: int = 0, viewer_port: int = 0, *,
                resolution: tuple[float, ...] | None = None,
                storage_options: StorageOptions | None = None) -> Viewing:
    """Serve a tree and a Neuroglancer client whose state already holds its layers.

    A segmentation at the top of the tree whose info names a folder beside it (``mesh":
    "../meshes"``) needs the tree served under a folder of URL paths (``/data/``), where
    Neuroglancer resolves that ``..``; a segmentation that *is* the tree and names folders
    beside it is served with them from the folder above (those folders alone).

    Parameters
    ----------
    path_or_url
        A local folder or any fsspec URL.
    host
        The address both servers bind (127.0.0.1 unless told otherwise).
    port, viewer_port
        The data server's and the viewer's ports (0: free ones).
    resolution
        x, y, z nm per voxel of layers whose metadata has no units (see
        :func:`viewer_state`).
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).

    Returns
    -------
    Viewing

    Raises
    ------
    MissingDependencyError
        The ``neuroglancer`` package is missing (before anything is started).
    NotFoundError, OSError
        As for :func:`ngshard.server.serve`.
    """
    from . import serve

    neuroglancer = require_neuroglancer()
    storage = open_storage(path_or_url, storage_options=storage_options)
    # a layer at the top naming a sibling (../meshes): served under /data/, which
    # Neuroglancer's ".." resolves in (it refuses to climb to the top of a URL's path)
    layers = find_layers(open_files(storage))
    climbs = any(_climbs(layer) for layer in layers)
    only = None
    beside = _beside(layers)
    parent = storage.parent() if beside else None
    if parent is not None:  # a segmentation naming folders beside it: they and it alone
        only = {storage.url.rstrip("/").rsplit("/", 1)[-1], *beside}
        storage, climbs = parent, True
    server = serve(storage, host, port, base="data" if climbs else "", only=only)
    try:
        notices: list[str] = []
        if only is not None:
            notices.append(f"its info names {', '.join(sorted(beside))} beside it: served "
                           f"with it from the folder above, nothing else of that folder")
        state = viewer_state(server.layers, server.url, storage, resolution=resolution,
                             notices=notices)
        neuroglancer.set_server_bind_address(host, viewer_port)
        viewer = neuroglancer.Viewer()
        viewer.set_state(neuroglancer.ViewerState(state))
        return Viewing(server, viewer, viewer.get_viewer_url(), state, notices)
    except BaseException:
        server.close()
        raise


def _climbs(layer: Layer) -> bool:
    """Whether ``layer`` is a segmentation at the top of the tree whose info names a layer
    beside it (``../meshes``)."""
    return layer.kind == SEGMENTATION and "/" not in layer.path and \
        any(str(layer.info.get(k, "")).startswith("..") for k in _ATTACHABLE)


def _beside(layers: list[Layer]) -> set[str]:
    """The folders beside the root that a segmentation at the root names (``../meshes``:
    meshes)."""
    root = next((layer for layer in layers if layer.path == ""), None)
    if root is None or root.kind != SEGMENTATION:
        return set()
    return {value[3:].split("/", 1)[0] for k in _ATTACHABLE
            if isinstance(value := root.info.get(k), str) and value.startswith("../")
            and not value.startswith("../..") and len(value) > 3}


def browser_available() -> bool:
    """Whether a graphical browser can be opened here (a console browser would take over
    the terminal the server prints to)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def open_browser(url: str) -> bool:
    """Open ``url`` in a graphical browser if there is one; whether it was opened."""
    if not browser_available():
        return False
    try:
        return webbrowser.open(url)
    except webbrowser.Error:
        return False
