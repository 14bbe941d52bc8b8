"""Names of temporary files and spill directories, and removal of those dead writers left.

Temporary files and spill directories carry ``<pid>@<host>~`` in their names, so that a later
writer on the same host can tell which ones a killed process left behind.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import uuid

#: Prefix of the directories staged changes spill to.
SPILL_PREFIX = ".ngshard-staged-"
_TEMP_FILE = re.compile(r"^\..+~(\d+)@([^~/]+)~[0-9a-f]+\.tmp$")
_SPILL_DIR = re.compile(rf"^{re.escape(SPILL_PREFIX)}(\d+)@([^~/]+)~")


def owner_tag() -> str:
    """``<pid>@<host>~``: what this process's temporary names carry."""
    return f"{os.getpid()}@{socket.gethostname()}~"


def temp_name(path: str) -> str:
    """A fresh hidden temporary name beside ``path``, carrying this process's tag."""
    folder, base = os.path.split(path)
    return os.path.join(folder, f".{base}~{owner_tag()}{uuid.uuid4().hex}.tmp")


def is_temp_file(name: str) -> bool:
    """Whether ``name`` is a temporary file a writer makes beside the file it will replace."""
    return _TEMP_FILE.match(name) is not None


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

