"""Zarr data types and fill values: the names of the v3 core data types and the numpy dtype
strings of v2, and the JSON forms of a fill value (numbers, "NaN", "Infinity", "-Infinity",
"0x..." bit patterns, [real, imag] pairs for complex numbers, booleans). Pure."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import SpecError
from ..jsondoc import is_int, is_number, kind

#: The core data types of Zarr v3 and their native numpy dtypes.
V3_TYPES = {name: np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128")}


def v3_dtype(name: Any, where: str) -> np.dtype:
    """The numpy dtype (native byte order) of a v3 ``data_type``."""
    if isinstance(name, str) and name in V3_TYPES:
        return V3_TYPES[name]
    if isinstance(name, str) and name.startswith("r") and name[1:].isdigit():
        raise SpecError(f"{where}: data type {name!r} (raw bits) is not supported: ngshard "
                        f"reads the numeric and bool types of the core spec")
    raise SpecError(f"{where}: unsupported data type {name!r} (ngshard reads "
                    f"{', '.join(V3_TYPES)})")


def v3_name(dtype: Any) -> str:
    """The v3 ``data_type`` of a numpy dtype; SpecError for one v3 cannot name."""
    dtype = np.dtype(dtype)
    name = dtype.newbyteorder("=").name if dtype.kind != "b" else "bool"
    if name not in V3_TYPES:
        raise SpecError(f"dtype {dtype} has no Zarr v3 core data type (use one of "
                        f"{', '.join(V3_TYPES)})")
    return name


def v2_dtype(typestr: Any, where: str) -> np.dtype:
    """The numpy dtype of a v2 ``dtype`` ("<u2", "|b1", ">f8"...), in the byte order that
    the chunks store."""
    try:
        dtype = np.dtype(typestr) if isinstance(typestr, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biufc" or dtype.fields is not None:
        raise SpecError(f"{where}: unsupported v2 dtype {typestr!r} (ngshard reads bool, "
                        f"integer, float and complex arrays)")
    return dtype


# --- fill values ------------------------------------------------------------------------------

_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _float(value: Any, dtype: np.dtype, where: str) -> Any:
    """One float of a fill value: a number, a special name or a "0x..." bit pattern."""
    if isinstance(value, str) and value in _SPECIAL:
        return dtype.type(_SPECIAL[value])
    if isinstance(value, str) and value.startswith("0x"):
        try:
            raw = bytes.fromhex(value[2:])
        except ValueError:
            raw = b""
        if len(raw) != dtype.itemsize:
            raise SpecError(f"{where}: fill value {value!r} is not {dtype.itemsize} bytes of "
                            f"hex for a {dtype}")
        return np.frombuffer(raw, dtype.newbyteorder(">"))[0].astype(dtype)
    if is_number(value):
        try:
            return dtype.type(value)
        except OverflowError:  # an integer past the float range
            pass
    raise SpecError(f"{where}: fill value {kind(value)} is not a {dtype}")


def decode_fill(value: Any, dtype: np.dtype, where: str, zarr_format: int = 3) -> Any:
    """The numpy scalar of a JSON fill value (v2's null: zero, as zarr-python reads it)."""
    code = dtype.kind
    if value is None:
        if zarr_format == 2:
            return dtype.type(0)
        raise SpecError(f"{where}: fill_value is required")
    if code == "b":
        if isinstance(value, bool) or (zarr_format == 2 and value in (0, 1)):
            return np.bool_(value)
    elif code in "iu":
        # an integer, or a float of an integer's value (as both zarr-python and tensorstore
        # read them); never a string: v2's base64 is for raw (void) types, and would read
        # "Infinity" as arbitrary bytes
        if is_int(value) or (isinstance(value, float) and value.is_integer()):
            info = np.iinfo(dtype)
            if info.min <= int(value) <= info.max:
                return dtype.type(int(value))
    elif code == "f":
        return _float(value, dtype, where)
    elif code == "c":
        part = np.dtype(f"f{dtype.itemsize // 2}")
        if isinstance(value, list) and len(value) == 2:
            return dtype.type(complex(_float(value[0], part, where),
                                      _float(value[1], part, where)))
        if is_number(value):
            return _float(value, dtype, where)
    raise SpecError(f"{where}: fill value {kind(value)} is not a {dtype}")


def _float_json(value: float) -> Any:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def encode_fill(value: Any, dtype: np.dtype) -> Any:
    """The JSON form of a fill value (what zarr-python and tensorstore write)."""
    scalar = np.asarray(value).astype(dtype)[()]
    if dtype.kind == "b":
        return bool(scalar)
    if dtype.kind in "iu":
        return int(scalar)
    if dtype.kind == "f":
        return _float_json(float(scalar))
    return [_float_json(float(scalar.real)), _float_json(float(scalar.imag))]


def is_fill(chunk: np.ndarray, fill: Any) -> bool:
    """Whether every point of ``chunk`` is the fill value (NaN counting as equal to NaN, as
    zarr's "write empty chunks" test does)."""
    if chunk.dtype.kind in "fc" and np.isnan(fill):
        return bool(np.isnan(chunk).all())
    return bool((chunk == fill).all())
