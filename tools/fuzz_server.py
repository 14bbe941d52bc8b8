"""Fuzz ``ngshard serve`` with hostile requests on 127.0.0.1, beside slow and idle clients.

The server runs as a child process (``ngshard serve``) over a small tree: plain files, a
compressed twin that inflates 2,000-fold, a corrupt twin, a sub-folder, hidden files, a FIFO,
and symbolic links to a secret outside the root. Each case sends one generated request -
methods, targets (dot segments plain and encoded, absolute forms, long ones), versions, header
fields (ranges of every form, conditions, codings, bodies, junk), blank lines, pipelined
requests, random damage and truncation - whole or a few bytes at a time, on one of several
connections at once, while other clients hold connections idle or trickle their heads.

Counted per run: cases, escapes (the secret in any answer), answers that are not HTTP, 5xx
other than for the corrupt twin, hangs (a case or a check request not answered in time), the
server's tracebacks or death, and its peak memory against the largest input file.
Reproducible by seed::

    python tools/fuzz_server.py --cases 20000 --seed 1
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SECRET = b"SECRET-OUTSIDE-THE-ROOT"
DATA = bytes(range(256)) * 64
NAMES = ["/data", "/info", "/sub/chunk", "/twin", "/bad", "/sub/", "/", "/.hidden", "/fifo",
         "/out", "/sub/out", "/nothing", "/data.gz"]
METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "TRACE", "CONNECT", "get", "G\0T",
           "PRI", ""]
RANGES = ["bytes=0-3", "bytes=-5", "bytes=100-", "bytes=5-1", "bytes=99999999-",
          "bytes=0-0,5-6", "bytes=", "bytes=-0", "items=0-1", "bytes=0-" + "9" * 40,
          "bytes = 1 - 2", "bytes=-" + "9" * 5000, "bytes=0-1,", "bytes=\x00-1"]
FIELDS = [("Accept-Encoding", ["gzip", "identity", "br;q=0", "*", "gzip;q=x", ""]),
          ("If-None-Match", ['"x"', "*", "W/\"a\", \"b\"", '"']),
          ("If-Match", ['"x"', "*"]), ("If-Range", ['"x"', "Sun, 06 Nov 1994 08:49:37 GMT"]),
          ("If-Modified-Since", ["Sun, 06 Nov 2094 08:49:37 GMT", "junk"]),
          ("Content-Length", ["0", "5", "-1", "99999999999999999999", "1, 2"]),
          ("Transfer-Encoding", ["chunked"]), ("Connection", ["close", "keep-alive", ""]),
          ("Host", ["x", "", "a" * 9000]), ("X-Junk", ["\x01", "a\rb", "ok"]),
          ("Access-Control-Request-Headers", ["range", "a b\x7f"])]
TARGETS = ["/../outside", "/sub/../../out", "/%2e%2e/outside", "/%2E%2E%2Foutside",
           "/sub%2fchunk", "/data%00", "//data", "/./data", "http://x/data", "https://x/../x",
           "*", "data", "/" + "a" * 9000, "/%zz", "/%c3%28", "/data?x=1#y", "/sub/.secret",
           "/\\..\\outside", "/data/", "/twin.gz"]
ALLOWED = {200, 204, 206, 304, 400, 404, 405, 408, 412, 413, 414, 416, 431, 501, 505}


def make_tree(root: Path) -> Path:
    """The served tree, and a secret beside it (to be reached only by escaping)."""
    outside = root.parent / "outside"
    outside.write_bytes(SECRET)
    (root / "sub").mkdir(parents=True)
    (root / "data").write_bytes(DATA)
    (root / "info").write_text('{"@type": "neuroglancer_skeletons"}')
    (root / "sub" / "chunk.gz").write_bytes(gzip.compress(DATA))
    (root / "twin.gz").write_bytes(gzip.compress(bytes(32 << 20), compresslevel=9))
    (root / "bad.gz").write_bytes(gzip.compress(DATA)[:-20] + b"\xff" * 20)
    (root / ".hidden").write_bytes(SECRET)
    (root / "sub" / ".secret").write_bytes(SECRET)
    os.mkfifo(root / "fifo")
    os.symlink(outside, root / "out")
    os.symlink(root.parent, root / "sub" / "out")
    return root


def generate(rng: random.Random) -> tuple[bytes, str]:
    """One hostile request (or a few pipelined), and its kind."""
    kind = rng.choice(["valid", "valid", "target", "method", "fields", "damaged", "pipelined",
                       "truncated", "blank"])
    method = "GET" if kind in ("valid", "pipelined") else rng.choice(METHODS[:3] + METHODS)
    target = rng.choice(TARGETS) if kind == "target" else rng.choice(NAMES)
    version = rng.choice(["HTTP/1.1"] * 6 + ["HTTP/1.0", "HTTP/2.0", "HTTP/1.x", "HTTP/9.9",
                                             ""])
    fields = [("Range", rng.choice(RANGES))] if rng.random() < 0.5 else []
    for name, values in rng.sample(FIELDS, rng.randint(0, 3)):
        fields.append((name, rng.choice(values)))
    end = rng.choice(["\r\n"] * 4 + ["\n"])
    head = f"{method} {target} {version}{end}" + "".join(f"{k}: {v}{end}" for k, v in fields)
    data = (head + end).encode("latin-1", "replace")
    if kind == "blank":
        data = b"\r\n" * rng.randint(1, 5) + data
    elif kind == "pipelined":
        data = data * rng.randint(2, 6)
    elif kind == "truncated":
        data = data[:rng.randrange(1, len(data))]
    elif kind == "damaged":
        data = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    return data, kind


def exchange(port: int, data: bytes, rng: random.Random, timeout: float) -> bytes | None:
    """Send ``data`` (whole, or in pieces with pauses) and read to the close; None on a
    hang (no answer and no close within ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout) as s:
        try:
            if rng.random() < 0.2:
                for i in range(0, len(data), 7):
                    s.sendall(data[i:i + 7])
                    time.sleep(0.001)
            else:
                s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        try:
            while piece := s.recv(1 << 16):
                out += piece
                if len(out) > 64 << 20:
                    break
        except TimeoutError:
            return None
        except OSError:  # reset after the answer: what came counts
            pass
        return out


