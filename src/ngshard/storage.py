"""Byte-range reads, atomic whole-object writes and listing over local files or any fsspec URL.

Everything above this module addresses objects by name relative to a root URL. Local paths get
a direct implementation (pread on one file descriptor, temp file + rename), other URLs go
through fsspec with all ranges of a batch issued in one concurrent ``cat_ranges`` call.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import shutil
import socket
import uuid
from collections.abc import Awaitable, Callable, Hashable, Iterator, Sequence
from typing import Any, NamedTuple

import fsspec
import fsspec.asyn
import numpy as np

from .errors import ConflictError
from .threads import pmap

#: ``if_generation`` value that skips the generation check.
ANY = object()

# Ranges closer than this are read as one; reading a few unused KiB beats another request.
MAX_GAP = 4096

#: Prefix of the directories staged changes spill to.
SPILL_PREFIX = ".ngshard-staged-"
# Temporary files and spill directories carry "<pid>@<host>~" in their names, so that a later
# writer can tell those a killed process left behind.
_TEMP_FILE = re.compile(r"^\..+~(\d+)@([^~/]+)~[0-9a-f]+\.tmp$")
_SPILL_DIR = re.compile(rf"^{re.escape(SPILL_PREFIX)}(\d+)@([^~/]+)~")


def owner_tag() -> str:
    """``<pid>@<host>~``: what this process's temporary names carry."""
    return f"{os.getpid()}@{socket.gethostname()}~"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(folder: str) -> int:
    """Remove the temporary files and spill directories in ``folder`` that processes of this
    host left when they died (those of live processes and of other hosts stay); returns how
    many. Readers never look at them: this only frees the space."""
    removed = 0
    host = socket.gethostname()
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for entry in entries:
        match = _TEMP_FILE.match(entry.name) or _SPILL_DIR.match(entry.name)
        if match is None or match[2] != host or _alive(int(match[1])):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed += 1
        except OSError:  # gone already, or not ours to remove: it only costs space
            continue
    return removed


class ObjectInfo(NamedTuple):
    """Size of an object and a token that changes whenever the object is replaced or modified."""

    size: int
    generation: Hashable


def coalesce(ranges: np.ndarray, max_gap: int = MAX_GAP) -> tuple[np.ndarray, np.ndarray]:
    """Merge ``(n, 2)`` [start, end) ranges that overlap or lie within ``max_gap`` of each other.

    Returns the merged ranges and, for each input range, the index of the merged one holding it.
    A merged range wastes at most ``max_gap`` bytes per input range, so its size needs no cap.
    """
    ranges = np.asarray(ranges, np.int64).reshape(-1, 2)
    if len(ranges) == 0:
        return ranges, np.zeros(0, np.intp)
    order = np.argsort(ranges[:, 0], kind="stable")
    starts, ends = ranges[order, 0], ranges[order, 1]
    reach = np.maximum.accumulate(ends)
    new = np.empty(len(starts), bool)
    new[0] = True
    new[1:] = starts[1:] > reach[:-1] + max_gap
    group = np.cumsum(new) - 1
    last = np.r_[np.flatnonzero(new)[1:], len(starts)] - 1
    assignment = np.empty(len(ranges), np.intp)
    assignment[order] = group
    return np.stack([starts[new], reach[last]], axis=1), assignment


def _split(merged: np.ndarray, blobs: Sequence[bytes], ranges: np.ndarray,
           assignment: np.ndarray) -> list[bytes | memoryview]:
    """The requested ranges out of the merged reads: views, not copies (a volume read of many
    chunks would otherwise copy every byte once more)."""
    if len(ranges) == len(merged) and (ranges == merged).all():  # nothing was merged
        return list(blobs)
    views = [memoryview(b) for b in blobs]
    offsets = ranges[:, 0] - merged[assignment, 0]
    return [views[g][o:o + n] for g, o, n in
            zip(assignment.tolist(), offsets.tolist(), (ranges[:, 1] - ranges[:, 0]).tolist())]


_IOV_MAX = 1024
_PIECE = 4 << 20  # large reads go in pieces of this size over threads


