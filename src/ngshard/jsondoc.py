"""Metadata documents (``info``, ``zarr.json``, ``.zarray``, ``.zattrs``, manifests, specs):
the one place JSON from storage is parsed, and the typed accessors every metadata parser reads
it through, so any wrong type or range becomes a SpecError (or CorruptDataError) naming the
file and the member, never an AttributeError, TypeError or OverflowError further on.

Nesting: :func:`parse_json` never recurses deeper than :data:`~ngshard.limits.MAX_JSON_DEPTH`.
Python's parser would raise RecursionError past about a thousand levels; tensorstore reads a
``zarr.json`` whose unused attribute nests 100,000 deep, and so does ngshard: a subtree nested
past the limit is kept as :class:`DeepJSON`, its text unparsed (and unchecked), which no
accessor takes for a value (a parser that needs it says the member is nested too deeply) and
:func:`dump_json` writes back as it was read.
"""

from __future__ import annotations

import json
import math
import re
import secrets
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .errors import NgShardError, SpecError
from .limits import MAX_JSON_DEPTH

_MISSING: Any = object()
#: The largest integer most numeric members may hold (sizes, offsets: int64).
INT64_MAX = (1 << 63) - 1


class DeepJSON:
    """A JSON value nested past MAX_JSON_DEPTH levels: its text as read, not parsed."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeepJSON) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"<JSON nested more than {MAX_JSON_DEPTH} levels, {len(self.text)} characters>"


def parse_json(raw: bytes | bytearray | memoryview | str, where: str, *,
               error: type[NgShardError] = SpecError) -> Any:
    """The value of a JSON document; ``error`` (SpecError) naming ``where`` for text that is
    not JSON (or not UTF-8, or holds an integer of more than 4300 digits). Subtrees nested
    past MAX_JSON_DEPTH come back as :class:`DeepJSON`."""
    if isinstance(raw, (bytearray, memoryview)):
        raw = bytes(raw)
    try:
        doc = json.loads(raw)
    except RecursionError:
        return _parse_deep(raw, where, error)
    except (ValueError, UnicodeDecodeError) as e:  # ValueError: also 4300+ digit integers
        raise error(f"{where}: not valid JSON ({_short(e)})") from None
    if _depth(doc) > MAX_JSON_DEPTH:
        return _parse_deep(raw, where, error)
    return doc


def _short(e: Exception) -> str:
    text = str(e)
    return text if len(text) < 200 else text[:200] + "..."


def _depth(doc: Any) -> int:
    """Nesting depth of parsed JSON (without recursion), at most MAX_JSON_DEPTH + 1."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        value, depth = todo.pop()
        deepest = max(deepest, depth)
        if depth > MAX_JSON_DEPTH:
            break
        children = value.values() if isinstance(value, dict) else \
            value if isinstance(value, list) else ()
        todo += [(c, depth + 1) for c in children if isinstance(c, (dict, list))]
    return deepest


def _parse_deep(raw: bytes | str, where: str, error: type[NgShardError]) -> Any:
    """Parse with every subtree that opens past MAX_JSON_DEPTH levels cut out (found by one
    vectorized pass over the bytes: strings masked, brackets counted), each replaced by a
    marker string, and the markers then turned into DeepJSON."""
    data = raw.encode() if isinstance(raw, str) else raw
    a = np.frombuffer(data, np.uint8)
    index = np.arange(len(a))
    backslash = a == 0x5C
    # a quote ends or starts a string unless an odd run of backslashes precedes it
    last_plain = np.maximum.accumulate(np.where(backslash, -1, index))
    quotes = np.flatnonzero(a == 0x22)
    before = quotes - 1
    run = np.where(before >= 0, before - last_plain[np.maximum(before, 0)], 0)
    toggles = np.zeros(len(a), np.int64)
    toggles[quotes[run % 2 == 0]] = 1
    outside = np.cumsum(toggles) % 2 == 0
    opens = ((a == 0x5B) | (a == 0x7B)) & outside
    closes = ((a == 0x5D) | (a == 0x7D)) & outside
    depth = np.cumsum(opens.astype(np.int64) - closes)
    cut_open = np.flatnonzero(opens & (depth == MAX_JSON_DEPTH + 1))
    cut_close = np.flatnonzero(closes & (depth == MAX_JSON_DEPTH))
    if len(cut_open) != len(cut_close) or (cut_close < cut_open).any():
        raise error(f"{where}: not valid JSON (unbalanced brackets)")
    nonce = secrets.token_hex(8)
    pieces, texts, at = [], [], 0
    for i, (start, end) in enumerate(zip(cut_open.tolist(), cut_close.tolist())):
        try:
            texts.append(data[start:end + 1].decode())
        except UnicodeDecodeError as e:
            raise error(f"{where}: not valid JSON ({e})") from None
        pieces += [data[at:start], f'"\\u0000{nonce}:{i}"'.encode()]
        at = end + 1
    pieces.append(data[at:])
    try:
        doc = json.loads(b"".join(pieces))
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise error(f"{where}: not valid JSON ({_short(e)})") from None
    marker = f"\x00{nonce}:"

    def deep(value: Any) -> Any:
        if isinstance(value, str) and value.startswith(marker):
            return DeepJSON(texts[int(value[len(marker):])])
        return value

    doc = deep(doc)
    todo = [doc]
    while todo:
        node = todo.pop()
        items = node.items() if isinstance(node, dict) else \
            enumerate(node) if isinstance(node, list) else ()
        for key, value in list(items):
            node[key] = deep(value)
            if isinstance(value, (dict, list)):
                todo.append(value)
    return doc


