"""Compiled kernels of ngshard (_kernels.c, _cseg.c, _mean.c, _mode.c, _blocks.c, _stream.c,
_serve.c, _pread.c,
_minishard.c)."""

from typing import Any, overload

# The array's items in Fortran order (any strides), as bytes; or written into the writable
# buffer ``out`` of exactly their size (then None).
@overload
def fortran_bytes(array: Any, /) -> bytes: ...
@overload
def fortran_bytes(array: Any, out: Any, /) -> None: ...

def cseg_decode(words: Any, start: int, block: tuple[int, int, int], entry: int, out: Any,
                stream: bool = False, /) -> int:
    """Decode one validated compressed_segmentation channel into ``out`` (a writable
    (x, y, z) array of any strides); -1, or the first block whose index points past its
    table. ``stream``: rows of whole aligned cache lines are written past the cache."""

def cseg_encode(array: Any, block: tuple[int, int, int], head: Any, /) -> bytes | None:
    """``head`` (whole words), then one (x, y, z) channel's words; None if its offsets
    overflow 24 bits."""

def block_mode(array: Any, block: tuple[int, int, int], out: Any, sparse: bool, /) -> None:
    """``out`` = the modes of ``array``'s blocks (4-d integers, whole blocks of at most 64
    voxels), the smallest value on ties; ``sparse``: zero wins only a block of zeros."""

def block_mean(array: Any, block: tuple[int, int, int], out: Any, /) -> None:
    """``out`` = the means of ``array``'s blocks (4-d, integers of at most 32 bits, whole
    blocks), rounded half to even."""

def stream_copy(dst: Any, src: Any, /) -> None:
    """``dst[...] = src`` for arrays of one shape and item size whose last axis is
    contiguous in both; rows of whole aligned cache lines are written past the cache."""

def minishard_tables(tables: Any, counts: Any, index_end: int, file_size: int, keys: Any,
                     starts: Any, sizes: Any, /) -> tuple[int, bool]:
    """Decode the raw minishard indices joined in ``tables`` (``counts``: int64 entries of
    each) into the uint64 arrays ``keys``, ``starts`` and ``sizes``: the first entry whose
    chunk lies outside ``[index_end, file_size)`` (-1 if none), and whether every table's
    keys rise."""

# POSIX only.
def pread_spans(fd: int, spans: Any, /) -> list[bytes]:
    """The ``(n, 2)`` int64 ``[start, end)`` spans of the open file ``fd``, read without the
    GIL; a span past the end of the file comes back short."""

# Linux only.
def serve_quick(fd: int, data: bytes, table: dict[bytes, tuple], /
                ) -> tuple[int, None | bool | tuple[Any, bytes, int, int]]:
    """Answer the plain GETs at the start of ``data`` on the socket ``fd`` from ``table``
    (see ``ngshard.server.quick``): the bytes of ``data`` answered, then None, False (the
    connection failed), or ``(file, head left, offset, end)`` of a response the socket took
    only part of."""
