"""A zstd frame that does not declare its content size (a streaming encoder's) decodes in
memory bounded by the caller's limit: 8 KiB of input inflating to 40 MiB, read with a limit
of 8 KiB, once grew the process by 34 MiB before it was refused. A prefix of a frame
(``zstd_prefix``, for reads of a chunk's first planes) is its first bytes, or None where it
cannot be had without decoding all of it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from peers import PEER_TIMEOUT

import ngshard
from ngshard.compression import zstd_decompress, zstd_prefix


def unsized(data: bytes) -> bytes:
    c = zstandard.ZstdCompressor(level=3).compressobj()
    return c.compress(data) + c.flush()


def test_unsized_frames_decode_as_before():
    data = bytes(range(256)) * 5000
    frame = unsized(data)
    assert zstandard.frame_content_size(frame) == -1
    assert zstd_decompress(frame, "x", len(data)) == data
    assert zstd_decompress(frame + zstandard.compress(b"tail"), "x", len(data) + 4) == \
        data + b"tail"
    with pytest.raises(ngshard.CorruptDataError, match="x: zstd data decodes past the 100"):
        zstd_decompress(frame, "x", 100)
    with pytest.raises(ngshard.CorruptDataError, match="x: .*truncated"):
        zstd_decompress(frame[:-5], "x", len(data))


def test_an_unsized_bomb_is_refused_in_memory_near_the_limit():
    code = textwrap.dedent("""
        import re, sys, ngshard
        from ngshard.compression import zstd_decompress
        def status(name):
            return int(re.search(rf"{name}:\\s+(\\d+)", open("/proc/self/status").read())[1])
        frame = sys.stdin.buffer.read()
        with open("/proc/self/clear_refs", "w") as f:  # the peak (VmHWM) starts again here
            f.write("5")
        before = status("VmRSS")
        try:
            zstd_decompress(frame, "x", 8192)
        except ngshard.CorruptDataError as e:
            print(len(frame), e)
        print((status("VmHWM") - before) // 1024)
    """)
    out = subprocess.run([sys.executable, "-c", code], input=unsized(bytes(40 << 20)),
                         capture_output=True, check=True,
                         timeout=PEER_TIMEOUT).stdout.decode().splitlines()
    assert int(out[0].split()[0]) < 8192 and "past the 8192 bytes" in out[0]
    assert int(out[1]) < 8, f"peak grew by {out[1]} MiB"


@given(st.binary(max_size=3 << 17), st.integers(0, 3 << 17), st.booleans())
@settings(max_examples=40, deadline=None)
def test_a_prefix_of_a_frame_is_its_first_bytes(data, n, checksum):
    n = min(n, len(data))
    frame = zstandard.ZstdCompressor(level=1, write_checksum=checksum).compress(data)
    assert zstd_prefix(frame, len(data), n) == data[:n]


def test_a_prefix_is_refused_where_it_cannot_be_had_so():
    data = bytes(range(256)) * 2048  # 512 KiB: four blocks
    frame = zstandard.compress(data)
    assert zstd_prefix(frame, len(data) + 1, 10) is None  # another size declared
    assert zstd_prefix(unsized(data), len(data), 10) is None  # none declared
    assert zstd_prefix(frame[:len(frame) // 2], len(data), len(data)) is None  # truncated
    assert zstd_prefix(b"\x28\xb5\x2f\xfd" + bytes(40), len(data), 10) is None  # damaged
    assert zstd_prefix(b"not zstd at all", len(data), 10) is None
    half = zstandard.compress(data[:1 << 18]) + zstandard.compress(data[1 << 18:])
    assert zstd_prefix(half, len(data), 10) is None  # two frames: the first declares 256 KiB
