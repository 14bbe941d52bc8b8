"""compressed_segmentation encoding: (x, y, z, channels) labels -> bytes, by the compiled
kernel (``_cseg.c``, one channel at a time, without the GIL; the layout is in the package
docstring). Each block's table holds its distinct labels in ascending order; equal tables are
stored once (at the first block that has it), as the reference encoder shares them."""

from __future__ import annotations

import numpy as np

from ..._kernels import cseg_encode
from ...errors import SpecError


def encode(array: np.ndarray, bs: tuple[int, int, int]) -> bytes:
    """Encode an (x, y, z, channels) uint32 or uint64 array with block size ``bs``."""
    array = np.asarray(array, array.dtype.newbyteorder("="))
    if array.shape[3] == 1:  # the common case: one channel, at word 1 (written by the kernel)
        return _encode_channel(array[..., 0], bs, b"\x01\x00\x00\x00")
    channels = [_encode_channel(array[..., ch], bs) for ch in range(array.shape[3])]
    sizes = np.array([len(w) // 4 for w in channels], np.int64)
    offsets = len(channels) + np.cumsum(sizes) - sizes
    if offsets[-1] + sizes[-1] >= 2**32:
        raise SpecError("compressed_segmentation chunk too large (channel offsets over 32 bits)")
    return b"".join([offsets.astype("<u4").tobytes(), *channels])


def _encode_channel(vol: np.ndarray, bs: tuple[int, int, int], head: bytes = b"") -> bytes:
    """One (x, y, z) channel -> ``head``, then its words: block headers, packed indices,
    tables."""
    words = cseg_encode(vol, (int(bs[0]), int(bs[1]), int(bs[2])), head)
    if words is None:
        raise SpecError(f"compressed_segmentation cannot encode this {vol.dtype.name} chunk "
                        f"with block size {tuple(bs)}: its offsets overflow 24 bits")
    return words
