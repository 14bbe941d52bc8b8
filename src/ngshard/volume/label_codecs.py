"""compresso and crackle chunks (segmentation labels), through their packages (the
``segmentation`` extra), as cloud-volume writes them: one channel, an (x, y, z) label array per
chunk, the chunk's clipped shape recorded in the stream's header. Pure functions, no I/O.

Both packages trust their input. Before either decodes, the header must declare exactly the
chunk's shape and label width, so memory stays bounded by the chunk, whatever a stream claims.
compresso goes further: its decoder writes and reads out of bounds on a damaged stream (a
crash, or memory corrupted), so every index it will follow is checked here first, in numpy
(:func:`_vet_compresso`): section sizes, the run-length coded windows, the boundary voxels'
connected components against the ids, and the location codes. crackle checks a CRC of its
header and of every slice itself.
"""

from __future__ import annotations

import math
import struct

import google_crc32c
import numpy as np

from ..errors import MissingDependencyError
from ..types import Blob
from .images import Corrupt

INSTALL = "pip install 'ngshard[segmentation]'"
ENCODINGS = ("compresso", "crackle")


def compresso():
    """The compresso module; MissingDependencyError naming the extra if it is missing."""
    try:
        import cc3d  # noqa: F401  (counting components, see _vet_compresso)
        import compresso
    except ImportError:
        raise MissingDependencyError(f"compresso chunks need the compresso and "
                                     f"connected-components-3d packages: {INSTALL}") from None
    return compresso


def crackle():
    """The crackle module (package crackle-codec); MissingDependencyError if missing."""
    try:
        import crackle
    except ImportError:
        raise MissingDependencyError(f"crackle chunks need the crackle-codec package: "
                                     f"{INSTALL}") from None
    return crackle


def _labels(array: np.ndarray) -> np.ndarray:
    if array.shape[3] != 1:
        raise Corrupt(f"compresso and crackle chunks hold one channel, not {array.shape[3]}")
    return array[..., 0]


def encode_labels(array: np.ndarray, encoding: str) -> bytes:
    """An (x, y, z, 1) array as a compresso or crackle stream."""
    labels = np.asfortranarray(_labels(array))  # as cloud-volume hands them: one layout
    if encoding == "compresso":
        return bytes(compresso().compress(labels))
    return bytes(crackle().compress(labels))


def decode_labels(data: Blob, encoding: str, shape: tuple[int, ...],
                  dt: np.dtype) -> np.ndarray:
    """A compresso or crackle stream as an (x, y, z, 1) array of ``shape``; Corrupt for a
    stream that is not one, declares another shape or label type, or does not decode."""
    data = bytes(data)
    if shape[3] != 1:
        raise Corrupt(f"{encoding} chunks hold one channel, not {shape[3]}")
    if encoding == "compresso":
        module = compresso()
        _vet_compresso(data, shape[:3], dt)
        try:
            out = module.decompress(data)
        except (module.DecodeError, ValueError, RuntimeError) as e:
            raise Corrupt(f"undecodable compresso stream ({e})") from None
    else:
        module = crackle()
        _vet_crackle(module, data, shape[:3], dt)
        try:
            out = module.decompress(data, parallel=1)
        except (module.FormatError, ValueError, RuntimeError) as e:
            raise Corrupt(f"undecodable crackle stream ({e})") from None
    if out.shape != tuple(shape[:3]) or out.dtype != dt:
        raise Corrupt(f"{encoding} stream decoded to {out.shape} {out.dtype}, expected "
                      f"{tuple(shape[:3])} {dt.name}")
    return out[..., None]


