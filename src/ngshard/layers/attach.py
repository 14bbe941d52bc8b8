"""Attaching meshes, skeletons and segment properties to a segmentation: the paths, relative
to the segmentation, in its info's ``mesh``, ``skeletons`` and ``segment_properties`` members,
where Neuroglancer (and :func:`ngshard.open`'s readers) look for them. Neuroglancer resolves
them against the segmentation's URL, ``..`` included, so a layer beside the segmentation
is attached as ``../meshes`` (Neuroglancer refuses a ``..`` that climbs to the top of a
URL's path: ``ngshard view`` serves such a pair under ``/data/``).
"""

from __future__ import annotations

import os
import posixpath
import re

from ..errors import NotFoundError, SpecError
from ..kinds import (
    LEGACY_MESHES,
    MESHES,
    PROPERTIES,
    SKELETONS,
    VOLUME,
    is_segmentation,
    kind_of,
)
from ..sharded.infofile import INFO, read_info, write_info
from ..storage import Location, Storage, open_storage

#: The info member per keyword, and the layer kinds it may name.
_MEMBERS = {"meshes": ("mesh", (MESHES, LEGACY_MESHES)),
            "skeletons": ("skeletons", (SKELETONS,)),
            "segment_properties": ("segment_properties", (PROPERTIES,))}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/]*)(.*)")


def attach(segmentation: Location, *,
           meshes: Location | None = None,
           skeletons: Location | None = None,
           segment_properties: Location | None = None) -> dict:
    """Record meshes, skeletons and segment properties in a segmentation's info, so that
    Neuroglancer shows them with its segments.

    Parameters
    ----------
    segmentation
        A precomputed segmentation volume (its folder: path, fsspec URL or
        ``precomputed://`` source).
    meshes, skeletons, segment_properties
        The layers to attach (None leaves that member as it is): a multi-resolution or
        legacy mesh layer, a skeleton layer, a segment properties folder, on the same
        storage as the segmentation (inside its folder, beside it or anywhere else there).

    Returns
    -------
    dict
        The segmentation's new info.

    Raises
    ------
    NotFoundError
        No info at the segmentation or at a layer to attach.
    SpecError
        The segmentation is not one (an image, another layer kind), a layer is not of the
        kind its keyword says, or lies on another storage (another bucket or host).
    """
    storage, info = check_segmentation(segmentation)
    given = {"meshes": meshes, "skeletons": skeletons, "segment_properties": segment_properties}
    changed = {}
    for keyword, target in given.items():
        if target is None:
            continue
        member, kinds = _MEMBERS[keyword]
        other = open_storage(target, expect="precomputed")
        kind = kind_of(_info(other))
        if kind not in kinds:
            raise SpecError(f"{other.path(INFO)}: a {kind or 'folder of unknown kind'}, not "
                            f"{' or '.join(kinds)}: it cannot be attached as {keyword}")
        changed[member] = relative_path(storage.url, other.url)
    new = {**info, **changed}
    if new != info:
        write_info(storage, new)
    return new


def publish(storage: Storage, info: dict, segmentation: Location | None, keyword: str
            ) -> None:
    """A new layer's last step: write its info (the last thing a writer writes), then attach
    it as ``keyword`` (see :func:`attach`) to ``segmentation`` where one is given."""
    write_info(storage, info)
    if segmentation is not None:
        attach(segmentation, **{keyword: storage})


def check_segmentation(url: Location) -> tuple[Storage, dict]:
    """The storage and info of the segmentation at ``url``.

    Raises
    ------
    NotFoundError
        No info there.
    SpecError
        Not a segmentation volume.
    """
    storage = open_storage(url, expect="precomputed")
    info = _info(storage)
    if kind_of(info) != VOLUME or not is_segmentation(info):
        raise SpecError(f"{storage.path(INFO)}: not a segmentation (type "
                        f"{info.get('type')!r}): meshes, skeletons and segment properties "
                        f"attach to a segmentation")
    return storage, info


def _info(storage: Storage) -> dict:
    info = read_info(storage)
    if info is None:
        raise NotFoundError(f"{storage.path(INFO)}: no info file: not a precomputed layer")
    return info


def relative_path(base: str, target: str) -> str:
    """``target``'s URL relative to the folder ``base`` (``..`` where needed).

    Raises
    ------
    SpecError
        They are on different storages (schemes or hosts), or ``target`` is ``base``.
    """
    a, b = _split(base), _split(target)
    if a[0] != b[0]:
        raise SpecError(f"{target} and {base} are on different storages: a segmentation's "
                        f"info can only name a layer on its own storage by a relative path")
    rel = posixpath.relpath(b[1] or "/", a[1] or "/")
    if rel == ".":
        raise SpecError(f"{target} is the segmentation itself")
    return rel


def _split(url: str) -> tuple[str, str]:
    """(scheme and host, normalised path) of a storage URL or local path."""
    match = _SCHEME.fullmatch(url.rstrip("/"))
    if match is None:
        return "", posixpath.normpath(os.path.abspath(url).replace(os.sep, "/"))
    head, path = match.groups()
    if head.startswith("file://"):
        return "", posixpath.normpath(path)
    return head, posixpath.normpath(path or "/")

