"""The files a server may hand out, from a local folder, any fsspec store or an object store
(through its Storage): regular files
under the root, never a hidden one, never one reached through a symbolic link that leaves the
root. Each opened file carries the size, modification time and entity tag of the very bytes
that will be read (locally: one descriptor, opened without following a last link and without
blocking, so a FIFO or device put in the tree cannot stall the server).

Local descriptors are kept open for the next request of the same name (viewers read a few
shard files over and over): a kept file is served again only while one ``stat`` of its path
still names the same inode, size and modification time, so a file replaced or changed is
looked up afresh (and checked again), and nothing is served that was not checked once.
The same holds for the targets answered in compiled code (``quick.py``): each is recorded
with a kept file, and forgotten before that file is closed."""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from ..limits import OPEN_FILES
from ..storage import FsspecStorage, ObjectInfo, Storage
from .paths import hidden

#: What :meth:`open` returns for a directory.
DIRECTORY = "directory"

_TARGETS_PER_FILE = 4
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class File:
    """An opened regular file: ``size``, ``mtime`` (seconds, None if unknown), ``etag`` (a
    strong entity tag, quoted) and reads of byte ranges. ``fileno`` is the local descriptor
    (for ``sendfile``), None for remote files."""

    size: int
    mtime: float | None
    etag: str
    fileno: int | None = None
    last_modified: str | None = None  # the HTTP date of ``mtime``, made once (respond.py)
    fields: bytes = b""  # its response fields, formatted once (respond.py)

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (short only if the file shrank under us)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the file (idempotent)."""


class LocalFile(File):
    """A local descriptor shared by the responses using it: each :meth:`close` releases one
    use, the last one closes it."""

    def __init__(self, fd: int, st: os.stat_result, lock: threading.Lock) -> None:
        self.fileno, self.size, self.mtime = fd, st.st_size, st.st_mtime
        self.etag = f'"{st.st_ino:x}-{st.st_size:x}-{st.st_mtime_ns:x}"'
        self.key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        self._lock, self._users = lock, 1
        self.name = ""  # the name it is kept open under (LocalFiles._keep)
        self.targets: list[bytes] = []  # request targets answered quickly (LocalFiles.remember)

    def read(self, start: int, end: int) -> bytes:
        fd = self.fileno
        if fd is None:
            raise ValueError("read of a closed file")
        if end <= start:
            return b""
        first = os.pread(fd, end - start, start)
        if len(first) == end - start or not first:  # all of it (as almost always), or none
            return first
        parts, offset = [first], start + len(first)
        while offset < end:
            piece = os.pread(fd, end - offset, offset)
            if not piece:
                break
            parts.append(piece)
            offset += len(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def use(self) -> bool:
        """Take one more use of the descriptor; False once it is closed."""
        with self._lock:
            if self._users == 0:
                return False
            self._users += 1
            return True

    def close(self) -> None:
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users:
                return
            fd, self.fileno = self.fileno, None
        if fd is not None:
            os.close(fd)


class LocalFiles:
    """Regular files under a local folder (see the module docstring)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.url = self.root
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[str, LocalFile]] = OrderedDict()  # name -> (path, file)
        #: Request target -> the entry ``quick.answer`` serves it from (see :meth:`remember`).
        self.quick: dict[bytes, tuple] = {}

    def _real(self, name: str) -> str | None:
        """The real path of ``name`` if it stays under the root and passes through no
        hidden name on the way, else None.

        The root is a real path already, so only the components of ``name`` are looked at,
        one ``lstat`` each; only where one is a symbolic link is the whole path resolved
        (and then checked to be under the root)."""
        parts = name.split("/") if name else []
        if any(not p or hidden(p) for p in parts):
            return None  # parse_target refuses these; callers inside the package too
        path = self.root
        for part in parts:
            path = f"{path}{os.sep}{part}"
            try:
                st = os.lstat(path)
            except OSError:
                return path  # absent: opening it fails, as it should
            if stat.S_ISLNK(st.st_mode):
                return self._resolved(name)
        return path

    def _resolved(self, name: str) -> str | None:
        real = os.path.realpath(os.path.join(self.root, name))
        if real == self.root:
            return real
        if os.path.commonpath([self.root, real]) != self.root:
            return None  # a symbolic link out of the root
        rel = real[len(self.root):].lstrip(os.sep)
        return None if any(hidden(p) for p in rel.split(os.sep)) else real

    def open(self, name: str) -> File | str | None:
        """The file ``name`` (relative, "/"-separated, already checked by ``parse_target``),
        :data:`DIRECTORY` for a directory, None for anything absent or not to be served.
        The caller closes the file."""
        kept = self._kept.get(name)
        if kept is not None:
            try:
                st = os.stat(kept[0])
            except OSError:
                st = None
            if st is not None and kept[1].key == (st.st_dev, st.st_ino, st.st_size,
                                                  st.st_mtime_ns) and kept[1].use():
                return kept[1]
            self._forget(name)
        real = self._real(name)
        if real is None:
            return None
        try:
            fd = os.open(real, _OPEN_FLAGS)
        except OSError:  # absent, unreadable, a link swapped in since realpath, ...
            return None
        try:
            st = os.fstat(fd)
        except OSError:
            os.close(fd)
            return None
        if stat.S_ISREG(st.st_mode):
            file = LocalFile(fd, st, self._lock)
            self._keep(name, real, file)
            return file
        os.close(fd)
        return DIRECTORY if stat.S_ISDIR(st.st_mode) else None

    def _keep(self, name: str, path: str, file: LocalFile) -> None:
        """Keep ``file`` open for later requests (one more use), dropping the least recently
        opened past :data:`OPEN_FILES`."""
        file.use()
        file.name = name
        with self._lock:
            dropped = [self._kept.pop(name, None)]
            self._kept[name] = (path, file)
            while len(self._kept) > OPEN_FILES:
                dropped.append(self._kept.popitem(last=False)[1])
            self._unremember(old[1] for old in dropped if old is not None)
        for old in dropped:
            if old is not None:
                old[1].close()

    def _forget(self, name: str) -> None:
        with self._lock:
            old = self._kept.pop(name, None)
            if old is not None:
                self._unremember([old[1]])
        if old is not None:
            old[1].close()

    def remember(self, target: str, file: File | None) -> None:
        """Let ``quick.answer`` serve the request target ``target`` from ``file`` from now
        on (as long as it is kept open): ``file`` is the local file, not a twin, that the
        Python path found for it and answered a GET of. A file takes a few targets at most
        (a name may be written in several ways, with any query: no client can grow the
        table past a few entries a kept file)."""
        if not isinstance(file, LocalFile) or not file.fields or \
                len(file.targets) >= _TARGETS_PER_FILE:
            return
        key = target.encode("latin-1")
        with self._lock:
            kept = self._kept.get(file.name)
            if kept is None or kept[1] is not file or file.fileno is None or key in self.quick:
                return
            dev, ino, size, mtime_ns = file.key
            self.quick[key] = (file.fileno, os.fsencode(kept[0]), dev, ino, size, mtime_ns,
                               file.fields, file)
            file.targets.append(key)

    def _unremember(self, files: Iterable[LocalFile]) -> None:
        """Forget the targets of files about to be closed (the lock held): no descriptor is
        closed while ``quick.answer`` may still find it."""
        for file in files:
            for key in file.targets:
                if self.quick.get(key, (None,))[-1] is file:
                    del self.quick[key]
            file.targets.clear()

    def close(self) -> None:
        """Close the files kept open."""
        with self._lock:
            kept, self._kept = list(self._kept.values()), OrderedDict()
            self._unremember(file for _, file in kept)
        for _, file in kept:
            file.close()

    def listdir(self, name: str) -> list[tuple[str, bool]] | None:
        """``(name, is_directory)`` of what may be served directly in the directory
        ``name``, sorted; None if it is not a directory that may be served."""
        real = self._real(name)
        if real is None:
            return None
        try:
            with os.scandir(real) as entries:
                found = [(e.name, e.is_dir()) for e in entries if not hidden(e.name)]
        except OSError:
            return None
        prefix = f"{name}/" if name else ""
        return sorted((n, d) for n, d in found
                      if self._real(prefix + n) is not None)


