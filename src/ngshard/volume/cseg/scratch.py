"""Per-thread scratch buffers that the encoder and decoder reuse from chunk to chunk."""

from __future__ import annotations

import math
import threading

import numpy as np

from ...limits import CSEG_SCRATCH_BYTES

_local = threading.local()


def scratch(slot: str, shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialized array in a buffer this thread reuses from chunk to chunk: fresh memory
    for every large temporary costs a page fault per 4 KiB, a third of the encoding time.
    Only for temporaries: nothing returned may live in one."""
    n = math.prod(shape) * np.dtype(dtype).itemsize
    if n > CSEG_SCRATCH_BYTES:
        return np.empty(shape, dtype)
    buf = getattr(_local, slot, None)
    if buf is None or len(buf) < n:
        buf = np.empty(max(n, 1 << 20), np.uint8)
        setattr(_local, slot, buf)
    return buf[:n].view(dtype).reshape(shape)
