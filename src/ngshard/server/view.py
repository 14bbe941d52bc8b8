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

import numpy as np

from ..errors import MissingDependencyError, NgShardError
from ..kinds import IMAGE, SEGMENTATION, VOLUME_TYPES
from ..limits import MAX_LAYERS
from ..storage import Storage, StorageOptions, open_storage
from ..volume import open_volume
from .layers import Layer

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


def viewer_state(layers: list[Layer], base_url: str, storage: Storage | None = None
                 ) -> dict:
    """The Neuroglancer state (JSON) showing ``layers`` served at ``base_url``.

    Parameters
    ----------
    layers
        What :func:`~ngshard.server.layers.find_layers` found.
    base_url
        The data server's URL.
    storage
        The served root, read to choose the segments selected at first (the middle plane of
        each segmentation's coarsest scale); None selects none.

    Returns
    -------
    dict
        At most :data:`MAX_LAYERS` layers: image and segmentation by the infos' ``type``
        (skeletons and meshes that a segmentation's info names are attached by Neuroglancer
        itself; others become segmentation layers of their own, annotations annotation
        layers), the coordinate
        space of the first volume's finest scale, its centre as the position, zooms that fit
        it, and the largest segments in the middle plane selected; the 3D view without
        slices, so that their skeletons show whole.
    """
    # served kind -> Neuroglancer's layer type
    kinds = {IMAGE: "image", SEGMENTATION: "segmentation", "skeletons": "segmentation",
             "mesh": "segmentation", "annotations": "annotation"}
    out: list[dict] = []
    names: set[str] = set()
    for layer in layers:
        source = layer.source(base_url)
        if source is None or layer.kind not in kinds or len(out) == MAX_LAYERS:
            continue
        name = _name(layer)
        while name in names:
            name += "'"
        names.add(name)
        entry: dict[str, Any] = {"type": kinds[layer.kind], "source": source, "name": name}
        if layer.kind == SEGMENTATION and layer.format == "precomputed":
            entry["skeletonRendering"] = {"mode2d": "lines_and_points", "mode3d": "lines"}
            if storage is not None:
                sub = storage.child(layer.path) if layer.path else storage
                # a damaged volume still gets its layer; the viewer will say what is wrong
                with contextlib.suppress(NgShardError, OSError, ValueError):
                    entry["segments"] = _central_segments(sub, layer.info)
        out.append(entry)
    # without the slices in the 3D view, the selected segments' skeletons show whole
    state: dict[str, Any] = {"layers": out, "layout": "4panel", "showSlices": False}
    if any(e["type"] == "segmentation" for e in out):
        state["selectedLayer"] = {"layer": next(e["name"] for e in out
                                                if e["type"] == "segmentation")}
    # zarr layers frame themselves in the viewer (from their own metadata)
    volumes = [layer for layer in layers if layer.kind in VOLUME_TYPES
               and layer.format == "precomputed"]
    if volumes:
        state.update(_framing(volumes[0].info["scales"][0]))
    return state


def _framing(scale: dict) -> dict:
    """Coordinate space, position (the voxel at the centre) and zooms (the whole volume in
    view) for a scale's info."""
    res = np.asarray(scale["resolution"], float)
    size = np.asarray(scale["size"], float)
    offset = np.asarray(scale.get("voxel_offset", [0, 0, 0]), float)
    extent = size * res / res.min()  # in canonical voxels (the finest resolution)
    return {"dimensions": {d: [float(r) / 1e9, "m"] for d, r in zip("xyz", res)},
            "position": (offset + size // 2 + 0.5).tolist(),  # a voxel's centre
            "crossSectionScale": float(max(extent[:2].max() / 320, 0.05)),
            "projectionScale": float(1.3 * extent.max()),
            "projectionOrientation": _OBLIQUE}


class Viewing:
    """A running viewer: ``url`` (the page to open), ``server`` (the data server),
    ``state`` (what the viewer was given); :meth:`close` stops both servers."""

    def __init__(self, server: Any, viewer: Any, url: str, state: dict) -> None:
        self.server, self.viewer, self.url, self.state = server, viewer, url, state

    def close(self) -> None:
        import neuroglancer

        neuroglancer.stop()
        self.server.close()

    def __enter__(self) -> Viewing:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_viewer(path_or_url: str | os.PathLike | Storage, host: str = "127.0.0.1",
                port: int = 0, viewer_port: int = 0, *,
                storage_options: StorageOptions | None = None) -> Viewing:
    """Serve a tree and a Neuroglancer client whose state already holds its layers.

    Parameters
    ----------
    path_or_url
        A local folder or any fsspec URL.
    host
        The address both servers bind (127.0.0.1 unless told otherwise).
    port, viewer_port
        The data server's and the viewer's ports (0: free ones).
    storage_options
        How to reach the storage (credentials, ``anon``, ``endpoint_url``, ...) and the
        ``retries`` and ``retry_seconds`` of its requests (see :mod:`ngshard.storage.options`).

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
    server = serve(storage, host, port)
    try:
        state = viewer_state(server.layers, server.url, storage)
        neuroglancer.set_server_bind_address(host, viewer_port)
        viewer = neuroglancer.Viewer()
        viewer.set_state(neuroglancer.ViewerState(state))
        return Viewing(server, viewer, viewer.get_viewer_url(), state)
    except BaseException:
        server.close()
        raise


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
