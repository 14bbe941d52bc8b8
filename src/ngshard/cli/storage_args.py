"""The storage options of the command line: ``--storage-option KEY=VALUE`` (repeatable),
``--retries N`` and ``--retry-seconds S``, on every command that takes a URL, turned into
the ``storage_options`` the Python functions take (see :mod:`ngshard.storage.options`)."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import SpecError
from ..storage import parse_option


def add_storage_args(p: argparse.ArgumentParser, *, source: bool = False) -> None:
    """The options of ``p``'s storage; with ``source``, also ``--src-storage-option`` for a
    source that needs others than the destination."""
    g = p.add_argument_group("storage")
    g.add_argument("--storage-option", "-S", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the storage (repeatable): anon=true, "
                        "endpoint_url=http://127.0.0.1:9000, requester_pays=true, "
                        "profile=NAME, token=FILE, ...; VALUE is read as JSON where it is JSON")
    if source:
        g.add_argument("--src-storage-option", action="append", default=[],
                       metavar="KEY=VALUE", help="an option of SRC's storage alone (default: "
                                                 "those of --storage-option)")
    g.add_argument("--retries", type=int, metavar="N", help="send a request that fails "
                   "transiently (HTTP 429/5xx, a reset connection) again up to N times "
                   "(default 10)")
    g.add_argument("--retry-seconds", type=float, metavar="S", help="give up on a request "
                   "or read after S seconds of tries (default 60)")


def storage_options(args: argparse.Namespace, *, source: bool = False
                    ) -> dict[str, Any] | None:
    """The ``storage_options`` the command's arguments give (of SRC, with ``source``), None
    where they give none.

    Raises
    ------
    SpecError
        A ``--storage-option`` that is not KEY=VALUE, or a negative ``--retries``.
    """
    given = getattr(args, "storage_option", None) or []
    if source and getattr(args, "src_storage_option", None):
        given = args.src_storage_option
    options = dict(parse_option(text) for text in given)
    for name, value in (("retries", getattr(args, "retries", None)),
                        ("retry_seconds", getattr(args, "retry_seconds", None))):
        if value is not None:
            if value < 0:
                raise SpecError(f"--{name.replace('_', '-')} must be >= 0, got {value:g}")
            options[name] = value
    return options or None
