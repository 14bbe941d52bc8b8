"""Records of finished tasks, kept in the destination so an interrupted job resumes where it
stopped: ``.ngshard-convert/job.json`` describes the job (a resumed job must be the same job:
the same canonical source, destination and parameters; its ``tasks`` member counts the tasks
of each output, a scale's key or an array's name), and ``done-*`` records list the names of
finished tasks, one per line. The client writes them (:class:`Recorder`), a batch of tasks a
record, after the tasks' shards are stored: 800,000 tasks make 800 records, not 800,000.
Everything is removed once the whole job is done (one listing, batched deletes), so records
there mean an unfinished job (:func:`unfinished` says what is left, for ``verify``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Collection

from ..errors import UnlistableError
from ..jsondoc import parse_json
from ..kinds import CONVERT_JOB as _JOB
from ..kinds import CONVERT_RECORDS as PREFIX
from ..limits import RECORD_SECONDS, RECORD_TASKS
from ..storage import Storage, open_storage

_DONE = "done-"  # the records of finished tasks: done-<time>-<random>


def _records(root: str | Storage) -> Storage:
    return open_storage(root).child(PREFIX)


def recorded(root: str | Storage, job: dict) -> bool:
    """Whether ``job`` is the one recorded at ``root`` (begun there, not finished)."""
    return _records(root).read(_JOB) == _doc(job)


def _doc(job: dict) -> bytes:
    return json.dumps(job, sort_keys=True).encode()


def _done(records: Storage, names: list[str]) -> list[str]:
    """The task names the ``done-`` records among ``names`` hold."""
    ours = [n for n in names if n.startswith(_DONE)]
    return [line for blob in records.read_many(ours) if blob
            for line in blob.decode().splitlines() if line]


def start(root: str | Storage, job: dict, resume: bool, *, known: bool | None = None,
          empty: bool = False) -> set[str]:
    """Begin (or resume) ``job`` at ``root``: the names of the tasks already done. A job that
    differs from the one recorded there (or ``resume=False``) starts afresh. ``known``:
    what :func:`recorded` said of ``job`` just now (None: ask); ``empty``: ``root`` was
    just seen to hold nothing (no records to remove)."""
    records = _records(root)
    doc = _doc(job)
    if known is None:
        known = records.read(_JOB) == doc
    if resume and known:
        return set(_done(records, records.list()))
    if not empty:
        clear(root)
    records.write(_JOB, [doc])
    return set()


class Recorder:
    """Records finished tasks a batch at a time (every ``RECORD_TASKS`` tasks or
    ``RECORD_SECONDS``, and what is left when the context ends, even by an error).

    ``last``: the number of tasks whose records are removed (:func:`clear`) as soon as that
    many were added, the job being done: the records of the last batch are then not written
    (an interruption before the removal redoes at most those tasks)."""

    def __init__(self, root: str | Storage, last: int | None = None) -> None:
        self.records = _records(root)
        self.names: list[str] = []
        self.since = time.monotonic()
        self.left = last
        self.finished = False
        #: The names of the records written.
        self.written: list[str] = []

    def add(self, name: str) -> None:
        """Task ``name`` is finished (its output stored)."""
        self.names.append(name)
        if self.left is not None:
            self.left -= 1
            self.finished = self.left <= 0
        if self.finished:
            return
        if len(self.names) >= RECORD_TASKS or time.monotonic() - self.since > RECORD_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Record the finished tasks not recorded yet (one object)."""
        if self.names:
            name = f"{_DONE}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
            self.records.write(name, ["".join(f"{n}\n" for n in self.names).encode()])
            self.written.append(name)
            self.names = []
        self.since = time.monotonic()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        if kind is not None or not self.finished:
            self.flush()


def clear(root: str | Storage, written: Collection[str] | None = None) -> None:
    """Remove every record (the job is done, or starts over): one listing (none where
    ``written`` names every record there), then the task records and the job in batched
    deletes."""
    records = _records(root)
    # one batch, the job among them: should some deletes fail, records left without a job
    # are removed as stale when a job starts there (see start)
    records.delete_many(sorted({*(records.list() if written is None else written), _JOB}))
    if records.local_root is not None:
        with contextlib.suppress(OSError):
            os.rmdir(records.local_root)


def unfinished(root: str | Storage, part: str | None = None, *,
               besides: Collection[str] = ()) -> str | None:
    """One line saying that a job writing into ``root`` (a conversion, a transfer, a
    pyramid, meshes, skeletons) has not finished: how many of its tasks (of output ``part``
    only, a scale's key, when given) remain, and the command that resumes it, as its record
    names it. None when no job is recorded there, or when every task of ``part`` is done.

    Parameters
    ----------
    root
        The job's destination.
    part
        A scale key (or zarr array name): only its tasks count.
    besides
        Outputs checked on their own (the scales of a volume): a job none of whose other
        outputs has tasks is not reported.

    Returns
    -------
    str or None
    """
    layer = open_storage(root)
    records = layer.child(PREFIX)
    raw = records.read(_JOB)
    if raw is None:
        return None
    try:
        job = parse_json(raw, records.path(_JOB))
        counts = {str(k): int(v) for k, v in job.get("tasks", {}).items()}
        command = job.get("command") or f"ngshard convert {job['from']} {job['to']}"
        how = f"run `{command}` again with the same options"
        kind = command.split()[1]
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError,
            IndexError):  # SpecError: too
        counts, how, kind = {}, "run the same conversion again", "convert"
    if part is not None and counts and not any(part in k.split("+") for k in counts):
        return None  # not an output of the recorded job
    if besides:  # a task making several levels names them all, joined by "+"
        counts = {k: v for k, v in counts.items() if not set(k.split("+")) & set(besides)}
        if not counts:
            return None  # (a record it cannot read: the outputs' own checks report it)
    try:
        done = _done(records, records.list())
    except UnlistableError:
        done = None
    if part is not None:
        counts = {k: v for k, v in counts.items() if part in k.split("+")}
    if done is not None and counts:
        done = [n for n in done if n.split("/", 1)[0] in counts]
    what = f" of {part}" if part is not None else ""
    job_name = "a conversion" if kind == "convert" else f"a {kind} job"
    head = f"{layer.url}: {job_name} into it has not finished"
    if done is None or not counts:
        left = "" if done is None else f" ({len(done)} task(s){what} done)"
        return f"{head}{left}; to finish it, {how}"
    total = sum(counts.values())
    if len(done) >= total:  # its last steps (tasks planned later, the info) remain
        return None if part is not None else f"{head}; to finish it, {how}"
    by_part = ", ".join(f"{k}: {v - sum(n.split('/', 1)[0] == k for n in done)} of {v}"
                        for k, v in counts.items() if len(counts) > 1)
    return (f"{head}: {total - len(done)} of {total} task(s){what} remain"
            f"{f' ({by_part})' if by_part else ''}; to finish it, {how}")
