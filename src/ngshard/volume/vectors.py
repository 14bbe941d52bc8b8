"""3-vectors (x, y, z) from user arguments and info members, validated in one place."""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any, TypeVar

import numpy as np

from ..errors import SpecError

Vec3 = tuple[int, int, int]
T = TypeVar("T")
# Grid bounds must stay inside int64 (chunk names, positions and Morton arithmetic use it).
INT64_MAX = (1 << 63) - 1


def vec3(value: Any, what: str, *, kind: type = int, positive: bool = True) -> tuple:
    """``value`` as 3 Python ints (or floats with ``kind=float``); SpecError naming ``what``
    otherwise. Integers must fit in int64; booleans are not numbers here."""
    noun = "numbers" if kind is float else "integers"
    bad = SpecError(f"{what} must be 3 {'positive ' if positive else ''}{noun} (x, y, z), "
                    f"got {value!r}")
    if isinstance(value, (str, bytes, dict)):
        raise bad
    try:
        items = list(value)
    except TypeError:
        raise bad from None
    if len(items) != 3:
        raise bad
    out = []
    for v in items:
        if isinstance(v, (bool, np.bool_)):
            raise bad
        try:
            v = float(v) if kind is float and isinstance(v, (float, np.floating)) else \
                operator.index(v)
        except TypeError:
            raise bad from None
        if kind is int and not -INT64_MAX <= v <= INT64_MAX:
            raise SpecError(f"{what}: {v} does not fit in a 64-bit signed integer")
        if positive and not v > 0:
            raise bad
        out.append(kind(v))
    return tuple(out)


def xyz(values: Iterable[T]) -> tuple[T, T, T]:
    """Values known to be three (an x, y, z made by arithmetic over 3-vectors) as a 3-tuple:
    what ``tuple(...)`` makes of them, with its length told to the type checker."""
    x, y, z = values
    return x, y, z
