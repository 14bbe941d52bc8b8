"""What a destination already holds, and the one way every writer treats it: a new layer or
store never replaces one by surprise (:class:`~ngshard.errors.ExistsError` names what is
there), and replacing one when told to removes all of it first, so no orphan is left.

What a layer owns comes from its info (:mod:`ngshard.kinds`): its scales' shards and chunk
files, its skeleton, mesh or annotation files, the layers it links to, ``ngshard convert``'s
records, then the info itself, last, so that an interrupted removal leaves an info that still
names what is left. A zarr array or group (metadata and chunk keys) and a store with no info
(its shard files) are recognised too. Other files in the directory are never touched.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from .errors import ExistsError, ReadOnlyError, SpecError
from .jsondoc import parse_json
from .kinds import (
    CONVERT_JOB,
    CONVERT_RECORDS,
    EVERYTHING,
    FRAGMENTS,
    INFO,
    LEGACY_MESH_FILES,
    SCALE_FILES,
    ZARR_ARRAY,
    ZARR_CHUNK_DIRS,
    ZARR_CHUNK_FILES,
    ZARR_GROUP,
    ZARR_METADATA,
    ZARR_V3,
    describe,
    layer_kind,
    links,
    parse_info,
    parts,
)
from .storage import Storage
from .storage.tempnames import is_temp_file

HINT = "pass overwrite=True (--force) to replace it"


def _info(storage: Storage) -> tuple[bytes | None, dict | None, str | None]:
    """The raw info, the document and its layer kind (None for what does not parse or is of
    no kind ngshard knows)."""
    raw = storage.read(INFO)
    if raw is None:
        return None, None, None
    try:
        doc = parse_info(raw, storage.path(INFO))
        return raw, doc, layer_kind(doc, storage)
    except SpecError:
        return raw, None, None


def _zarr_node(storage: Storage) -> str | None:
    """"array" or "group" if ``storage`` holds zarr (v3 or v2) metadata, else None."""
    raw = storage.read(ZARR_V3)
    if raw is not None:
        with contextlib.suppress(SpecError, AttributeError):
            return "group" if parse_json(raw, ZARR_V3).get("node_type") == "group" else "array"
        return "array"
    if storage.stat(ZARR_ARRAY) is not None:
        return "array"
    return "group" if storage.stat(ZARR_GROUP) is not None else None


def _job_source(storage: Storage) -> str | None:
    """The source of an unfinished ``ngshard convert`` into ``storage``, if one is recorded."""
    raw = storage.child(CONVERT_RECORDS).read(CONVERT_JOB)
    if raw is None:
        return None
    with contextlib.suppress(SpecError, AttributeError):
        return str(parse_json(raw, CONVERT_JOB).get("from"))
    return "?"


def occupant(storage: Storage, into: Sequence[Storage] = ()) -> tuple[Storage, str] | None:
    """What a new layer or store at ``storage`` would replace: where, and what it is (for a
    message: "a precomputed segmentation with scales 8_8_8, 16_16_16"); None if nothing.

    Parameters
    ----------
    storage
        The destination.
    into
        Folders the new layer writes into (its scales): chunk, shard or zarr files in them
        that no info describes would be mixed with the new ones.
    """
    return None if is_empty(storage, into) else _found(storage, into)


def is_empty(storage: Storage, into: Sequence[Storage] = ()) -> bool:
    """Whether ``storage`` (with the folders ``into``, inside it) is seen to hold nothing at
    all: one listing, not a request per name looked for (False where it cannot list)."""
    inside = all(f.url.startswith(storage.url.rstrip("/") + "/") for f in into)
    return storage.supports_listing and inside and not storage.list(dirs=True)


def _found(storage: Storage, into: Sequence[Storage]) -> tuple[Storage, str] | None:
    """:func:`occupant` looked for name by name."""
    raw, doc, kind = _info(storage)
    if raw is not None:
        return storage, describe(kind, doc) if kind else \
            "an info file of no layer ngshard knows"
    node = _zarr_node(storage)
    if node is not None:
        version = 3 if storage.stat(ZARR_V3) is not None else 2
        return storage, f"a zarr v{version} {node}"
    source = _job_source(storage)
    if source is not None:
        return storage, f"an unfinished conversion (from {source})"
    names = storage.list()
    if any(n.endswith(":0") for n in names):
        return storage, "a legacy mesh layer (manifests <id>:0, no info)"
    for folder in (storage, *into):
        data = [n for n in (names if folder is storage else folder.list())
                if SCALE_FILES.fullmatch(n)]
        if data:
            return folder, f"{len(data)} shard or chunk files that no info describes"
        if folder is not storage and _zarr_node(folder) is not None:
            return folder, "a zarr array or group"
    return None


def claim(storage: Storage, *, overwrite: bool, into: Sequence[Storage] = (),
          empty: bool = False) -> None:
    """Make ``storage`` ready for a new layer or store: refuse if it holds one (see
    :func:`occupant`), or with ``overwrite`` remove that first (:func:`clear`).
    ``empty``: the caller just saw it hold nothing (:func:`is_empty`), so it is not looked
    at again.

    Raises
    ------
    ReadOnlyError
        ``storage`` cannot be written (before anything is looked at).
    ExistsError
        Something is there and not ``overwrite``; the message names it.
    """
    if not storage.supports_writes:
        raise ReadOnlyError(f"{storage.url}: read-only storage: nothing can be written there")
    found = None if empty else occupant(storage, into)
    if found is None:
        return
    if not overwrite:
        where, what = found
        raise ExistsError(f"{where.url} holds {what}: {HINT}")
    clear(storage)
    for folder in into:
        _remove(folder, SCALE_FILES)
        if _zarr_node(folder) is not None:
            _clear_zarr(folder)


def clear(storage: Storage) -> None:
    """Remove the layer, store or zarr node at ``storage``: everything its info describes
    (and the layers it links to), or its zarr metadata and chunks, or the shard and chunk
    files of a store with no info; ``ngshard convert``'s records; the info last. Files it
    does not own stay."""
    _, doc, kind = _info(storage)
    if kind is not None:
        for part in parts(kind, doc):
            _remove(storage.child(part.folder) if part.folder else storage, part.names)
        for folder in links(doc):
            clear(storage.child(folder))
            _prune(storage.child(folder))
    elif _zarr_node(storage) is not None:
        _clear_zarr(storage)
    else:
        names = storage.list()
        legacy = any(n.endswith(":0") for n in names)
        _remove(storage, LEGACY_MESH_FILES if legacy else SCALE_FILES, names)
    _remove(storage.child(CONVERT_RECORDS), EVERYTHING)
    _remove(storage.child(FRAGMENTS), EVERYTHING)
    storage.delete(INFO)


def _remove(folder: Storage, names, listed: Sequence[str] | None = None) -> None:
    """Delete the files in ``folder`` whose names ``names`` matches (and writers'
    temporaries), then the folder itself if that left it empty (object stores have none)."""
    doomed = [n for n in (folder.list() if listed is None else listed)
              if names.fullmatch(n) or is_temp_file(n)]
    folder.delete_many(doomed)
    _prune(folder)


def _prune(folder: Storage) -> None:
    if folder.local_root is not None:
        with contextlib.suppress(OSError):  # not empty (others' files), or gone
            os.rmdir(folder.local_root)


def _clear_zarr(storage: Storage) -> None:
    """A zarr group's member nodes, or an array's chunks; then the metadata."""
    files = storage.list()
    folders = sorted(set(storage.list(dirs=True)) - set(files))
    if _zarr_node(storage) == "group":
        for name in folders:
            if _zarr_node(storage.child(name)) is not None:
                _clear_zarr(storage.child(name))
    else:
        for name in folders:
            if ZARR_CHUNK_DIRS.fullmatch(name):
                _remove_tree(storage.child(name))
        _remove(storage, ZARR_CHUNK_FILES, files)
    for name in ZARR_METADATA:
        storage.delete(name)
    _prune(storage)


def _remove_tree(storage: Storage) -> None:
    """Everything under ``storage`` (a zarr array's folder of chunk keys)."""
    files = storage.list()
    for name in sorted(set(storage.list(dirs=True)) - set(files)):
        _remove_tree(storage.child(name))
    _remove(storage, EVERYTHING, files)