def check(answer: bytes, data: bytes) -> list[str]:
    """What is wrong with one answer."""
    problems = []
    if SECRET in answer:
        problems.append("escape")
    heads = re.findall(rb"HTTP/1\.1 (\d{3}) ", answer)
    if not heads and answer:
        problems.append("not http")
    for status in (int(h) for h in heads):
        if status not in ALLOWED and not (status == 500 and b"/bad" in data):
            problems.append(f"status {status}")  # 500 only for the corrupt twin
    return problems


def still_serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), 10) as s:
            s.sendall(b"GET /data HTTP/1.1\r\nRange: bytes=0-3\r\nConnection: close\r\n\r\n")
            out = b""
            while piece := s.recv(4096):
                out += piece
        return out.startswith(b"HTTP/1.1 206") and out.endswith(DATA[:4])
    except OSError:
        return False


def peak_kib(pid: int) -> int:
    """The peak memory of the server's largest process: ``pid`` or one of its workers."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += (task / "children").read_text().split()
    peaks = []
    for p in [pid, *map(int, children)]:
        with open(f"/proc/{p}/status") as f:
            peaks.append(int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)))
    return max(peaks)


def run(cases: int, seed: int, jobs: int = 8, slow: int = 50, timeout: float = 30.0) -> dict:
    """Fuzz a fresh server; the counts of the run."""
    tmp = Path(tempfile.mkdtemp(prefix="fuzz-server-"))
    root = make_tree(tmp / "root")
    cli = shutil.which("ngshard", path=os.path.dirname(sys.executable)) or "ngshard"
    proc = subprocess.Popen([cli, "serve", str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    counts: Counter = Counter()
    try:
        line = proc.stdout.readline()
        port = int(re.search(r"http://127\.0\.0\.1:(\d+)", line).group(1))
        idle = []
        for i in range(slow):  # held open all along: silent, or a head begun
            s = socket.create_connection(("127.0.0.1", port))
            if i % 2:
                s.sendall(b"GET /data HTTP/1.1\r\nX: ")
            idle.append(s)

        def one(n: int) -> list[str]:
            rng = random.Random(seed * 1_000_003 + n)
            data, kind = generate(rng)
            answer = exchange(port, data, rng, timeout)
            if answer is None:
                return [f"hang ({kind}): {data[:80]!r}"]
            return [f"{p} ({kind}): {data[:80]!r}" for p in check(answer, data)]

        problems: list[str] = []
        with ThreadPoolExecutor(jobs) as pool:
            for start in range(0, cases, 500):
                for found in pool.map(one, range(start, min(cases, start + 500))):
                    problems += found
                counts["cases"] += min(cases, start + 500) - start
                if not still_serving(port):
                    problems.append(f"not serving after case {start + 500}")
                    break
        for s in idle:
            s.close()
        counts["peak MiB"] = peak_kib(proc.pid) // 1024
        for p in problems:
            counts[p.split(" (")[0].split(" after")[0]] += 1
        counts["problems"] = len(problems)
        counts["examples"] = problems[:10]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        counts["tracebacks"] = err.count("Traceback")
        counts["exit"] = proc.returncode
        shutil.rmtree(tmp, ignore_errors=True)
    counts["largest input MiB"] = 32
    return dict(counts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=8, help="connections at once")
    parser.add_argument("--slow", type=int, default=50, help="idle or slow clients held")
    args = parser.parse_args()
    started = time.monotonic()
    counts = run(args.cases, args.seed, args.jobs, args.slow)
    for key, value in counts.items():
        print(f"{key}: {value}")
    print(f"{time.monotonic() - started:.0f} s, load average {os.getloadavg()[0]:.1f}")
    return 1 if counts.get("problems") or counts.get("tracebacks") else 0


if __name__ == "__main__":
    sys.exit(main())
