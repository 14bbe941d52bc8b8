"""The two hash functions of the sharded format, for one key or a numpy array of keys.

murmurhash3_x86_128 is MurmurHash3_x86_128 with seed 0 over the 8 little-endian bytes of the
(preshifted) key, keeping the low 64 bits of the digest. For an 8-byte input the block loop
never runs, so the whole hash is a short sequence of uint32 lane operations that numpy can do on
millions of keys at once; single keys go through the mmh3 C extension instead.
"""

from __future__ import annotations

import mmh3
import numpy as np

from ..threads import WORKERS, pool

_U32 = np.uint32
_C1, _C2, _C3 = _U32(0x239B961B), _U32(0xAB0E9789), _U32(0x38B34AE5)
_F1, _F2 = _U32(0x85EBCA6B), _U32(0xC2B2AE35)
_MASK64 = (1 << 64) - 1
# Below this many keys the thread hand-off costs more than it saves.
PARALLEL_MIN = 1 << 18


def murmur_one(key: int) -> int:
    """Low 64 bits of MurmurHash3_x86_128(seed 0) of one uint64 key."""
    return mmh3.hash128(key.to_bytes(8, "little"), 0, False, signed=False) & _MASK64


def _rotl(x: np.ndarray, r: int, tmp: np.ndarray) -> None:
    np.right_shift(x, _U32(32 - r), out=tmp)
    np.left_shift(x, _U32(r), out=x)
    np.bitwise_or(x, tmp, out=x)


def _fmix(h: np.ndarray, tmp: np.ndarray) -> None:
    for mult in (_F1, _F2, None):
        np.right_shift(h, _U32(13 if mult is _F2 else 16), out=tmp)
        np.bitwise_xor(h, tmp, out=h)
        if mult is not None:
            np.multiply(h, mult, out=h)


def _murmur_block(keys: np.ndarray, out: np.ndarray) -> None:
    lanes = keys.view(_U32).reshape(-1, 2)
    h1 = np.multiply(lanes[:, 0], _C1)  # k1 = low 4 bytes
    h2 = np.multiply(lanes[:, 1], _C2)  # k2 = high 4 bytes
    tmp = np.empty_like(h1)
    _rotl(h1, 15, tmp)
    h1 *= _C2
    _rotl(h2, 16, tmp)
    h2 *= _C3
    # Finalization with length 8; h3 and h4 start equal and stay equal, so one array serves both.
    h1 ^= _U32(8)
    h2 ^= _U32(8)
    h1 += h2
    h1 += _U32(16)
    h2 += h1
    h3 = np.add(h1, _U32(8))
    _fmix(h1, tmp)
    _fmix(h2, tmp)
    _fmix(h3, tmp)
    h1 += h2
    h1 += h3
    h1 += h3
    h2 += h1
    res = out.view(_U32).reshape(-1, 2)
    res[:, 0] = h1
    res[:, 1] = h2


def murmur_array(keys: np.ndarray) -> np.ndarray:
    """Low 64 bits of MurmurHash3_x86_128(seed 0) of each uint64 key, vectorized."""
    keys = np.ascontiguousarray(keys, dtype="<u8").reshape(-1)
    out = np.empty(keys.shape, dtype=np.uint64)
    n = keys.size
    if n < PARALLEL_MIN:
        _murmur_block(keys, out)
        return out
    step = -(-n // WORKERS)
    futures = [pool().submit(_murmur_block, keys[i:i + step], out[i:i + step])
               for i in range(0, n, step)]
    for f in futures:
        f.result()
    return out
