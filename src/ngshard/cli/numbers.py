"""Comma-separated numbers given as option values (``--offset 0,0,-8``, ``--resolution 4,4,40``)."""

from __future__ import annotations

import math
from collections.abc import Callable

from ..errors import SpecError


def _parse(text: str, cast: Callable[[str], float]) -> tuple:
    try:
        return tuple(cast(v) for v in text.split(","))
    except ValueError:
        return ()


def ints(text: str | None, what: str, n: int | None = None, signed: bool = False
         ) -> tuple[int, ...] | None:
    """``n`` (or any number of) comma-separated integers, >= 0 unless ``signed``; None if
    not given.

    Raises
    ------
    SpecError
        Not such integers.
    """
    if text is None:
        return None
    values = _parse(text, int)
    if not values or (n is not None and len(values) != n) or (min(values) < 0 and not signed):
        raise SpecError(f"{what} must be {n or 'some'} comma-separated integers"
                        f"{'' if signed else ' >= 0'}, not {text!r}")
    return values


def floats(text: str | None, what: str, n: int = 3) -> tuple[float, ...] | None:
    """``n`` comma-separated finite numbers > 0; None if not given.

    Raises
    ------
    SpecError
        Not ``n`` such numbers.
    """
    if text is None:
        return None
    values = _parse(text, float)
    if len(values) != n or not all(v > 0 and math.isfinite(v) for v in values):
        raise SpecError(f"{what} must be {n} comma-separated numbers > 0, not {text!r}")
    return values
