"""Values given as arrays (the array form of ``write_kv`` and ``ShardedKV.set_many``), checked
and brought to one form: uint64 keys, the values back to back in one uint8 array, lengths."""

from __future__ import annotations

from typing import Any

import numpy as np

from .spec import as_key_array


def value_arrays(keys: Any, values: Any, offsets: Any = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys and values in the form the array writers take: (uint64 keys, the values back to
    back as one uint8 array, int64 lengths).

    Raises
    ------
    InvalidKeyError
        A key outside [0, 2**64).
    TypeError
        Values of a type not described in :func:`write_kv`.
    ValueError
        Offsets (or rows, or list items) that do not match the number of keys.
    """
    keys = as_key_array(keys)
    n = len(keys)
    if values is None:
        raise TypeError("keys= needs values=")
    if isinstance(values, (list, tuple)):
        bad = next((i for i, v in enumerate(values)
                    if not isinstance(v, (bytes, bytearray, memoryview))), None)
        if bad is not None:
            raise TypeError(f"value of key {int(keys[bad]) if bad < n else bad} must be bytes, "
                            f"got {type(values[bad]).__name__}")
        if offsets is not None:
            raise TypeError("offsets= goes with one buffer of values, not a list")
        _same_count(n, len(values), "values")
        lengths = np.fromiter(map(len, values), np.int64, count=len(values))
        return keys, np.frombuffer(b"".join(values), np.uint8), lengths
    if isinstance(values, np.ndarray) and values.ndim == 2:
        if offsets is not None:
            raise TypeError("offsets= goes with one buffer of values, not rows")
        _same_count(n, len(values), "rows of values")
        rows = np.ascontiguousarray(values)
        return keys, rows.view(np.uint8).reshape(-1), \
            np.full(n, rows.shape[1] * rows.itemsize, np.int64)
    try:
        buf = np.frombuffer(memoryview(values).cast("B"), np.uint8) \
            if not isinstance(values, np.ndarray) else \
            np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    except TypeError:
        raise TypeError(f"values must be a buffer, a 2-D array or a list of bytes, got "
                        f"{type(values).__name__}") from None
    if offsets is None:
        raise TypeError("values= as one buffer needs offsets= (n + 1 boundaries)")
    offsets = np.asarray(offsets)
    if offsets.ndim != 1 or offsets.dtype.kind not in "iu":
        raise ValueError(f"offsets must be a 1-D integer array, got {offsets.dtype} "
                         f"of shape {offsets.shape}")
    _same_count(n + 1, len(offsets), "offsets (n + 1 boundaries)")
    offsets = offsets.astype(np.int64)
    if n and (offsets[0] < 0 or offsets[-1] > len(buf) or (np.diff(offsets) < 0).any()):
        raise ValueError(f"offsets must rise from 0 or more to at most the {len(buf)} bytes "
                         f"of values, never falling")
    return keys, buf[int(offsets[0]) if n else 0:int(offsets[-1]) if n else 0], \
        np.diff(offsets)


def _same_count(expected: int, got: int, what: str) -> None:
    if expected != got:
        raise ValueError(f"{expected} expected, but {got} {what} given")