def _pread_merged(fd: int, merged: np.ndarray) -> list[bytes | memoryview]:
    """Read the merged ranges of a file; large ones in pieces on threads, straight into one
    buffer per range, so page faults and copies run on every core. A blob comes back short
    where the file ends."""
    spans = merged.tolist()
    if int((merged[:, 1] - merged[:, 0]).sum()) < 2 * _PIECE:
        return [os.pread(fd, e - s, s) for s, e in spans]
    bufs = [bytearray(e - s) for s, e in spans]
    pieces = [(i, o, memoryview(bufs[i])[o:o + _PIECE])
              for i, (s, e) in enumerate(spans) for o in range(0, e - s, _PIECE)]
    got = pmap(lambda p: os.preadv(fd, [p[2]], spans[p[0]][0] + p[1]), pieces, min_items=2)
    ends = [len(b) for b in bufs]
    for (i, o, view), n in zip(pieces, got):
        if n < len(view):
            ends[i] = min(ends[i], o + n)
    return [memoryview(b)[:n] if n < len(b) else memoryview(b) for b, n in zip(bufs, ends)]


class FileSlice(NamedTuple):
    """Bytes [offset, offset + size) of a local file, written into an object without passing
    through this process's memory where the system allows (copy_file_range)."""

    path: str
    offset: int
    size: int
    owned: bool = False  # a temporary file the writer may take over instead of copying

    def read(self) -> bytes:
        with open(self.path, "rb") as f:
            return os.pread(f.fileno(), self.size, self.offset)


def _copy_slice(fd: int, part: FileSlice, offset: int | None) -> None:
    with open(part.path, "rb") as src:
        done = 0
        while done < part.size:
            n = part.size - done
            try:
                n = os.copy_file_range(src.fileno(), fd, n, part.offset + done,
                                       None if offset is None else offset + done)
            except (AttributeError, OSError):  # no copy_file_range here: through memory
                chunk = os.pread(src.fileno(), min(n, 64 << 20), part.offset + done)
                n = os.write(fd, chunk) if offset is None else \
                    os.pwrite(fd, chunk, offset + done)
            if n == 0:
                raise OSError(f"{part.path}: ended before byte {part.offset + part.size}")
            done += n


def write_all(fd: int, parts: Sequence, offset: int | None = None) -> None:
    """Write the parts in order (at ``offset``, or at the file position): buffers with one
    vectored write per 1024 of them, never joined into one copy first; FileSlices copied."""
    if FileSlice not in map(type, parts):
        write_buffers(fd, parts, offset)
        return
    cuts = [i for i, p in enumerate(parts) if p.__class__ is FileSlice]
    start = 0
    for cut in [*cuts, len(parts)]:
        offset = write_buffers(fd, parts[start:cut], offset)
        if cut < len(parts):
            _copy_slice(fd, parts[cut], offset)
            offset = None if offset is None else offset + parts[cut].size
        start = cut + 1


def write_buffers(fd: int, parts: Sequence, offset: int | None = None) -> int | None:
    """Write buffers in order, 1024 per vectored write; returns the offset after them."""
    for i in range(0, len(parts), _IOV_MAX):
        batch = parts[i:i + _IOV_MAX]
        total = sum(map(len, batch))
        written = os.writev(fd, batch) if offset is None else os.pwritev(fd, batch, offset)
        if written < total:  # short write: finish this batch from where it stopped
            rest = memoryview(b"".join(batch))[written:]
            while rest:
                n = os.write(fd, rest) if offset is None else \
                    os.pwrite(fd, rest, offset + total - len(rest))
                rest = rest[n:]
        if offset is not None:
            offset += total
    return offset