def _vet_crackle(module, data: bytes, shape: tuple[int, ...], dt: np.dtype) -> None:
    """Corrupt unless the header declares the chunk's shape and labels, the sections fit the
    stream exactly, and (version 1) the CRC32C of the slice index and of the labels match;
    crackle checks the header's CRC8, and each decoded slice against its CRC, itself."""
    try:
        h = module.header(data)  # checks the magic, version and the header's CRC
    except (module.FormatError, ValueError, IndexError) as e:
        raise Corrupt(f"not a crackle stream ({e})") from None
    if (h.sx, h.sy, h.sz) != tuple(shape) or h.data_width != dt.itemsize or h.signed:
        raise Corrupt(f"crackle stream of {(h.sx, h.sy, h.sz)} {'' if h.signed else 'u'}int"
                      f"{8 * h.data_width} labels, expected {tuple(shape)} {dt.name}")
    v1 = h.format_version >= 1
    at_index = 29 if v1 else 24
    at_labels = at_index + 4 * (h.sz + v1)
    markov = (4 ** min(h.markov_model_order, 15) * 5 + 4) // 8 if h.markov_model_order else 0
    at_codes = at_labels + h.num_label_bytes + markov
    crcs = 4 * (h.sz + 1) if v1 else 0
    end = len(data) - crcs
    if at_codes > end or \
            at_codes + int(np.frombuffer(data, "<u4", h.sz, at_index).sum()) != end:
        raise Corrupt(f"crackle stream whose sections do not add up to its {len(data)} bytes")
    if v1 and (_crc(data, at_index, at_labels - 4) != _crc_at(data, at_labels - 4) or
               _crc(data, at_labels, at_labels + h.num_label_bytes) != _crc_at(data, end)):
        raise Corrupt("crackle stream whose slice index or labels fail their CRC32C")


def _crc(data: bytes, start: int, end: int) -> int:
    return google_crc32c.value(data[start:end])


def _crc_at(data: bytes, at: int) -> int:
    return int.from_bytes(data[at:at + 4], "little")


# --- compresso -------------------------------------------------------------------------------
# The stream (little endian): a 36-byte header ("cpso", version, label width, sx, sy, sz
# uint16, x/y/z step uint8, id_size uint64, value_size uint32, location_size uint64,
# connectivity), then ids (id_size labels), window values (value_size windows), locations
# (location_size labels), run-length coded windows, and for version 1 two per-slice indices.

_HEAD = struct.Struct("<4sBBHHHBBBQIQB")


def _vet_compresso(data: bytes, shape: tuple[int, ...], dt: np.dtype) -> None:
    """Corrupt unless decoding ``data`` stays within the arrays compresso allocates."""
    if len(data) < _HEAD.size:
        raise Corrupt(f"compresso stream of {len(data)} bytes, shorter than its header")
    (magic, version, width, sx, sy, sz, xs, ys, zs, n_ids, n_values, n_locations,
     connectivity) = _HEAD.unpack_from(data)
    if magic != b"cpso" or version > 1 or connectivity not in (4, 6):
        raise Corrupt("not a compresso stream (bad magic, version or connectivity)")
    if (sx, sy, sz) != tuple(shape) or width != dt.itemsize or dt.kind != "u":
        raise Corrupt(f"compresso stream of {(sx, sy, sz)} uint{8 * width} labels, expected "
                      f"{tuple(shape)} {dt.name}")
    step = xs * ys * zs
    if min(xs, ys, zs) < 1 or step > 64:
        raise Corrupt(f"compresso stream with window {(xs, ys, zs)}: not 1 to 64 voxels")
    if sx * sy * sz == 0:
        return
    window = 1 if step <= 8 else 2 if step <= 16 else 4 if step <= 32 else 8
    worst = 2 * sx * sy
    index = 1 if worst < 255 else 2 if worst < 65535 else 4
    at_values = _HEAD.size + n_ids * width
    at_locations = at_values + n_values * window
    at_windows = at_locations + n_locations * width
    tail = 2 * sz * index if version == 1 else 0
    if at_windows + tail > len(data):
        raise Corrupt(f"compresso stream declares more ids, windows and locations than its "
                      f"{len(data)} bytes hold")
    n_windows = (len(data) - tail - at_windows) // window
    if version == 1:  # the locations of slice 0 must start at 0
        at_z = at_windows + n_windows * window + sz * index
        if int.from_bytes(data[at_z:at_z + index], "little"):
            raise Corrupt("compresso stream whose location index does not start at 0")
    wtype = np.dtype(f"<u{window}")
    values = np.frombuffer(data, wtype, n_values, at_values).astype(np.uint64)
    boundary = _boundaries(np.frombuffer(data, wtype, n_windows, at_windows), values,
                           (sx, sy, sz), (xs, ys, zs))
    components = _count_components(~boundary, connectivity)
    if components != n_ids:
        raise Corrupt(f"compresso stream with {n_ids} ids for {components} components")
    locations = np.frombuffer(data, f"<u{width}", n_locations, at_locations)
    _vet_locations(boundary, locations, connectivity)


