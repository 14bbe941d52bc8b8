"""Benchmark of remote reads: ngshard beside tensorstore and cloud-volume (when installed) over
a real HTTP server on 127.0.0.1 that adds a fixed latency to every request.

    python tools/bench_http.py [--keys 100000] [--reads 1000] [--latency 0.02] [--repeat 3]
                               [--close]

Two stores of the same --keys x 1 KiB over 16 shards, one written by tensorstore and one by
ngshard (their layouts differ: ngshard puts a shard's minishard indices side by side, so a
batch fetches them in one request per shard; tensorstore puts each after its minishard's
data), are served by a ThreadingHTTPServer in a process of its own (its threads share no GIL
with the clients): single ``Range: bytes=a-b`` GETs answered 206 with Content-Range, HEAD with
Content-Length and an ETag, HTTP/1.1 keep-alive (--close: HTTP/1.0, a connection per request),
--latency seconds of sleep per request.

Each library reads the same --reads random keys from a fresh store (nothing cached) in one
batch: ngshard ``get_many`` (obstore's HTTP store), tensorstore ``read`` under ``ts.Batch``,
cloud-volume ``ShardReader.get_data``. The server counts each read's requests and the most in
flight at once. Concurrency is each library's own: ngshard's REQUEST_CONCURRENCY (128) in
flight; tensorstore's ``http_request_concurrency``, 32 by default, also run at 128 to
match; cloud-volume's 20 threads per process (parallel=1, its default; with --close also
parallel=5, 100 connections). The floor is three round trips (shard index, minishard index,
data): 3 x latency, plus transfer.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATS = "/_stats"  # the control path: counters of the requests since the last call, then reset


class LatencyHandler(BaseHTTPRequestHandler):
    """Files under ``server.root``: GET (whole, or one ``bytes=a-b`` range) and HEAD, each
    answered after ``server.latency`` seconds."""

    protocol_version = "HTTP/1.1"  # keep-alive, as object stores
    timeout = 60  # an idle connection closes after this long

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self._serve(body=True)

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def _serve(self, body: bool) -> None:
        s = self.server
        if self.path == STATS:
            return self._send(200, {}, json.dumps(s.take_stats()).encode(), body)
        with s.lock:
            s.in_flight += 1
            s.at_once = max(s.at_once, s.in_flight)
            s.counts[self.command] = s.counts.get(self.command, 0) + 1
        try:
            time.sleep(s.latency)
            self._file(body)
        finally:
            with s.lock:
                s.in_flight -= 1

    def _file(self, body: bool) -> None:
        path = os.path.join(self.server.root, self.path.split("?")[0].lstrip("/"))
        if ".." in self.path or not os.path.isfile(path):
            return self._send(404, {}, b"", body)
        st = os.stat(path)
        size = st.st_size
        headers = {"ETag": f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{size:x}"',
                   "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if rng is None:
            start, end, code = 0, size, 200
        else:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng.strip())
            if m is None or int(m.group(1)) >= size:
                return self._send(416, {"Content-Range": f"bytes */{size}"}, b"", body)
            start = int(m.group(1))
            end = min(int(m.group(2)) + 1 if m.group(2) else size, size)
            code = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        data = b""
        if body:
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
            with self.server.lock:
                self.server.sent += len(data)
        self._send(code, headers, data, body, end - start)

    def _send(self, code: int, headers: dict, data: bytes, body: bool,
              length: int | None = None) -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.end_headers()
        if body:
            self.wfile.write(data)


class LatencyServer(ThreadingHTTPServer):
    request_queue_size = 1024  # clients open many connections at once
    daemon_threads = True

    def __init__(self, root: str, latency: float) -> None:
        super().__init__(("127.0.0.1", 0), LatencyHandler)
        self.root, self.latency = root, latency
        self.lock = threading.Lock()
        self.in_flight = 0
        self.counts: dict[str, int] = {}  # requests by method
        self.at_once = 0  # the most requests in flight together
        self.sent = 0  # body bytes

    def take_stats(self) -> dict:
        with self.lock:
            out = {"counts": self.counts, "at_once": self.at_once, "sent": self.sent}
            self.counts, self.at_once, self.sent = {}, 0, 0
        return out


def serve(root: str, latency: float, close: bool) -> None:
    """The server process: prints its port, serves until its stdin closes (the parent ended)."""
    if close:
        LatencyHandler.protocol_version = "HTTP/1.0"
    server = LatencyServer(root, latency)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()  # EOF when the parent exits or closes the pipe
    server.shutdown()


def stats(base: str) -> dict:
    with urllib.request.urlopen(base + STATS, timeout=30) as r:
        return json.loads(r.read())


def bench_store(args, base: str, writer: str, sample, want: list[bytes]) -> None:
    """One row: every library reads the sample from the store ``writer`` wrote."""
    import numpy as np
    from bench_kv import cloudvolume, cv_reader, ts_batch_read, ts_open
    from benchlib import CACHE_BYTES, SPEC, TS_CONTEXT, report, take_turns

    import ngshard

    layer = f"{base}/by-{writer}"
    store = f"{layer}/skeletons"
    spec = ngshard.ShardingSpec.from_json(SPEC)
    sample_list = sample.tolist()
    sample_bytes = [k.to_bytes(8, "big") for k in sample_list]
    seen: dict[str, list[dict]] = {}

    def counted(name: str, read):
        """``read`` timed, then the server's counts of it kept under ``name``."""
        def run(opened):
            got = read(opened)
            seen.setdefault(name, []).append(stats(base))
            return got
        return run

    def fresh(open_store):
        def setup():
            opened = open_store()
            stats(base)  # what opening asked for (cloud-volume: its info files) is not counted
            return opened
        return setup

    from ngshard.limits import REQUEST_CONCURRENCY

    ts_matched = dict(TS_CONTEXT, http_request_concurrency={"limit": REQUEST_CONCURRENCY})
    cases = {
        "ngshard get_many": (fresh(lambda: ngshard.open_kv(store, spec, cache_bytes=CACHE_BYTES)),
                             lambda kv: kv.get_many(sample)),
        "tensorstore ts.Batch (default concurrency 32)": (
            fresh(lambda: ts_open(store)), lambda kv: ts_batch_read(kv, sample_bytes)),
        f"tensorstore ts.Batch (http_request_concurrency {REQUEST_CONCURRENCY})": (
            fresh(lambda: ts_open(store, ts_matched)),
            lambda kv: ts_batch_read(kv, sample_bytes)),
    }
    if cloudvolume:
        for p in (1, 5) if args.close else (1,):
            cases[f"cloud-volume get_data (parallel={p})"] = (
                fresh(lambda p=p: cv_reader(layer, p)),
                lambda r, p=p: r.get_data(sample_list, "skeletons", parallel=p))
    for name, (setup, read) in cases.items():  # every library reads the right bytes
        got = read(setup())
        got = got if isinstance(got, list) else [got[k] for k in sample_list]
        assert got == want, f"{name} misread"
    stats(base)
    cases = {name: (setup, counted(name, read)) for name, (setup, read) in cases.items()}
    times = take_turns(cases, args.repeat, warmup=True)
    floor = 3 * args.latency
    extra = {}
    for name, runs in seen.items():
        runs = runs[-args.repeat:]  # not the warm-up turn
        counts = sorted({" + ".join(f"{v} {k}" for k, v in sorted(r["counts"].items()))
                         for r in runs})
        extra[name] = (f"{np.median(times[name]) / floor:.1f}x floor; {' / '.join(counts)}; "
                       f"at most {max(r['at_once'] for r in runs)} in flight; "
                       f"{np.median([r['sent'] for r in runs]) / 1e6:.2f} MB")
    report(f"read {len(sample_list)} random keys over HTTP ({args.latency * 1e3:g} ms per "
           f"request{', a connection each' if args.close else ''}), fresh store written by "
           f"{writer} (floor {floor * 1e3:g} ms)", times, per=(len(sample_list), "key"),
           extra=extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--reads", type=int, default=1_000)
    ap.add_argument("--latency", type=float, default=0.02, help="seconds added per request")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--close", action="store_true",
                    help="the server closes the connection after each response (HTTP/1.0)")
    ap.add_argument("--_serve", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._serve:
        return serve(args._serve[0], float(args._serve[1]), args._serve[2] == "1")

    import numpy as np
    from bench_kv import cloudvolume, make_layer, ts_write
    from benchlib import CACHE_BYTES, SPEC, header, summary

    import ngshard

    header(f"bench_http: {args}")
    if cloudvolume is None:
        from bench_kv import CLOUDVOLUME_MISSING
        print(f"cloud-volume rows skipped: not importable ({CLOUDVOLUME_MISSING})")
    elif not args.close:
        print("cloud-volume runs at parallel=1 only: at parallel>1 it forks processes that "
              "inherit the parent's open keep-alive connections and read each other's "
              "responses (DecompressionError); --close runs parallel=5 too")
    rng = np.random.default_rng(0)
    keys = np.unique(rng.integers(0, 2**64 - 1, args.keys, dtype=np.uint64, endpoint=True))
    blob = rng.integers(0, 256, len(keys) * 1024, dtype=np.uint8).tobytes()
    items = {int(k): blob[i * 1024:(i + 1) * 1024] for i, k in enumerate(keys)}
    sample = rng.choice(keys, args.reads, replace=False)
    want = [items[k] for k in sample.tolist()]
    work = tempfile.mkdtemp(prefix="ngshard-bench-http-")
    server = None
    try:
        ts_write(make_layer(f"{work}/by-tensorstore"), items)
        ngshard.write_kv(make_layer(f"{work}/by-ngshard"), SPEC, items, overwrite=True)
        del items, blob
        server = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_serve", work,
                                   str(args.latency), str(int(args.close))],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        base = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        print(f"{len(keys)} keys x 1024 B in {1 << SPEC['shard_bits']} shards, "
              f"{args.latency * 1e3:g} ms per request, "
              f"{'a connection per request' if args.close else 'keep-alive'}; index caches "
              f"as in bench_kv ({CACHE_BYTES >> 20} MiB)")
        for writer in ("tensorstore", "ngshard"):
            bench_store(args, base, writer, sample, want)
    finally:
        if server is not None:
            server.stdin.close()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:  # forked cloud-volume workers hold the pipe
                server.terminate()
                server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    summary("tools/bench_http.py")


if __name__ == "__main__":
    main()
