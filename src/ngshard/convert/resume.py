"""Records of finished tasks, kept in the destination so an interrupted conversion resumes
where it stopped: ``.ngshard-convert/job.json`` describes the job (a resumed job must be the
same job), and an empty object per finished task is written, atomically, after the task's
shard. Everything is removed once the whole job is done.
"""

from __future__ import annotations

import contextlib
import json
import os
from urllib.parse import quote, unquote

from ..kinds import CONVERT_JOB as _JOB
from ..kinds import CONVERT_RECORDS as PREFIX
from ..storage import Storage, open_storage


def _records(root: str | Storage) -> Storage:
    return open_storage(root).child(PREFIX)


def recorded(root: str | Storage, job: dict) -> bool:
    """Whether ``job`` is the one recorded at ``root`` (begun there, not finished)."""
    return _records(root).read(_JOB) == _doc(job)


def _doc(job: dict) -> bytes:
    return json.dumps(job, sort_keys=True).encode()


def start(root: str | Storage, job: dict, resume: bool) -> set[str]:
    """Begin (or resume) ``job`` at ``root``: the names of the tasks already done. A job that
    differs from the one recorded there (or ``resume=False``) starts afresh."""
    records = _records(root)
    doc = _doc(job)
    if resume and records.read(_JOB) == doc:
        return {unquote(n) for n in records.list() if n != _JOB}
    clear(root)
    records.write(_JOB, [doc])
    return set()


def mark_done(root: str | Storage, name: str) -> None:
    """Record task ``name`` as finished (after its output is stored)."""
    _records(root).write(quote(name, safe=""), [b""])


def clear(root: str | Storage) -> None:
    """Remove every record (the job is done, or starts over)."""
    records = _records(root)
    for name in records.list():
        records.delete(name)
    if records.local_root is not None:
        with contextlib.suppress(OSError):
            os.rmdir(records.local_root)
