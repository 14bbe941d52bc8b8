"""Serving precomputed data over HTTP to Neuroglancer (``ngshard serve`` / ``ngshard view``).

Depends only on ``storage`` (where the bytes are) and the layer readers (what the infos say).
``ngshard.serve(path)`` is :func:`serve`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection
from urllib.parse import quote

from ..cpus import available_cpus
from ..errors import SpecError
from ..limits import SERVE_PROCESSES
from ..storage import Location, Storage, StorageOptions, open_storage
from .connections import Connections, Log
from .files import open_files
from .layers import Layer, find_layers
from .paths import hidden
from .workers import Worker, start_workers, stop_workers


class Server:
    """A running HTTP server for a precomputed dataset tree (see :func:`serve`). ``url`` is
    its base URL; :meth:`close` stops it; it is a context manager."""

    def __init__(self, storage: Storage, host: str, port: int, *, listing: bool = False,
                 log: Log | None = None, base: str = "",
                 only: Collection[str] | None = None, processes: int | None = 1) -> None:
        storage.require_folder("a folder of layers to serve")
        if base and ("/" in base or base in (".", "..") or hidden(base)):
            raise SpecError(f"base must be one folder name that is not hidden, not {base!r}")
        if processes is None:
            processes = min(available_cpus(), SERVE_PROCESSES) \
                if storage.local_root is not None else 1
        if processes < 1 or processes > 1 and storage.local_root is None:
            raise SpecError(f"processes must be 1 or more, and 1 for a store that is not a "
                            f"local folder, not {processes}")
        self.files = open_files(storage)
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        sock = socket.create_server((host, port), family=family, backlog=1024)  # bursts of viewers
        port = sock.getsockname()[1]
        shown = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        self.url = f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"
        if base:
            self.url += f"/{quote(base)}"
        self.host, self.port = host, port
        self._layers: list[Layer] | None = None
        self.only = None if only is None else frozenset(only)
        self._workers: list[Worker] = []
        if processes > 1:
            try:
                self._workers = start_workers(processes - 1, dict(
                    storage=storage, listing=listing, log=log, base=base, only=self.only))
            except BaseException:
                sock.close()
                raise
        self._connections = Connections(self.files, sock, listing=listing, log=log,
                                        base=base, only=self.only,
                                        workers=[w.channel for w in self._workers])

    @property
    def pids(self) -> list[int]:
        """The process ids of the processes serving: this one first, then its workers."""
        return [os.getpid(), *(w.pid for w in self._workers)]

    @property
    def layers(self) -> list[Layer]:
        """The layers found under the root (searched once, on first use)."""
        if self._layers is None:
            self._layers = [layer for layer in find_layers(self.files) if self.only is None
                            or layer.path.split("/", 1)[0] in self.only]
        return self._layers

    def sources(self) -> dict[str, str]:
        """``{path: "precomputed://http://..."}`` for each layer Neuroglancer can open."""
        return {layer.path: src for layer in self.layers
                if (src := layer.source(self.url)) is not None}

    def close(self) -> None:
        """Stop serving: the port is released and open connections are ended, in every
        process."""
        self._connections.close()
        stop_workers(self._workers)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ngshard.server.Server {self.files.url} at {self.url}>"


def serve(path_or_url: Location, host: str = "127.0.0.1", port: int = 0,
          *, listing: bool = False, log: Log | None = None,
          storage_options: StorageOptions | None = None, base: str = "",
          only: Collection[str] | None = None, processes: int | None = 1) -> Server:
    """Serve a precomputed dataset tree over HTTP, from a background thread.

    Parameters
    ----------
    path_or_url
        A local folder or any fsspec URL (a bucket is served through this server), also
        inside a Neuroglancer source (``precomputed://gs://...``).
    host
        The address to bind: 127.0.0.1 (this machine only) unless told otherwise.
    port
        The port; 0 picks a free one (see ``Server.url``).
    listing
        Answer GET of a folder with a list of what it holds (off: 404).
    log
        Called with ``(request, response)`` after each response (request None when the
        request could not be parsed).
    storage_options
        How to reach the storage (see :func:`ngshard.open_volume`).
    base
        Serve the tree under this folder of URL paths (one name): its root is
        ``http://host:port/<base>/``, so that a layer at the top of the tree can name a
        sibling as ``../name`` (Neuroglancer resolves ``..`` only below the first folder of
        a URL's path). Default: at ``/``.
    only
        Serve only these names at the top of the tree (None: everything).
    processes
        Serve a local folder from this many processes (each one event loop on one core,
        as nginx runs a worker per core): this one and ``processes - 1`` workers, which
        it hands connections to in turn and which stop with it (when it closes, exits or
        is killed).
        None: one per core, at most :data:`~ngshard.limits.SERVE_PROCESSES`. A store that
        is not a local folder is served from one.
        With more than one, ``log`` must be a function defined at the top of a module
        (each worker calls it in its own process).

    Returns
    -------
    Server
        Running; ``.url``, ``.sources()``, ``.close()``, a context manager.

    Raises
    ------
    NotFoundError
        A local folder that does not exist.
    NgShardError
        A worker process did not start.
    OSError
        The address cannot be bound (port taken, unknown host).
    MissingDependencyError, SpecError
        The URL needs a package that is missing, or its scheme is unknown.
    """
    return Server(open_storage(path_or_url, storage_options=storage_options), host, port,
                  listing=listing, log=log, base=base, only=only, processes=processes)

__all__ = ["Layer", "Server", "find_layers", "serve"]