class Storage:
    """A directory of objects addressed by name. Use :func:`open_storage` to get one."""

    url: str
    #: True where every read returns the generation of the bytes it read (pinned by one file
    #: descriptor), so a cached index can be used first and checked by the read itself.
    reads_report_generation = False
    #: True where objects can be appended to and patched in place (local files).
    supports_append = False

    def path(self, name: str) -> str:
        """The full location of ``name``, for messages."""
        return f"{self.url.rstrip('/')}/{name}"

    def stat(self, name: str) -> ObjectInfo | None:
        """Size and generation of an object, None if it does not exist."""
        raise NotImplementedError

    def read(self, name: str) -> bytes | None:
        """The whole object, None if it does not exist."""
        raise NotImplementedError

    def stat_many(self, names: Sequence[str]) -> list[ObjectInfo | None]:
        """:meth:`stat` of many objects (remote stores ask for them all at once)."""
        return [self.stat(name) for name in names]

    def read_many(self, names: Sequence[str]) -> list[bytes | None]:
        """:meth:`read` of many whole objects (remote stores ask for them all at once)."""
        return pmap(self.read, names, min_items=4)

    def write_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        """Write many whole objects, each atomically (remote stores send them all at once)."""
        pmap(lambda item: self.write(item[0], [item[1]]), items, min_items=4)

    def read_ranges(self, requests: Sequence[tuple[str, np.ndarray]]
                    ) -> list[tuple[Hashable | None, list[bytes | memoryview] | None]]:
        """Read ``(name, (n, 2) ranges)`` requests in one batch, coalescing near ranges; the
        chunks may be views into one larger read.

        For each request returns ``(generation, chunks)``: the generation the bytes were read
        from (None if the store cannot tell), and None instead of chunks if the object is gone.
        A chunk comes back short where the object ends early; the caller judges why.
        """
        raise NotImplementedError

    def read_range(self, name: str, start: int, end: int) -> tuple[Hashable | None, bytes | None]:
        """One range of one object: the single-read fast path of :meth:`read_ranges`."""
        gen, chunks = self.read_ranges([(name, np.array([[start, end]]))])[0]
        return gen, None if chunks is None else chunks[0]

    def write(self, name: str, parts: Sequence[bytes], if_generation: Any = ANY) -> None:
        """Write an object atomically: readers see the old object or the whole new one.

        ``if_generation``: the generation the object must still have (None: it must not
        exist), else ConflictError; ANY writes regardless.
        """
        raise NotImplementedError

    def delete(self, name: str, if_generation: Any = ANY) -> None:
        """Remove an object if it exists (``if_generation`` as for :meth:`write`)."""
        raise NotImplementedError

    def append_and_patch(self, name: str, generation: Hashable, offset: int,
                         tail: Sequence[bytes], head: bytes) -> None:
        """Write ``tail`` at ``offset`` (the end of the object), then ``head`` at 0, only if
        the object still has ``generation``. Only where :attr:`supports_append`."""
        raise NotImplementedError(f"{type(self).__name__} cannot append")

    def _check(self, name: str, expected: Any) -> None:
        if expected is ANY:
            return
        info = self.stat(name)
        if (info is None and expected is not None) or (
                info is not None and info.generation != expected):
            raise ConflictError(f"{self.path(name)}: changed on storage since it was read "
                                f"(another writer?); nothing was written")

    def list(self) -> list[str]:
        """Names of the objects directly under the root (empty if the root does not exist)."""
        raise NotImplementedError

    def child(self, name: str) -> Storage:
        """The storage rooted at a sub-directory."""
        raise NotImplementedError


