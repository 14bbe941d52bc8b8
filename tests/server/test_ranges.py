"""Range header arithmetic (RFC 9110 section 14.1.2), every single-range form, pure."""

from __future__ import annotations

import pytest

from ngshard.server.ranges import Unsatisfiable, byte_range


@pytest.mark.parametrize(("header", "expected"), [
    ("bytes=0-9", (0, 10)),            # a-b
    ("bytes=5-5", (5, 6)),             # a-a: one byte
    ("bytes=90-", (90, 100)),          # a-: to the end
    ("bytes=-10", (90, 100)),          # suffix: the last n bytes
    ("bytes=-1000", (0, 100)),         # a suffix longer than the file: all of it
    ("bytes=95-1000", (95, 100)),      # a last position past the end is clipped
    ("bytes=99-99", (99, 100)),
    ("Bytes = 0 - 9", (0, 10)),        # unit case and optional whitespace
    ("bytes=0-9,", (0, 10)),           # an empty list element
    ("bytes=0-" + "9" * 40, (0, 100)),  # a huge number is just large
    (None, None),                      # no header
    ("items=0-9", None),               # another unit is ignored: 200
    ("bytes=0-1,5-6", None),           # several ranges are ignored: 200
])
def test_satisfiable_or_ignored(header, expected):
    assert byte_range(header, 100) == expected


@pytest.mark.parametrize("header", [
    "bytes=100-",      # starts at the end
    "bytes=100-200",
    "bytes=" + "9" * 40 + "-",
    "bytes=-0",        # a zero-length suffix
    "bytes=9-5",       # ends before it starts
    "bytes=-",
    "bytes=",
    "bytes=a-b",
    "bytes=1-2-3",
])
def test_unsatisfiable(header):
    with pytest.raises(Unsatisfiable):
        byte_range(header, 100)


def test_empty_file():
    """Nothing of an empty file can be selected by position; a suffix range takes it whole."""
    with pytest.raises(Unsatisfiable):
        byte_range("bytes=0-", 0)
    assert byte_range("bytes=-5", 0) is None