class RemoteFile(File):
    def __init__(self, fs: Any, path: str, info: dict) -> None:
        self.fs, self.path, self.size = fs, path, int(info["size"])
        self.mtime = _mtime(info)
        tag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or \
            hashlib.sha1(repr((self.size, self.mtime, info.get("generation"))).encode()
                         ).hexdigest()[:20]
        self.etag = '"' + str(tag).strip('"').replace('"', "") + '"'

    def read(self, start: int, end: int) -> bytes:
        return bytes(self.fs.cat_file(self.path, start=start, end=end)) if end > start else b""


class RemoteFiles:
    """Objects of an fsspec store (memory, http, s3, gs, ...), read with ranged requests.
    Names are checked by ``parse_target`` (no dot segments, no hidden names); object stores
    have no links to leave the root by."""

    def __init__(self, storage: FsspecStorage) -> None:
        self.fs, self.root, self.url = storage.fs, storage.root, storage.url

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}" if name else self.root

    def open(self, name: str) -> File | str | None:
        """As :meth:`LocalFiles.open`. A name with ``?`` or ``#`` is none of ours: an HTTP
        store would read it as a query or fragment of another URL."""
        if "?" in name or "#" in name:
            return None
        try:
            info = self.fs.info(self._path(name))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if info.get("type") == "directory":
            return DIRECTORY
        return None if info.get("size") is None else RemoteFile(self.fs, self._path(name), info)

    def listdir(self, name: str) -> list[tuple[str, bool]] | None:
        """As :meth:`LocalFiles.listdir`."""
        if "?" in name or "#" in name:
            return None
        try:
            entries = self.fs.ls(self._path(name), detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return None
        found = {(e["name"].rstrip("/").rsplit("/", 1)[-1], e.get("type") == "directory")
                 for e in entries}
        return sorted((n, d) for n, d in found if n and not hidden(n))

    def close(self) -> None:
        """Nothing is kept open (as :meth:`LocalFiles.close`)."""


class StoredFile(File):
    """An object of a store served through the Storage interface (``s3://``, ``az://``):
    its size and entity tag from a request of this moment, its bytes read with the store's
    retries."""

    def __init__(self, storage: Storage, name: str, info: ObjectInfo) -> None:
        self.storage, self.name, self.size, self.mtime = storage, name, info.size, None
        self.etag = '"' + hashlib.sha1(repr(info.generation).encode()).hexdigest()[:20] + '"'

    def read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        _, data = self.storage.read_range(self.name, start, end)
        return b"" if data is None else bytes(data)


class StoredFiles:
    """The objects of a store served through the Storage interface (the object stores, which
    have no fsspec filesystem here): names are checked by ``parse_target``; object stores
    have no links to leave the root by."""

    def __init__(self, storage: Storage) -> None:
        self.storage, self.url = storage, storage.url

    def open(self, name: str) -> File | str | None:
        """As :meth:`LocalFiles.open`."""
        info = self.storage.stat(name) if name else None
        if info is not None:
            return StoredFile(self.storage, name, info)
        folder = self.storage.child(name) if name else self.storage
        return DIRECTORY if folder.list(dirs=True) else None

    def listdir(self, name: str) -> list[tuple[str, bool]] | None:
        """As :meth:`LocalFiles.listdir`."""
        folder = self.storage.child(name) if name else self.storage
        every, files = folder.list(dirs=True), set(folder.list())
        if not every:
            return None
        return [(n, n not in files) for n in every if not hidden(n)]

    def close(self) -> None:
        """Nothing is kept open (as :meth:`LocalFiles.close`)."""


#: The servable files of a store, whichever kind.
Files = LocalFiles | RemoteFiles | StoredFiles


def open_files(storage: Storage) -> Files:
    """The servable files of a store opened with ``open_storage``: local files where the
    store has a local root, its fsspec filesystem where it has one, else the store's own
    reads."""
    if storage.local_root is not None:
        return LocalFiles(storage.local_root)
    if isinstance(storage, FsspecStorage):
        return RemoteFiles(storage)
    return StoredFiles(storage)


def _mtime(info: dict) -> float | None:
    """Modification time (seconds since the epoch) from what fsspec filesystems report."""
    for key in ("mtime", "LastModified", "last_modified", "Last-Modified", "updated",
                "created"):
        value = info.get(key)
        try:
            if isinstance(value, datetime):
                return value.timestamp()
            if isinstance(value, (int, float)):
                return float(value)
            if isinstance(value, str):
                try:
                    return parsedate_to_datetime(value).timestamp()
                except (TypeError, ValueError):
                    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except (TypeError, ValueError, OverflowError):
            continue
    return None
