"""Load on ``ngshard serve``: many concurrent Range requests on 127.0.0.1, beside nginx serving
the same files, and the same request handling with other front ends (the measurement behind
the server's design: ``procsN`` processes, ``loopsN`` event loops in one, ``python1`` (one
process without the compiled answers), asyncio's streams).

    python tools/bench_serve.py [--seconds 3] [--rounds 1] [--connections 32]
                                [--client auto|wrk|python] [--data DIR] [--rate R]
                                [--servers ngshard,procs1,python1,loops1,asyncio,nginx]
                                [--slow N]

Both sides alike: nginx runs ``worker_processes auto`` (a worker per core) and ``ngshard``
runs as ``ngshard serve`` does (a process per core); sendfile on in both (ngshard's head
waits for its body with MSG_MORE, and both leave in one packet); no access log on either;
keep-alive without a request limit on both; the same files. wrk runs two threads on the same
machine, sharing its cores with the server measured.

Each server gets the same randomly drawn requests: byte ranges of 1 B to 64 KiB inside the
shard files of the demo data (written to a temporary folder unless ``--data``), as Neuroglancer
reads chunks and minishard indices.

Without ``--rate`` every connection sends its next request as soon as the last is answered
(closed loop at saturation): the rows give each server's most requests/s, and the latency is
then bound by Little's law (mean = connections / throughput: 256 connections at 30,000
requests/s wait 8.5 ms on average, whatever the server). ``--rate R`` paces the connections
instead, as viewers that pause between requests: after each response a connection waits an
exponentially distributed pause of mean ``connections / R`` seconds, so the offered load is
about R requests/s in all, and the percentiles are those of a server below saturation. The
client is ``wrk`` with a Lua script when it is
installed (``apt-get install wrk``), else a pool of Python threads on keep-alive connections
(which then limits every server alike). A response other than 206 with the right length is an
error. nginx (``apt-get install nginx``) runs as a user process with a config in a temporary
folder; without it, its row is skipped. Everything binds 127.0.0.1 and ends within seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ngshard.cpus import available_cpus
from ngshard.server import serve
from ngshard.server.files import open_files
from ngshard.server.protocol import HttpError, format_head, head_end, parse_head
from ngshard.server.respond import error_response, respond
from ngshard.storage import open_storage


class AsyncioConnections:
    """The server's request handling behind one asyncio event loop instead of a thread per
    connection: the same head parsing, ``respond`` and small-body fast path; local file reads
    run on the loop (page-cache reads of a few KiB), larger bodies go through
    ``loop.sendfile``."""

    def __init__(self, files, sock: socket.socket) -> None:
        self.files, self.sock = files, sock
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        if not started.wait(timeout=60):
            raise RuntimeError("the asyncio server thread did not start")

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            self.server = await asyncio.start_server(self._serve, sock=self.sock, backlog=128)
            started.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def close(self) -> None:
        async def stop() -> None:
            self.server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.loop.stop()

        asyncio.run_coroutine_threadsafe(stop(), self.loop)
        self.thread.join()
        self.loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = bytearray()
        try:
            while True:
                while (end := head_end(buffer)) < 0:
                    data = await asyncio.wait_for(reader.read(65536), 60)
                    if not data:
                        return
                    buffer += data
                head = bytes(buffer[:end])
                del buffer[:end]
                try:
                    request = parse_head(head)
                    response = respond(self.files, request)
                except HttpError as e:
                    request, response = None, error_response(e.status, e.reason, close=True)
                out = format_head(response.status, response.headers, response.fixed)
                file = response.file
                try:
                    if response.send_body and file is not None:
                        if response.length <= 256 * 1024:
                            writer.write(out + file.read(response.start, response.end))
                        else:
                            writer.write(out)
                            await writer.drain()
                            with open(file.fileno, "rb", buffering=0, closefd=False) as f:
                                await self.loop.sendfile(writer.transport, f, response.start,
                                                         response.length)
                    else:
                        writer.write(out + (response.body if response.send_body else b""))
                    await writer.drain()
                finally:
                    if file is not None:
                        file.close()
                if response.close or request is None or not request.keep_alive:
                    return
        except (OSError, asyncio.TimeoutError):
            pass
        except asyncio.CancelledError:  # closing: end quietly (a cancelled task is logged)
            pass
        finally:
            writer.close()


class SlowClients:
    """``n`` clients holding connections without using them, from one thread: a third
    connected and silent, a third sending a request head a byte every half second, a third
    reading a large response 1 KiB every half second. Each reconnects when the server closes
    it; ``reconnects`` counts those (slots the server took back)."""

    def __init__(self, base: str, n: int, path: str) -> None:
        host, port = base.split("//")[1].split(":")
        self.address, self.path, self.n = (host, int(port)), path, n
        self.reconnects, self._stop = 0, threading.Event()
        self.socks: list[socket.socket | None] = [None] * n
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _connect(self, i: int) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(self.address)
        s.setblocking(False)
        if i % 3 == 2:
            s.send(f"GET {self.path} HTTP/1.1\r\n\r\n".encode())
        elif i % 3 == 1:
            s.send(b"GET / HTTP/1.1\r\nX-Slow: ")
        return s

    def _run(self) -> None:
        while not self._stop.is_set():
            for i in range(self.n):
                s = self.socks[i]
                try:
                    if s is None:
                        self.socks[i] = self._connect(i)
                        continue
                    if i % 3 == 1:
                        s.send(b"a")
                    elif not s.recv(1024 if i % 3 == 2 else 1, socket.MSG_PEEK * (i % 3 == 0)):
                        raise ConnectionResetError  # closed by the server
                except BlockingIOError:
                    pass
                except OSError:
                    if s is not None:
                        s.close()
                        self.reconnects += 1
                    self.socks[i] = None
            self._stop.wait(0.5)

    def close(self) -> None:
        self._stop.set()
        self.thread.join()
        for s in self.socks:
            if s is not None:
                s.close()


def start_ngshard(root: str, model: str):
    """(base URL, stop) of the server over ``root``: as ``ngshard serve`` runs it
    ("ngshard": a process per core), from ``procsN`` processes, with ``loopsN`` event loops
    in one process, in one process without the compiled answers of ``server/quick.py``
    ("python1"), or behind the asyncio front end."""
    if model.startswith("procs"):
        server = serve(root, processes=int(model[5:]))
        return server.url, server.close
    if model.startswith("loops"):
        from ngshard.server import connections

        shipped, connections.SERVE_LOOPS = connections.SERVE_LOOPS, int(model[5:])
        try:
            server = serve(root)
        finally:
            connections.SERVE_LOOPS = shipped
        return server.url, server.close
    if model == "ngshard":
        server = serve(root, processes=None)
        return server.url, server.close
    if model == "python1":  # one process, every request answered in Python
        from ngshard.server import quick

        shipped, quick.answer = quick.answer, None
        try:
            server = serve(root)
        finally:
            quick.answer = shipped
        return server.url, server.close
    sock = socket.create_server(("127.0.0.1", 0), backlog=128)
    front = AsyncioConnections(open_files(open_storage(root)), sock)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", front.close


NGINX_CONF = """\
{user}worker_processes auto;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  client_body_temp_path {tmp}/body;
  proxy_temp_path {tmp}/proxy;
  fastcgi_temp_path {tmp}/fastcgi;
  uwsgi_temp_path {tmp}/uwsgi;
  scgi_temp_path {tmp}/scgi;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    location / {{ add_header Access-Control-Allow-Origin *; }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nginx(root: str):
    """(base URL, stop) of nginx serving ``root`` as a user process, or None without it."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                      else None)
    if nginx is None:
        return None
    tmp = tempfile.mkdtemp(prefix="bench-nginx-")
    port = free_port()
    conf = Path(tmp, "nginx.conf")
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers must read the temp data
    conf.write_text(NGINX_CONF.format(user=user, tmp=tmp, port=port, root=root))
    proc = subprocess.Popen([nginx, "-p", tmp, "-c", str(conf), "-e", f"{tmp}/error.log"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.1).close()
            break
        except OSError:
            if proc.poll() is not None:
                return None
            time.sleep(0.02)

    def stop() -> None:
        proc.terminate()
        proc.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)

    return f"http://127.0.0.1:{port}", stop


def draw_requests(root: str, n: int = 4096, seed: int = 0) -> list[tuple[str, int, int]]:
    """``(path, start, end)``: ranges of 1 B to 64 KiB inside the shard files under root."""
    shards = sorted(p for p in Path(root).rglob("*.shard"))
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        p = rng.choice(shards)
        size = p.stat().st_size
        length = min(size, int(2 ** rng.uniform(0, 16)))
        start = rng.randrange(0, size - length + 1)
        out.append(("/" + str(p.relative_to(root)), start, start + length))
    return out


WRK_SCRIPT = """\
local requests = {%s}
local counter = 0
local threads = {}
function setup(thread) table.insert(threads, thread) end
local pause_ms = %s
function init(args) bad = 0; counter = math.random(#requests) end
function delay()
  if pause_ms <= 0 then return 0 end
  return -math.log(1 - math.random()) * pause_ms
end
function request()
  counter = counter %% #requests + 1
  local r = requests[counter]
  return wrk.format("GET", r[1], {["Range"] = "bytes=" .. r[2] .. "-" .. (r[3] - 1)})
end
function response(status, headers, body)
  if status ~= 206 then bad = bad + 1 end
end
function done(summary, latency, requests)
  local bad_total = 0
  for _, t in ipairs(threads) do bad_total = bad_total + t:get("bad") end
  io.write(string.format('{"requests": %%d, "seconds": %%f, "p50": %%f, "p90": %%f, "p99": %%f, ' ..
    '"bad": %%d, "socket_errors": %%d}\\n', summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3,
    bad_total, summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.timeout + summary.errors.status))
end
"""


def run_wrk(base: str, requests, seconds: float, connections: int, rate: float = 0) -> dict:
    """wrk's figures; ``rate`` > 0: each connection pauses a mean of connections / rate
    seconds (exponentially distributed) after each response."""
    items = ",".join(f'{{"{p}",{s},{e}}}' for p, s, e in requests)
    pause_ms = 1e3 * connections / rate if rate > 0 else 0
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(WRK_SCRIPT % (items, f"{pause_ms:.6f}"))
    try:
        command = ["wrk", "-t2", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s",
                   f.name, "--timeout", "5s", base + "/"]
        out = subprocess.run(command, capture_output=True, text=True, check=True,
                             timeout=seconds + 30).stdout
    finally:
        os.unlink(f.name)
    result = json.loads(out.strip().splitlines()[-1])
    result["errors"] = result.pop("bad") + result.pop("socket_errors")
    return result


def run_python(base: str, requests, seconds: float, connections: int, rate: float = 0
               ) -> dict:
    if rate > 0:
        raise SystemExit("--rate needs wrk (apt-get install wrk)")
    host, port = base.split("//")[1].split(":")
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def worker(k: int) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        mine, bad, i = [], 0, k * 97
        while time.perf_counter() < stop_at:
            path, start, end = requests[i % len(requests)]
            i += 1
            t = time.perf_counter()
            try:
                conn.request("GET", path, headers={"Range": f"bytes={start}-{end - 1}"})
                r = conn.getresponse()
                body = r.read()
                if r.status != 206 or len(body) != end - start:
                    bad += 1
            except (OSError, http.client.HTTPException):
                bad += 1
                conn.close()
                conn = http.client.HTTPConnection(host, int(port), timeout=5)
            mine.append(time.perf_counter() - t)
        conn.close()
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    latencies.sort()

    def pct(q: float) -> float:
        return 1e3 * latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {"requests": len(latencies), "seconds": elapsed, "p50": pct(0.5), "p90": pct(0.9),
            "p99": pct(0.99), "errors": errors[0]}


def _cpu_seconds() -> float:
    """CPU seconds of this process and every live process below it (the servers: this
    one's threads, ngshard's workers, nginx's), from /proc; nan elsewhere."""
    tick, total, todo = os.sysconf("SC_CLK_TCK"), 0, [os.getpid()]
    try:
        while todo:
            pid = todo.pop()
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo += map(int, (task / "children").read_text().split())
    except OSError:
        return float("nan")
    return total / tick


def measured(run, base: str, requests, seconds: float, connections: int, rate: float = 0
             ) -> dict:
    """``run``'s result, with the CPU time per request of the servers (``server_us``:
    every process of this benchmark but the client) and of the client (``wrk_us``; the
    client's processes are reaped by then)."""
    before, client = _cpu_seconds(), os.times()
    result = run(base, requests, seconds, connections, rate)
    after, done = _cpu_seconds(), os.times()
    n = max(1, result["requests"])
    result["server_us"] = (after - before) * 1e6 / n
    result["wrk_us"] = (done.children_user + done.children_system - client.children_user
                        - client.children_system) * 1e6 / n
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per server and round")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds over the servers in turn; each row is the median round "
                             "(by requests/s), so that a busy neighbour skews no one server")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--client", choices=("auto", "wrk", "python"), default="auto")
    parser.add_argument("--rate", type=float, default=0,
                        help="offered requests/s in all, the connections pacing themselves "
                             "(see above); 0: each as fast as it is answered")
    parser.add_argument("--data", help="a folder of shard files (default: the demo data)")
    parser.add_argument("--slow", type=int, default=0,
                        help="of the connections, this many are slow or idle clients (see "
                             "SlowClients); each server is also run without them")
    parser.add_argument("--servers", default="ngshard,procs1,nginx",
                        help="ngshard, procsN (N processes), python1 (one process, no compiled "
                             "answers), loopsN (N event loops in one process), asyncio, nginx")
    args = parser.parse_args()
    client = args.client if args.client != "auto" else \
        "wrk" if shutil.which("wrk") else "python"
    run = run_wrk if client == "wrk" else run_python
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = args.data
        if root is None:
            from ngshard.demo import make_demo

            root = os.path.join(tmp, "demo")
            make_demo(root)
        root = os.path.realpath(root)
        requests = draw_requests(root)
        paced = f", paced to {args.rate:,.0f} requests/s in all" if args.rate else \
            ", each as fast as it is answered"
        print(f"client {client}, {args.connections} connections{paced}, {args.seconds:g} s per "
              f"server and round, {args.rounds} round(s); {len(requests)} distinct ranges of "
              f"1 B-64 KiB in the shards of {root}; {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.1f}; nginx and ngshard: {available_cpus()} processes "
              f"each (a worker per core)")
        servers, results = {}, {}
        try:
            for name in args.servers.split(","):
                started = start_nginx(root) if name == "nginx" else start_ngshard(root, name)
                if started is None:
                    print(f"{name:<18}(not installed: apt-get install nginx)")
                    continue
                servers[name] = started
                run(started[0], requests[:8], 0.5, args.connections)  # warm up
            big = max(Path(root).rglob("*.shard"), key=lambda p: p.stat().st_size)
            for _ in range(args.rounds):
                for name, (base, _) in servers.items():
                    results.setdefault(name, []).append(
                        measured(run, base, requests, args.seconds, args.connections - args.slow,
                                 args.rate))
                    if args.slow:
                        slow = SlowClients(base, args.slow, "/" + str(big.relative_to(root)))
                        time.sleep(1)
                        try:
                            results.setdefault(f"{name}+slow", []).append(measured(
                                run, base, requests, args.seconds, args.connections - args.slow,
                                args.rate))
                        finally:
                            slow.close()
                        print(f"{name}: the server closed {slow.reconnects} slow or idle "
                              f"connections (they reconnected)")
        finally:
            for _, stop in servers.values():
                stop()
        print(f"{'server':<18}{'requests/s':>12}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}"
              f"{'errors':>8}{'CPU us/req':>12}{'wrk us/req':>12}"
              + ("   requests/s of the rounds" if args.rounds > 1 else ""))
        rate = {}
        for name, rounds in results.items():
            rates = [r["requests"] / r["seconds"] for r in rounds]
            r = sorted(rounds, key=lambda r: r["requests"] / r["seconds"])[len(rounds) // 2]
            rate[name] = r["requests"] / r["seconds"]
            label = {"asyncio": "ngshard (asyncio)"}.get(name, name)
            spread = "   " + " ".join(f"{x:.0f}" for x in rates) if args.rounds > 1 else ""
            print(f"{label:<18}{rate[name]:>12.0f}{r['p50']:>9.2f}{r['p90']:>9.2f}"
                  f"{r['p99']:>9.2f}{sum(x['errors'] for x in rounds):>8}"
                  f"{r.get('server_us', float('nan')):>12.1f}{r.get('wrk_us', float('nan')):>12.1f}"
                  f"{spread}")
        for name in rate:
            if "nginx" in rate and name != "nginx" and "+slow" not in name:
                print(f"{name} / nginx requests/s: {rate[name] / rate['nginx']:.2f}")
            if f"{name}+slow" in rate:
                print(f"{name} with {args.slow} slow or idle clients / without: "
                      f"{rate[name + '+slow'] / rate[name]:.2f}")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
