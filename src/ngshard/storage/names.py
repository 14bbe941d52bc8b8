"""Names that come from data (a manifest's fragment names, a group's dataset paths, a scale's
key, an annotation index's key, the ``mesh`` or ``skeletons`` folder of an info) become
storage names here and nowhere else: the one check that keeps every such name inside the
directory it is relative to, for every kind of storage.

A name inside is one or more ``/``-separated segments, none of them empty, ``.`` or ``..``;
no leading ``/``, no backslash (Windows separators), no NUL, no URL scheme (``gs:``, ``file:``,
a drive ``C:``). The check is on the text alone: it never looks at storage, so a refusal says
nothing about what lies outside (whether ``/etc/hostname`` exists, or its size).
"""

from __future__ import annotations

import functools
import re

from ..errors import NgShardError, SpecError
from ..limits import MAX_NAME_CHARS

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_BAD_PARTS = frozenset(("", ".", ".."))


def name_problem(name: object, *, folder: bool = False) -> str | None:
    """Why ``name`` does not name something inside its directory, None if it does.
    ``folder``: trailing slashes are allowed (``"mesh/"`` names the folder ``mesh``)."""
    if not isinstance(name, str):
        return f"must be a string, not {type(name).__name__}"
    if len(name) <= _REMEMBERED_CHARS:  # a store checks every name it is given, and is given
        return _remembered(name, folder)  # the same few (its shards) over and over
    return _problem(name, folder)


def _problem(name: str, folder: bool) -> str | None:
    if folder:
        name = name.rstrip("/")
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_CHARS:
        return f"is longer than {MAX_NAME_CHARS} characters"
    if "\\" in name or "\x00" in name:
        return "holds a backslash or a NUL"
    if name[0] == "/":
        return "is an absolute path"
    if _SCHEME.match(name):
        return "is a URL or a drive, not a relative path"
    if not _BAD_PARTS.isdisjoint(name.split("/")):
        return "has an empty, '.' or '..' segment"
    return None


_REMEMBERED_CHARS = 256
_remembered = functools.lru_cache(maxsize=4096)(_problem)


def shown(name: object, most: int = 80) -> str:
    """``repr(name)``, cut to about ``most`` characters (hostile names can be huge)."""
    text = repr(name)
    return text if len(text) <= most else f"{text[:most]}...({len(text)} characters)"


def check_name(name: object, where: str, what: str = "name", *, folder: bool = False,
               error: type[NgShardError] = SpecError) -> str:
    """``name`` if it names something inside its directory (see the module docstring; with
    ``folder``, its trailing slashes removed).

    Parameters
    ----------
    name
        The name as the data gives it.
    where
        The file that gives it, for the message.
    what
        What the name is ("scale key", "fragment name", ...), for the message.
    folder
        Allow (and remove) trailing slashes.
    error
        The class raised: SpecError for metadata (the default), CorruptDataError for a
        name inside stored values.

    Raises
    ------
    SpecError, CorruptDataError
        As ``error`` says; the message names ``where`` and the name, nothing else.
    """
    problem = name_problem(name, folder=folder)
    if problem is not None:
        raise error(f"{where}: {what} {shown(name)} {problem}: it must name something inside "
                    f"the layer")
    assert isinstance(name, str)  # name_problem refuses anything else
    return name.rstrip("/") if folder else name


def is_inside(name: object, *, folder: bool = False) -> bool:
    """Whether ``name`` names something inside its directory."""
    return name_problem(name, folder=folder) is None