def dump_json(doc: Any, **kwargs: Any) -> str:
    """``json.dumps(doc, **kwargs)``, with every DeepJSON written back as the text it was
    read from."""
    nonce, texts = secrets.token_hex(8), []

    def default(value: Any) -> Any:
        if isinstance(value, DeepJSON):
            texts.append(value.text)
            return f"\x00{nonce}:{len(texts) - 1}"
        raise TypeError(f"{type(value).__name__} is not JSON serializable")

    text = json.dumps(doc, default=default, **kwargs)
    if texts:
        text = re.sub(rf'"\\u0000{nonce}:(\d+)"', lambda m: texts[int(m.group(1))], text)
    return text


# --- typed accessors --------------------------------------------------------------------------

def kind(value: Any) -> str:
    """What a JSON value is, for messages."""
    if isinstance(value, DeepJSON):
        return f"JSON nested more than {MAX_JSON_DEPTH} levels deep"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}...({len(text)} characters)"


def is_int(value: Any) -> bool:
    """A JSON integer (booleans are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """A JSON number (booleans are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Doc:
    """A JSON object of a metadata file, read member by member through accessors that check
    type and range. Every failure is ``error`` (SpecError by default) naming the file and the
    member's path in it (``scales[0].size``).

    Parameters
    ----------
    value
        The parsed JSON; anything but an object is an error at once.
    where
        The file, for messages.
    path
        The path of ``value`` in the file ("" for the whole document).
    error
        The class raised.
    """

    __slots__ = ("value", "where", "path", "error")

    def __init__(self, value: Any, where: str, path: str = "", *,
                 error: type[NgShardError] = SpecError) -> None:
        self.where, self.path, self.error = where, path, error
        if not isinstance(value, dict):
            raise self.fail(f"must be a JSON object, got {kind(value)}")
        self.value: dict = value

    # --- messages ---------------------------------------------------------------------------

    def member(self, key: str | int) -> str:
        """The path of a member (``key`` a name, ``name[i]``, or an index), for messages."""
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def fail(self, message: str, key: str | int | None = None) -> NgShardError:
        """The error to raise: ``where: path.key message``."""
        at = self.path if key is None else self.member(key)
        return self.error(f"{self.where}: {at + ' ' if at else ''}{message}")

    # --- raw access -------------------------------------------------------------------------

    def __contains__(self, key: str) -> bool:
        return key in self.value

    def keys(self) -> Any:
        return self.value.keys()

    def get(self, key: str, default: Any = None) -> Any:
        """The raw member (unchecked), ``default`` if absent."""
        return self.value.get(key, default)

    def _value(self, key: str, default: Any) -> tuple[bool, Any]:
        """(present, the member or ``default``); absent without a default is an error. An
        optional member (one with a default) that is null counts as absent."""
        value = self.value.get(key)
        if value is not None or (key in self.value and default is _MISSING):
            return True, value
        if default is _MISSING:
            raise self.fail("is missing", key)
        return False, default

    # --- typed members ----------------------------------------------------------------------

    def obj(self, key: str, default: Any = _MISSING) -> Doc | Any:
        """A member that must be an object, as a Doc (``default``, returned as it is, when
        absent)."""
        present, value = self._value(key, default)
        if not present:
            return default
        return Doc(value, self.where, self.member(key), error=self.error)

    def text(self, key: str, default: Any = _MISSING, *, choices: Sequence[str] | None = None
             ) -> Any:
        """A string member (one of ``choices`` where given)."""
        present, value = self._value(key, default)
        if not present:
            return default
        if not isinstance(value, str) or (choices is not None and value not in choices):
            want = f"one of {', '.join(map(repr, choices))}" if choices else "a string"
            raise self.fail(f"must be {want}, got {kind(value)}", key)
        return value

    def flag(self, key: str, default: Any = _MISSING) -> Any:
        present, value = self._value(key, default)
        if not present:
            return default
        if not isinstance(value, bool):
            raise self.fail(f"must be true or false, got {kind(value)}", key)
        return value

    def integer(self, key: str, default: Any = _MISSING, *, lo: int | None = None,
                hi: int | None = None) -> Any:
        """An integer member in ``[lo, hi]``."""
        present, value = self._value(key, default)
        return check_int(value, lo, hi, self, key) if present else default

    def number(self, key: str, default: Any = _MISSING, *, lo: float | None = None,
               hi: float | None = None) -> Any:
        """A finite number member in ``[lo, hi]``, as a float."""
        present, value = self._value(key, default)
        return check_number(value, lo, hi, self, key) if present else default

    def array(self, key: str, default: Any = _MISSING, *, length: int | None = None,
              least: int = 0) -> Any:
        """A list member (its items unchecked) of ``length`` items, or at least ``least``."""
        return self._array(key, default, length, least)[1]

    def _array(self, key: str, default: Any, length: int | None = None, least: int = 0
               ) -> tuple[bool, Any]:
        present, value = self._value(key, default)
        if not present:
            return False, default
        if not isinstance(value, list) or (length is not None and len(value) != length) or \
                len(value) < least:
            want = f"a list of {length}" if length is not None else \
                f"a list of at least {least}" if least else "a list"
            raise self.fail(f"must be {want}, got {kind(value)}", key)
        return True, value

    def integers(self, key: str, default: Any = _MISSING, *, length: int | None = None,
                 least: int = 0, lo: int | None = None, hi: int | None = None) -> Any:
        """A list of integers in ``[lo, hi]``, as a tuple."""
        return self._checked_items(key, default, length, least, check_int, lo, hi)

    def numbers(self, key: str, default: Any = _MISSING, *, length: int | None = None,
                least: int = 0, lo: float | None = None, hi: float | None = None) -> Any:
        """A list of finite numbers in ``[lo, hi]``, as a tuple of floats."""
        return self._checked_items(key, default, length, least, check_number, lo, hi)

    def _checked_items(self, key: str, default: Any, length: int | None, least: int,
                       check: Any, lo: Any, hi: Any) -> Any:
        present, items = self._array(key, default, length, least)
        if not present:
            return default
        return tuple(check(v, lo, hi, self, key, i) for i, v in enumerate(items))

    def objects(self, key: str, default: Any = _MISSING, *, least: int = 0) -> Any:
        """A list of objects, as Docs."""
        present, items = self._array(key, default, least=least)
        if not present:
            return default
        at = self.member(key)
        return [Doc(v, self.where, f"{at}[{i}]", error=self.error) for i, v in enumerate(items)]

    def texts(self, key: str, default: Any = _MISSING) -> Any:
        """A list of strings."""
        present, items = self._array(key, default)
        if not present:
            return default
        for i, v in enumerate(items):
            if not isinstance(v, str):
                raise self.fail(f"must be a string, got {kind(v)}", f"{key}[{i}]")
        return items

    def __iter__(self) -> Iterator[str]:
        return iter(self.value)


def check_int(value: Any, lo: int | None, hi: int | None, doc: Doc, key: str | int,
              index: int | None = None) -> int:
    """``value`` if it is an integer in ``[lo, hi]``, else ``doc``'s error for ``key``."""
    if not is_int(value) or (lo is not None and value < lo) or (hi is not None and value > hi):
        return _range_error(value, lo, hi, "an integer", doc, key, index)
    return value


def check_number(value: Any, lo: float | None, hi: float | None, doc: Doc, key: str | int,
                 index: int | None = None) -> float:
    """``value`` as a float if it is a finite number in ``[lo, hi]``."""
    try:
        number = float(value) if is_number(value) else math.nan
    except OverflowError:  # an integer past the float range
        number = math.nan
    if not math.isfinite(number) or (lo is not None and number < lo) or \
            (hi is not None and number > hi):
        return _range_error(value, lo, hi, "a finite number", doc, key, index)
    return number


def _range_error(value: Any, lo: Any, hi: Any, noun: str, doc: Doc, key: str | int,
                 index: int | None) -> Any:
    bounds = f" in [{lo}, {hi}]" if lo is not None and hi is not None else \
        f" >= {lo}" if lo is not None else f" <= {hi}" if hi is not None else ""
    at = key if index is None else f"{key}[{index}]"
    raise doc.fail(f"must be {noun}{bounds}, got {kind(value)}", at)
