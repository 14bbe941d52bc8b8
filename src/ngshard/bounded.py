"""Arrays from bytes whose counts come from the bytes: the one place a decoder turns a count
it read (vertices, edges, fragments, annotations, ids, index entries) into an array, checked
against the bytes actually present. A claim past them is a CorruptDataError naming the file
and what was claimed, never numpy's ValueError and never an allocation sized by the claim:
what comes back is a view of the buffer, so a decoder's memory follows its input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import CorruptDataError


def take(buf: Any, dtype: Any, count: int, offset: int = 0, *, where: str,
         what: str = "values") -> np.ndarray:
    """``count`` items of ``dtype`` at byte ``offset`` of ``buf``, as a read-only view.

    Parameters
    ----------
    buf
        bytes, bytearray, memoryview or a uint8 array.
    dtype
        Of the items (its byte order as stored).
    count, offset
        As read from the data: any integer, checked here.
    where, what
        The file (or value) and what the items are, for the message.

    Returns
    -------
    numpy.ndarray
        A one-dimensional view of ``buf``.

    Raises
    ------
    CorruptDataError
        A negative count or offset, or items reaching past the end of ``buf``.
    """
    dtype = np.dtype(dtype)
    count, offset = int(count), int(offset)
    size = len(buf) if not isinstance(buf, np.ndarray) else buf.nbytes
    if count < 0 or offset < 0 or offset + count * dtype.itemsize > size:
        raise CorruptDataError(f"{where}: {what}: {count} of {dtype.itemsize} bytes at "
                               f"offset {offset} reach past the {size} bytes there")
    return np.frombuffer(buf, dtype, count, offset)
