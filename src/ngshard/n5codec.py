"""N5 (pure): a dataset's ``attributes.json`` and its blocks' bytes, as the N5 specification
(saalfeldlab/n5) and tensorstore's ``n5`` driver lay them out.

A block is a big-endian header (mode uint16: 0 default, 1 varlength, 2 object; the number of
dimensions uint16; the block's size per dimension, uint32 each; with mode 1 the number of
elements, uint32) and then the values, compressed as the dataset says, big-endian, with the
first dimension fastest (Fortran order over N5's dimensions, which list x first). Edge blocks
hold only the voxels inside the dataset.
"""

from __future__ import annotations

import numpy as np

from .compression import decompress_twin
from .errors import CorruptDataError, SpecError
from .jsondoc import Doc

#: N5 data types -> numpy (big-endian, as stored)
DTYPES = {"uint8": ">u1", "uint16": ">u2", "uint32": ">u4", "uint64": ">u8", "int8": ">i1",
          "int16": ">i2", "int32": ">i4", "int64": ">i8", "float32": ">f4", "float64": ">f8"}
#: N5 compressions -> the compressed-twin suffix of the same coding
_CODINGS = {"raw": "", "gzip": ".gz", "bzip2": ".bz2", "xz": ".xz", "zstd": ".zstd"}


class N5Dataset:
    """An N5 dataset's metadata: ``shape`` and ``block`` (x first), ``dtype`` (native byte
    order), ``compression`` (a compressed-twin suffix, or "blosc"), ``attributes`` (all of
    them, for a resolution)."""

    def __init__(self, doc: dict, where: str) -> None:
        d = Doc(doc, where)
        self.where = where
        self.shape = tuple(d.integers("dimensions", lo=1))
        self.block = tuple(d.integers("blockSize", lo=1))
        if len(self.block) != len(self.shape) or not self.shape:
            raise SpecError(f"{where}: blockSize {list(self.block)} does not match "
                            f"dimensions {list(self.shape)}")
        kind = d.text("dataType")
        if kind not in DTYPES:
            raise SpecError(f"{where}: dataType {kind!r} is not one of {', '.join(DTYPES)}")
        self.stored = np.dtype(DTYPES[kind])
        self.dtype = self.stored.newbyteorder("=")
        compression = doc.get("compression", {"type": "raw"})
        name = compression.get("type") if isinstance(compression, dict) else None
        if name == "gzip" and compression.get("useZlib"):
            name = "zlib"
        if name not in _CODINGS and name != "blosc":
            raise SpecError(f"{where}: compression {compression!r} is not supported "
                            f"(raw, gzip, bzip2, xz, zstd, blosc)")
        self.compression = _CODINGS.get(str(name), "blosc")
        self.attributes = doc


def decode_block(data: bytes | bytearray | memoryview, dataset: N5Dataset, where: str
                 ) -> np.ndarray:
    """A block's values, shaped as its header says (x first, Fortran order), native order.

    Raises
    ------
    CorruptDataError
        A header cut short or larger than the dataset's block, an object block, values that
        do not decode or are not as many as the header says (naming ``where``).
    """
    view = memoryview(data)
    if len(view) < 4:
        raise CorruptDataError(f"{where}: an N5 block of {len(view)} bytes has no header")
    mode, ndim = (int(v) for v in np.frombuffer(view, ">u2", 2))
    if mode not in (0, 1):
        raise CorruptDataError(f"{where}: N5 block mode {mode} (only 0 and 1 hold arrays)")
    head = 4 + 4 * ndim + (4 if mode == 1 else 0)
    if ndim != len(dataset.shape) or len(view) < head:
        raise CorruptDataError(f"{where}: N5 block header of {ndim} dimensions in "
                               f"{len(view)} bytes; the dataset has {len(dataset.shape)}")
    dims = tuple(int(v) for v in np.frombuffer(view, ">u4", ndim, 4))
    if any(not 0 < n <= b for n, b in zip(dims, dataset.block)):
        raise CorruptDataError(f"{where}: N5 block of size {list(dims)}, beyond the "
                               f"blockSize {list(dataset.block)}")
    count = int(np.prod(dims))
    want = count * dataset.stored.itemsize
    body = view[head:]
    try:
        if dataset.compression == "blosc":
            from .errors import optional_module

            raw = optional_module("numcodecs", "blosc N5 blocks need", "zarr").Blosc() \
                .decode(bytes(body))
        else:
            raw = decompress_twin(body, dataset.compression, where, want) \
                if dataset.compression else body
    except CorruptDataError:
        raise
    except Exception as e:  # blosc's own errors
        raise CorruptDataError(f"{where}: N5 block does not decode ({e})") from None
    if len(raw) < want:
        raise CorruptDataError(f"{where}: N5 block holds {len(raw)} bytes of values, "
                               f"{want} expected for {list(dims)}")
    values = np.frombuffer(raw, dataset.stored, count)
    return values.reshape(dims, order="F").astype(dataset.dtype)
