"""The exception hierarchy: everything ngshard raises on bad input derives from NgShardError."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


class NgShardError(Exception):
    """Base class of all ngshard errors."""


class SpecError(NgShardError, ValueError):
    """A sharding spec, info file or argument is invalid; the message names the field."""


class SpecMissingError(SpecError):
    """No sharding spec is given, and none is recorded with the store (``where``: its info
    file, missing or without one); the message asks for ``spec=`` (the command line asks for
    ``--spec`` instead)."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}: give the sharding spec (spec=)")
        self.where, self.reason = where, reason

    def __reduce__(self) -> tuple:  # crosses process boundaries (pools, Dask) intact
        return type(self), (self.where, self.reason)


class CorruptDataError(NgShardError):
    """Stored bytes do not decode; the message names the file and the offset."""


class InvalidKeyError(NgShardError, ValueError):
    """A key is not an integer in [0, 2**64)."""


class ReadOnlyError(NgShardError, PermissionError):
    """A write was attempted on a store opened for reading."""


class ConflictError(NgShardError):
    """A shard changed on storage between reading it for a commit and writing it back:
    another writer was at work (the rule is one writer per shard at a time); or, as
    :class:`ExistsError`, a destination already holds data."""


class ChangedError(ConflictError):
    """An object kept changing under a read: another writer committed to it again and again
    while it was read, each time the read started over (backing off), until the tries or the
    time budget ran out; the message names the object and the number of tries. A conflict
    with another writer, as on writes: read again later."""


class ExistsError(ConflictError, FileExistsError):
    """A writer would replace a layer, store, zarr node or scale that is already there; the
    message names the place, what it holds, and how to replace it (``overwrite=True``,
    ``--force``)."""


class NotFoundError(NgShardError, FileNotFoundError):
    """No store, layer or file where one was expected; the message names the place."""


class UnlistableError(NgShardError):
    """The storage cannot list what it holds (a web server without directory listings), so
    a listing, a count or a check of everything cannot be given; the message names the URL
    and says what can be done instead."""


class StorageWriteError(NgShardError, OSError):
    """Storage refused a write (disk full, file too large, quota); the message names the
    object, and nothing of it was committed."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


class StorageAccessError(NgShardError, PermissionError):
    """A worker of a job cannot reach its storage (no credentials, an unknown endpoint, a
    path only the client sees): raised before the job writes anything."""


class RequestError(NgShardError, OSError):
    """A storage request failed: the server answered an error status, or the connection
    failed, and (for a transient failure: HTTP 408, 429, 5xx, a reset or refused connection,
    a timeout, a truncated body) every retry the policy allowed failed too. ``url`` names the
    object, ``status`` the last HTTP status (None for a connection failure), ``tries`` how
    many requests were sent."""

    def __init__(self, message: str, url: str = "", status: int | None = None,
                 tries: int = 1) -> None:
        super().__init__(message)
        self.url, self.status, self.tries = url, status, tries

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple:  # crosses process boundaries (pools, Dask) intact
        return type(self), (str(self), self.url, self.status, self.tries)


class MissingDependencyError(NgShardError, ImportError):
    """An optional package is needed for this URL or encoding; the message says what to
    install."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped a long job at once: the message says what was done, what is
    left and how to resume. A KeyboardInterrupt still, so code that catches those does."""


def require_module(name: str, needed_by: str, extra: str) -> None:
    """Raise the error of :func:`optional_module` if module ``name`` is not installed,
    without importing it (a client that only sends tasks to workers does not load it)."""
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingDependencyError(f"{needed_by} {name}: pip install 'ngshard[{extra}]'")


def optional_module(name: str, needed_by: str, extra: str) -> Any:
    """The optional module ``name``, or a MissingDependencyError that says ``needed_by``
    (e.g. "meshing needs") it and which extra installs it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise MissingDependencyError(f"{needed_by} {name}: pip install 'ngshard[{extra}]' "
                                     f"({e})") from None
