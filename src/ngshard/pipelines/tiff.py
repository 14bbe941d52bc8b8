"""TIFF stacks in: a glob or a folder of 2-D sections (one file per z, in natural order of
their names) or one multi-page (or OME-) TIFF (one page per z), read with ``tifffile``, into
a sharded precomputed layer with its pyramid. A task reads only the sections of its box, one
slab at a time: memory follows the task, never the stack.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import NotFoundError, SpecError, optional_module

_SUFFIXES = (".tif", ".tiff")


def _tifffile():
    return optional_module("tifffile", "TIFF stacks need", "tiff")


def is_tiff(src: str | os.PathLike) -> bool:
    """Whether ``src`` names a TIFF stack: a glob, a folder of TIFF files, or a TIFF file."""
    text = os.fspath(src)
    if "://" in text and not text.startswith("file://"):
        return False
    path = text.removeprefix("file://")
    if glob.has_magic(path):
        return True
    if os.path.isdir(path):
        return not os.path.exists(os.path.join(path, "info")) and \
            any(n.lower().endswith(_SUFFIXES) for n in os.listdir(path))
    return path.lower().endswith(_SUFFIXES)


def _natural(name: str) -> list:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def stack_files(src: str | os.PathLike) -> tuple[str, ...]:
    """The files of a stack, in z order.

    Raises
    ------
    NotFoundError
        Nothing matches.
    """
    path = os.fspath(src).removeprefix("file://")
    if os.path.isdir(path):
        names = [os.path.join(path, n) for n in os.listdir(path)
                 if n.lower().endswith(_SUFFIXES)]
    elif glob.has_magic(path):
        names = glob.glob(path)
    else:
        names = [path] if os.path.isfile(path) else []
    if not names:
        raise NotFoundError(f"{path}: no TIFF files there")
    return tuple(sorted(names, key=lambda n: _natural(os.path.basename(n))))


@dataclass(frozen=True)
class TiffSource:
    """A stack of sections: ``files`` one per z, or one file of ``pages`` pages."""

    files: tuple[str, ...]
    pages: bool

    def read(self, lo, hi) -> np.ndarray:
        """The voxels [lo, hi) as (x, y, z, channel)."""
        x0, y0, z0 = (int(v) for v in lo)
        x1, y1, z1 = (int(v) for v in hi)
        sections = [_section(self, z)[y0:y1, x0:x1] for z in range(z0, z1)]
        data = np.stack(sections, axis=-1)  # (y, x, c, z)
        return data.transpose(1, 0, 3, 2)


def _section(source: TiffSource, z: int) -> np.ndarray:
    """Section ``z`` as (y, x, channel)."""
    tifffile = _tifffile()
    if source.pages:
        page = _opened(source.files[0]).pages[z]
        where = f"{source.files[0]} page {z}"
    else:
        page = None
        where = source.files[z]
    try:
        image = page.asarray() if page is not None else tifffile.imread(where)
    except (OSError, ValueError, IndexError) as e:
        raise SpecError(f"{where}: not a readable TIFF section ({e})") from None
    if image.ndim == 2:
        image = image[..., None]
    if image.ndim != 3:
        raise SpecError(f"{where}: a section of shape {image.shape}, not (y, x[, samples])")
    return image


@functools.lru_cache(maxsize=4)
def _opened(path: str):
    return _tifffile().TiffFile(path)


def _ome_resolution(tif) -> tuple[float, float, float] | None:
    """PhysicalSizeX/Y/Z of an OME-TIFF in nm (units: um unless said otherwise)."""
    if not tif.is_ome:
        return None
    try:
        root = ET.fromstring(tif.ome_metadata)
    except ET.ParseError:
        return None
    pixels = next((e for e in root.iter() if e.tag.endswith("Pixels")), None)
    if pixels is None:
        return None
    scale = {"nm": 1.0, "µm": 1e3, "um": 1e3, "mm": 1e6, "m": 1e9}
    out = []
    for a in "XYZ":
        size = pixels.get(f"PhysicalSize{a}")
        unit = pixels.get(f"PhysicalSize{a}Unit", "µm")
        if size is None or unit not in scale:
            return None
        out.append(float(size) * scale[unit])
    return (out[0], out[1], out[2])


def open_stack(src: str | os.PathLike) -> tuple[TiffSource, tuple[int, int, int], int,
                                                  np.dtype, Any]:
    """A stack's source, size (x, y, z), channels, dtype and OME voxel size (nm) or None."""
    files = stack_files(src)
    tif = _opened(files[0])
    pages = len(files) == 1 and len(tif.pages) > 1
    series = tif.series[0]
    if pages and not re.fullmatch(r"[ZIQ]YXS?", series.axes):
        raise SpecError(f"{files[0]}: axes {series.axes}: a stack needs one page per z "
                        f"(ZYX, or ZYXS for samples)")
    first = _section(TiffSource(files, pages), 0)
    depth = len(tif.pages) if pages else len(files)
    y, x, c = first.shape
    return TiffSource(files, pages), (x, y, depth), c, first.dtype, _ome_resolution(tif)


def tiff_to_precomputed(src: str, dst: str, **options: Any):
    """The plan of a TIFF stack's conversion (see :func:`ngshard.convert`; ``options`` as
    :func:`.arrays_in.to_precomputed_plan` takes them)."""
    from .arrays_in import to_precomputed_plan

    opened = open_stack(src)
    return to_precomputed_plan(src, dst, opened, [opened[0].files[0], len(opened[0].files)],
                               **options)