class LocalStorage(Storage):
    """Objects as files in a local directory."""

    reads_report_generation = True
    supports_append = True

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.url = self.root

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    @staticmethod
    def _info(st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(st.st_size, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))

    def stat(self, name: str) -> ObjectInfo | None:
        try:
            return self._info(os.stat(self.path(name)))
        except FileNotFoundError:
            return None

    def read(self, name: str) -> bytes | None:
        try:
            with open(self.path(name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_ranges(self, requests):
        results = []
        for name, ranges in requests:
            ranges = np.asarray(ranges, np.int64).reshape(-1, 2)
            try:
                fd = os.open(self.path(name), os.O_RDONLY)
            except FileNotFoundError:
                results.append((None, None))
                continue
            try:
                before = os.fstat(fd)
                merged, assignment = coalesce(ranges)
                blobs = _pread_merged(fd, merged)
                gen = self._read_generation(before, os.fstat(fd))
            finally:
                os.close(fd)
            results.append((gen, _split(merged, blobs, ranges, assignment)))
        return results

    @classmethod
    def _read_generation(cls, before: os.stat_result, after: os.stat_result) -> Hashable:
        """The generation bytes read between two fstats of one descriptor came from. A
        replaced file cannot change under an open descriptor, but one patched in place (an
        append update) can: then the read matches no generation and the caller reads again."""
        gen = cls._info(before).generation
        same = (before.st_ino, before.st_size, before.st_mtime_ns) == \
            (after.st_ino, after.st_size, after.st_mtime_ns)
        return gen if same else ("changed during read", gen)

    def read_range(self, name: str, start: int, end: int) -> tuple[Hashable | None, bytes | None]:
        try:
            fd = os.open(self.path(name), os.O_RDONLY)
        except FileNotFoundError:
            return None, None
        try:
            before = os.fstat(fd)
            blob = os.pread(fd, end - start, start)
            gen = self._read_generation(before, os.fstat(fd))
        finally:
            os.close(fd)
        return gen, blob

    def write(self, name: str, parts: Sequence[bytes], if_generation: Any = ANY) -> None:
        path = self.path(name)
        folder, base = os.path.split(path)
        os.makedirs(folder, exist_ok=True)
        if self._adopt(path, parts, if_generation, name):
            return
        tmp = os.path.join(folder, f".{base}~{owner_tag()}{uuid.uuid4().hex}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                write_all(fd, parts)
            finally:
                os.close(fd)
            with self._locked(name, if_generation):
                os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def _adopt(self, path: str, parts: Sequence, if_generation: Any, name: str) -> bool:
        """Write ``[head, FileSlice(owned), *tail]`` by taking the slice's file over: when the
        slice is the file from ``len(head)`` to its end and the file is on this filesystem,
        write the head into its reserved start, append the tail and rename it into place, so
        its bytes are never copied. False where that does not apply."""
        if len(parts) < 2 or not isinstance(parts[1], FileSlice) or not parts[1].owned:
            return False
        head, body, tail = parts[0], parts[1], parts[2:]
        try:
            if body.offset != len(head) or os.path.getsize(body.path) != body.offset + body.size \
                    or os.stat(body.path).st_dev != os.stat(os.path.dirname(path)).st_dev:
                return False
        except OSError:
            return False
        fd = os.open(body.path, os.O_WRONLY)
        try:
            write_buffers(fd, tail, body.offset + body.size)
            write_buffers(fd, [head], 0)
            os.fchmod(fd, 0o644)
        finally:
            os.close(fd)
        with self._locked(name, if_generation):
            os.replace(body.path, path)
        return True

    def delete(self, name: str, if_generation: Any = ANY) -> None:
        with self._locked(name, if_generation), contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(name))

    @contextlib.contextmanager
    def _locked(self, name: str, expected: Any) -> Iterator[None]:
        """Hold an exclusive lock on the current file while checking its generation, so two
        local writers cannot both pass the check for the same version of a shard."""
        if expected is ANY:
            yield
            return
        try:
            fd = os.open(self.path(name), os.O_RDONLY)
        except FileNotFoundError:
            self._check(name, expected)
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._check(name, expected)
            yield
        finally:
            os.close(fd)

    def append_and_patch(self, name: str, generation: Hashable, offset: int,
                         tail: Sequence[bytes], head: bytes) -> None:
        path = self.path(name)
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            if self._info(st).generation != generation or st.st_size != offset or \
                    os.stat(path).st_ino != st.st_ino:
                raise ConflictError(f"{path}: changed on storage since it was read "
                                    f"(another writer?); nothing was written")
            write_all(fd, tail, offset)
            appended = os.fstat(fd).st_mtime_ns
            write_all(fd, [head], 0)
            # The patch must change the generation even within one clock tick, or a reader
            # that cached the index between the two writes would never see the new one.
            st = os.fstat(fd)
            os.utime(fd, ns=(st.st_atime_ns, max(st.st_mtime_ns, appended + 1)))
        finally:
            os.close(fd)

    def list(self) -> list[str]:
        try:
            with os.scandir(self.root) as it:
                return sorted(e.name for e in it if e.is_file())
        except (FileNotFoundError, NotADirectoryError):
            return []

    def child(self, name: str) -> LocalStorage:
        return LocalStorage(os.path.join(self.root, name))


class FsspecStorage(Storage):
    """Objects behind any fsspec filesystem (memory, http, s3, gcs, ...)."""

    def __init__(self, url: str, fs: fsspec.AbstractFileSystem | None = None,
                 root: str | None = None) -> None:
        if fs is None:
            fs, root = fsspec.core.url_to_fs(url)
        self.fs, self.root, self.url = fs, root.rstrip("/"), url.rstrip("/")

    def _full(self, name: str) -> str:
        return f"{self.root}/{name}"

    @staticmethod
    def _info(info: dict) -> ObjectInfo:
        token = tuple(info.get(k) for k in ("ETag", "etag", "generation", "mtime",
                                             "LastModified", "last_modified", "created"))
        return ObjectInfo(int(info["size"]), (info["size"], token))

    @classmethod
    def _file_info(cls, info: dict) -> ObjectInfo | None:
        if info.get("type") == "directory" or info.get("size") is None:
            return None
        return cls._info(info)

    def stat(self, name: str) -> ObjectInfo | None:
        try:
            return self._file_info(self.fs.info(self._full(name)))
        except FileNotFoundError:
            return None

    def read(self, name: str) -> bytes | None:
        try:
            return self.fs.cat_file(self._full(name))
        except FileNotFoundError:
            return None

    def _all_at_once(self, run: Callable[[Any], Awaitable], items: Sequence,
                     run_sync: Callable[[Any], Any]) -> list:
        """``run`` over ``items`` with every request in flight at once, on the filesystem's
        own event loop; ``run_sync`` on threads for filesystems that are not async."""
        if not items:
            return []
        if not getattr(self.fs, "async_impl", False):
            return pmap(run_sync, items, min_items=2)

        async def every() -> list:
            return list(await asyncio.gather(*map(run, items)))

        return fsspec.asyn.sync(self.fs.loop, every)

    def stat_many(self, names: Sequence[str]) -> list[ObjectInfo | None]:
        async def one(name: str) -> ObjectInfo | None:
            try:
                return self._file_info(await self.fs._info(self._full(name)))
            except FileNotFoundError:
                return None

        return self._all_at_once(one, names, self.stat)

    def read_many(self, names: Sequence[str]) -> list[bytes | None]:
        async def one(name: str) -> bytes | None:
            try:
                return await self.fs._cat_file(self._full(name))
            except FileNotFoundError:
                return None

        return self._all_at_once(one, names, self.read)

    def write_many(self, items: Sequence[tuple[str, bytes]]) -> None:
        async def one(item: tuple[str, bytes]) -> None:
            await self.fs._pipe_file(self._full(item[0]), item[1])

        self._all_at_once(one, items, lambda item: self.write(item[0], [item[1]]))

    def read_ranges(self, requests):
        flat_paths, flat_starts, flat_ends, plans = [], [], [], []
        for name, ranges in requests:
            ranges = np.asarray(ranges, np.int64).reshape(-1, 2)
            merged, assignment = coalesce(ranges)
            plans.append((len(flat_paths), merged, ranges, assignment))
            flat_paths += [self._full(name)] * len(merged)
            flat_starts += merged[:, 0].tolist()
            flat_ends += merged[:, 1].tolist()
        blobs = self.fs.cat_ranges(flat_paths, flat_starts, flat_ends, on_error="return") \
            if flat_paths else []
        # Range reads cannot say which version they read, so ask afterwards: a generation
        # that still matches the caller's means the bytes came from that version.
        infos = self.stat_many([name for name, _ in requests])
        results = []
        for (first, merged, ranges, assignment), info in zip(plans, infos):
            mine = blobs[first:first + len(merged)]
            if info is None or any(isinstance(b, FileNotFoundError) for b in mine):
                results.append((None, None))
                continue
            for blob in mine:
                if isinstance(blob, BaseException):
                    raise blob
            results.append((info.generation, _split(merged, mine, ranges, assignment)))
        return results

    def write(self, name: str, parts: Sequence[bytes], if_generation: Any = ANY) -> None:
        # One PUT of the whole object: object stores make it visible atomically. The
        # generation check before it narrows, but cannot close, the window for a conflict.
        self._check(name, if_generation)
        self.fs.pipe_file(self._full(name), b"".join(
            p.read() if isinstance(p, FileSlice) else p for p in parts))

    def delete(self, name: str, if_generation: Any = ANY) -> None:
        self._check(name, if_generation)
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self._full(name))

    def list(self) -> list[str]:
        try:
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        names = (e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries
                 if e.get("type") != "directory")
        return sorted(n for n in names if n)

    def child(self, name: str) -> FsspecStorage:
        return FsspecStorage(f"{self.url}/{name}", self.fs, self._full(name))


def open_storage(url: str | os.PathLike) -> Storage:
    """The storage for a local path, a ``file://`` URL or any fsspec URL."""
    url = os.fspath(url)
    if "://" not in url:
        return LocalStorage(url)
    if url.startswith("file://"):
        return LocalStorage(url[len("file://"):])
    return FsspecStorage(url)
