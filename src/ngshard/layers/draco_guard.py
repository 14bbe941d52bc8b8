"""Draco fragments decoded with memory bounded by their size.

A Draco mesh declares its vertex and face counts at its start, and the decoder sizes its
tables from them before it reads any further: a fragment of 230 bytes that claims 20 million
faces has it touch 460 MiB before it fails, and the format allows 715 million. No ratio of
faces to bytes is a hard limit (rANS codes a perfectly predicted symbol in almost no bits: a
regular grid of 4.5 million faces encodes in 7 KB with the valence edgebreaker), so:

1. the counts are read from every fragment's head, vectorized over a batch (the bitstream
   2.2 layout that every current encoder writes: ``DRACO``, major, minor, encoder type,
   method, uint16 flags; sequential: varint faces, varint points; edgebreaker: traversal
   byte, varint vertices, varint faces);
2. fragments declaring at most :data:`DRACO_RATIO` of either per byte, plus
   :data:`DRACO_SLACK`, decode in this process: Draco needs about 70 bytes per face, so at
   most about 1 KiB per byte of fragment plus 300 KiB (segmentation meshes hold under one
   face per byte; a regular grid up to 4 at Draco's faster settings, hundreds at
   compression level 7 and up);
3. the others, and any head this does not read (other versions, metadata, point clouds),
   decode in a child process under an address-space limit of :data:`DRACO_ISOLATED_BYTES`: an
   outlier costs a process, never this one's memory (and a decoder crash kills the child).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from collections.abc import Callable, Sequence

import numpy as np

from ..errors import MissingDependencyError
from ..limits import DRACO_ISOLATED_BYTES, DRACO_RATIO, DRACO_SLACK
from ..types import Blob

HEAD = 24  # bytes of a fragment's start holding its header and counts
_MAGIC = np.frombuffer(b"DRACO", np.uint8)


def draco():
    """The DracoPy module (the ``meshes`` extra)."""
    try:
        import DracoPy
    except ImportError:
        raise MissingDependencyError("multi-resolution meshes need DracoPy: pip install "
                                     "'ngshard[meshes]'") from None
    return DracoPy


def heads(data: Blob, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``(n, HEAD)`` uint8: the first bytes of each fragment ``data[begins[i]:ends[i]]``,
    zero past its end (or the data's)."""
    buf = np.frombuffer(data, np.uint8)
    begins, ends = np.asarray(begins, np.int64), np.asarray(ends, np.int64)
    at = begins[:, None] + np.arange(HEAD)
    inside = (at < np.minimum(ends, len(buf))[:, None])
    return np.where(inside, buf[np.where(inside, at, 0)] if len(buf) else 0, 0).astype(np.uint8)


def _varint(h: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, position after it, whether it ended within 5 bytes) of the LEB128 varint of
    each row at ``at``."""
    rows = np.arange(len(h))
    value = np.zeros(len(h), np.int64)
    end = at.copy()
    done = np.zeros(len(h), bool)
    for i in range(5):
        b = h[rows, np.minimum(at + i, HEAD - 1)].astype(np.int64)
        live = ~done
        value[live] |= (b[live] & 0x7F) << (7 * i)
        stop = live & (b < 0x80)
        end[stop] = at[stop] + i + 1
        done |= stop
    return value, end, done & (end <= HEAD)


def in_bounds(h: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per fragment: its head reads as a version 2.2 triangle mesh without metadata whose
    declared counts are at most ``DRACO_RATIO * size + DRACO_SLACK``."""
    sizes = np.asarray(sizes, np.int64)
    ok = (h[:, :5] == _MAGIC).all(axis=1) & (h[:, 5] == 2) & (h[:, 6] == 2) & (h[:, 7] == 1)
    ok &= (h[:, 8] <= 1) & ((h[:, 10] & 0x80) == 0)  # methods 0, 1; no metadata flag
    edgebreaker = h[:, 8] == 1
    first, after, ok1 = _varint(h, np.where(edgebreaker, 12, 11))
    second, _, ok2 = _varint(h, after)
    limit = DRACO_RATIO * sizes + DRACO_SLACK
    return ok & ok1 & ok2 & (first <= limit) & (second <= limit)


EMPTY = (np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint32))


