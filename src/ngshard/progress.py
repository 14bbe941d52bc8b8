"""Progress bars for long work: shown only when asked for, and only once the work has taken
about a second (a quick ``put`` or an ``rm`` of nothing shows none). The command line asks
for them only on a terminal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")
#: Seconds of work before a bar appears.
DELAY = 1.0


def progress_bar(iterable: Iterable[T], *, enabled: bool = True, **options: Any) -> Iterable[T]:
    """``iterable`` wrapped in a tqdm bar (``options``: desc, unit, total...) if ``enabled``."""
    if not enabled:
        return iterable
    return tqdm(iterable, delay=DELAY, **options)