def _boundaries(rle: np.ndarray, values: np.ndarray, shape: tuple[int, int, int],
                steps: tuple[int, int, int]) -> np.ndarray:
    """The boundary voxels, (x, y, z) bool, decoded from the run-length coded windows (odd:
    skip ``v >> 1`` windows; even: window value ``v >> 1``), each checked to index a
    window value and to fall inside the grid of windows."""
    counts = [-(-n // s) for n, s in zip(shape, steps)]
    blocks = counts[0] * counts[1] * counts[2]
    v = rle.astype(np.uint64)
    skip = (v & np.uint64(1)).astype(bool)
    step = np.where(skip, v >> np.uint64(1), np.uint64(1))
    if len(v) and int(step.max()) > blocks:
        raise Corrupt("compresso windows skip past the end of the volume")
    after = np.cumsum(step.astype(np.int64))
    at, which = after[~skip] - 1, v[~skip] >> np.uint64(1)
    if len(at) and int(at.max()) >= blocks:
        raise Corrupt("compresso windows run past the end of the volume")
    if not len(values):  # compresso reads no window then: no boundary
        return np.zeros(shape, bool)
    if len(which) and int(which.max()) >= len(values):
        raise Corrupt("compresso window refers to a window value it does not hold")
    windows = np.zeros(blocks, np.int64)
    windows[at] = which.astype(np.int64)
    # bit x + xs * (y + ys * z) of a window is voxel (x, y, z) of its block; blocks run over
    # x, then y, then z: unpack each window's bits, then lay the blocks out in space
    bits = np.unpackbits(values[windows].astype("<u8").view(np.uint8).reshape(blocks, 8),
                         axis=1, bitorder="little")[:, :math.prod(steps)]
    nx, ny, nz = counts
    xs, ys, zs = steps
    grid = bits.view(bool).reshape(nz, ny, nx, zs, ys, xs).transpose(0, 3, 1, 4, 2, 5)
    # laid out z, y, x (C order): the (x, y, z) array is its Fortran-ordered transpose
    return grid.reshape(nz * zs, ny * ys, nx * xs).T[:shape[0], :shape[1], :shape[2]]


def _count_components(inside: np.ndarray, connectivity: int) -> int:
    """Connected components of the non-boundary voxels: 4-connected in each z slice (the
    slices counted apart) or 6-connected in 3-D, as compresso labels them."""
    import cc3d

    if connectivity == 6:
        return int(cc3d.connected_components(inside, connectivity=6, return_N=True)[1])
    sx, sy, sz = inside.shape
    # the slices side by side along y, a row of boundary between them
    stacked = np.zeros((sx, sy + 1, sz), bool, order="F")
    stacked[:, :sy] = inside
    flat = stacked.reshape(sx, (sy + 1) * sz, order="F")
    return int(cc3d.connected_components(flat, connectivity=4, return_N=True)[1])


def _vet_locations(boundary: np.ndarray, locations: np.ndarray, connectivity: int) -> None:
    """The boundary voxels no neighbour labels each take a location code (6: the next entry
    is the label itself); there must be enough, and none may copy the label of a voxel past
    the last slice (compresso does not check that one)."""
    b = boundary
    needs = b.copy(order="K")
    needs[1:] &= b[:-1]
    needs[:, 1:] &= b[:, :-1]
    if connectivity == 6:
        needs[:, :, 1:] &= b[:, :, :-1]
    voxels = np.flatnonzero(needs.ravel(order="F"))
    if not len(voxels):
        return
    is6 = locations == 6
    n = np.arange(len(locations))
    starts = is6 & ~np.r_[False, is6[:-1]]
    run_start = np.maximum.accumulate(np.where(starts, n, 0))
    literal = np.zeros(len(locations), bool)  # the label after a code 6
    after = np.flatnonzero(~is6[1:] & is6[:-1]) + 1
    literal[after] = (after - run_start[after - 1]) % 2 == 1
    codes = np.flatnonzero((is6 & ((n - run_start) % 2 == 0)) | (~is6 & ~literal))
    if len(codes) and codes[-1] == len(locations) - 1 and is6[-1]:
        codes = codes[:-1]  # a code 6 without its label
    if len(codes) < len(voxels):
        raise Corrupt(f"compresso stream has {len(codes)} location codes for "
                      f"{len(voxels)} boundary voxels")
    last = voxels // (b.shape[0] * b.shape[1]) == b.shape[2] - 1
    if (locations[codes[:len(voxels)]][last] == 5).any():
        raise Corrupt("compresso location refers past the last slice")