def decoder(bufs: Sequence[Blob], vetted: np.ndarray
            ) -> Callable[[int], tuple[np.ndarray, np.ndarray] | str]:
    """``decode(i)``: fragment ``i``'s (points, faces), or what went wrong. Those
    :func:`in_bounds` did not pass (``vetted`` False) are decoded up front, together, in the
    capped child; the rest in this process when asked (on any thread). An empty fragment (a
    node without triangles of its own) is an empty mesh."""
    away = [i for i in np.flatnonzero(~np.asarray(vetted, bool)).tolist() if len(bufs[i])]
    isolated = dict(zip(away, decode_isolated([bufs[i] for i in away])))

    def decode(i: int) -> tuple[np.ndarray, np.ndarray] | str:
        if i in isolated:
            return isolated[i]
        return decode_in_process(bufs[i]) if len(bufs[i]) else EMPTY

    return decode


def decode_in_process(buf: Blob) -> tuple[np.ndarray, np.ndarray] | str:
    """(points ``(n, 3)`` float32, faces ``(m, 3)`` uint32), or what went wrong. Only for
    fragments :func:`in_bounds` passed."""
    try:  # the arrays too: a mesh of 2-D points, or points not in threes, is damage
        return _arrays(draco().decode(bytes(buf)))
    except Exception as e:  # DracoPy raises its own classes, ValueError and TypeError
        return f"{type(e).__name__}: {e}"


def _arrays(mesh) -> tuple[np.ndarray, np.ndarray]:
    points = np.asarray(mesh.points, np.float32).reshape(-1, 3)
    faces = getattr(mesh, "faces", None)
    faces = np.zeros((0, 3), np.uint32) if faces is None else \
        np.asarray(faces, np.uint32).reshape(-1, 3)
    return points, faces


# The child: reads (uint64 length, bytes) fragments from stdin until EOF and answers each with
# b"K", uint64 point and face counts, float32 points, uint32 faces; or b"E", uint64 length and
# a message. Its address space is capped after its imports.
_CHILD = r"""
import resource, struct, sys
import numpy as np, DracoPy
def vm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize"))
cap = vm() + int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
inp, out = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = inp.read(8)
    if len(head) < 8:
        break
    buf = inp.read(struct.unpack("<Q", head)[0])
    try:
        mesh = DracoPy.decode(buf)
        p = np.ascontiguousarray(mesh.points, "<f4").reshape(-1, 3)
        f = np.ascontiguousarray(getattr(mesh, "faces", np.zeros((0, 3))), "<u4").reshape(-1, 3)
        out.write(b"K" + struct.pack("<QQ", len(p), len(f)) + p.tobytes() + f.tobytes())
    except BaseException as e:
        kind = "over the memory limit" if isinstance(e, MemoryError) else type(e).__name__
        msg = f"{kind}: {e}".encode()
        out.write(b"E" + struct.pack("<Q", len(msg)) + msg)
    buf = mesh = None
    out.flush()
"""


def decode_isolated(bufs: Sequence[Blob]) -> list[tuple[np.ndarray, np.ndarray] | str]:
    """Decode outliers in one child process capped at :data:`DRACO_ISOLATED_BYTES` more
    address space: per fragment (points, faces) or what went wrong (a child that dies fails the
    fragment it was on and every one after it)."""
    if not bufs:
        return []
    draco()  # the same MissingDependencyError as in-process decoding
    if not sys.platform.startswith("linux"):  # RLIMIT_AS and /proc: Linux only
        return ["declares more vertices or faces than its size allows, and this platform "
                "cannot decode it in a memory-capped child process"] * len(bufs)
    payload = b"".join(struct.pack("<Q", len(b)) + bytes(b) for b in bufs)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(DRACO_ISOLATED_BYTES)],
                          input=payload, capture_output=True, env=env, check=False)
    out, at = memoryview(proc.stdout), 0
    results: list[tuple[np.ndarray, np.ndarray] | str] = []
    for _ in bufs:
        if at + 17 <= len(out) and out[at] == ord("K"):
            n, m = struct.unpack_from("<QQ", out, at + 1)
            end = at + 17 + 12 * n + 12 * m
            if end > len(out):
                break
            points = np.frombuffer(out, "<f4", 3 * n, at + 17).reshape(n, 3)
            faces = np.frombuffer(out, "<u4", 3 * m, at + 17 + 12 * n).reshape(m, 3)
            results.append((points, faces))
            at = end
        elif at + 9 <= len(out) and out[at] == ord("E"):
            (n,) = struct.unpack_from("<Q", out, at + 1)
            results.append(bytes(out[at + 9:at + 9 + n]).decode(errors="replace"))
            at += 9 + n
        else:
            break
    died = f"the isolated decoder died (exit status {proc.returncode})"
    return results + [died] * (len(bufs) - len(results))
