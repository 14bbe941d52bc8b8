"""Shared fixtures: real HTTP servers on 127.0.0.1 serving a directory, with byte ranges and
ETags (``http_server``) or as ``python3 -m http.server`` does, without them
(``plain_http_server``). Both list directories unless ``server.listing`` is set False (then a
folder answers 404, as a web server without listings or ``ngshard serve`` does)."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import settings
from peers import PEER_TIMEOUT

# Timing varies a lot on a shared 2-core machine: no example may fail for being slow.
settings.register_profile("ngshard", deadline=None)
settings.load_profile("ngshard")

# zarr-python's synchronous calls give up after PEER_TIMEOUT (its config reads this when zarr
# is imported, here and in child processes), as the tests' tensorstore calls do.
os.environ.setdefault("ZARR_ASYNC__TIMEOUT", str(PEER_TIMEOUT))

# A shell without job control starts a background command (`pytest &`) with SIGINT ignored,
# and Python keeps it so: every child the tests start would then ignore the Ctrl-C the tests
# send it. Python's own handler here lets children start with the default again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class ListingSwitch(SimpleHTTPRequestHandler):
    """Directory pages as the standard library makes them, or 404 when ``server.listing``
    is False (or that status, when it is one: 403 as nginx answers without autoindex)."""

    def list_directory(self, path):
        if self.server.listing is True:
            return super().list_directory(path)
        self.send_error(self.server.listing or 404, "directory listing is off")
        return None


class RangeHandler(ListingSwitch):
    """Static files with single byte-range GETs, Content-Length on HEAD and an ETag;
    ``server.before_range(path, start, end)`` and ``server.after_range(path, start, end)``,
    when set, are called before a range is read and after it is read but before it is sent
    (with the ETag of what was read: the client cannot ask for more before the hook ran)."""

    def log_message(self, *args) -> None:
        self.server.requests.append((self.command, self.path, self.headers.get("Range")))

    def handle_one_request(self) -> None:
        """With ``server.delay`` seconds of latency; ``server.at_once`` records the most
        requests in flight together."""
        with self.server.lock:
            self.server.in_flight += 1
            self.server.at_once = max(self.server.at_once, self.server.in_flight)
        try:
            time.sleep(self.server.delay)
            super().handle_one_request()
        finally:
            with self.server.lock:
                self.server.in_flight -= 1

    def _etag(self, path: str | int) -> str:
        st = os.stat(path)
        return hashlib.md5(f"{st.st_ino}-{st.st_mtime_ns}-{st.st_size}".encode()).hexdigest()

    def do_GET(self) -> None:
        path = self.translate_path(self.path)
        rng = self.headers.get("Range")
        if not rng or not os.path.isfile(path):
            return super().do_GET()
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
        size = os.path.getsize(path)
        start = int(m.group(1))
        end = min(int(m.group(2)) + 1 if m.group(2) else size, size)
        if start >= size:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.end_headers()
            return
        if self.server.before_range is not None:  # a test's hook: hold back an answer
            self.server.before_range(self.path, start, end)
        with open(path, "rb") as f:
            self.read_etag = self._etag(f.fileno())
            f.seek(start)
            body = f.read(end - start)
        if self.server.after_range is not None:  # a test's hook: change files between reads
            self.server.after_range(self.path, start, end)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def end_headers(self) -> None:
        path = self.translate_path(self.path)
        etag, self.read_etag = getattr(self, "read_etag", None), None
        if etag or os.path.isfile(path):
            self.send_header("ETag", f'"{etag or self._etag(path)}"')
        self.send_header("Accept-Ranges", "bytes")
        super().end_headers()


class Server(ThreadingHTTPServer):
    request_queue_size = 256  # clients open many connections at once


def _serve(root, handler):
    """Serve ``root`` with ``handler`` on 127.0.0.1 from a thread; yields the server."""
    server = Server(("127.0.0.1", 0), partial(handler, directory=str(root)))
    server.root, server.base = root, f"http://127.0.0.1:{server.server_address[1]}"
    server.requests, server.listing, server.after_range = [], True, None
    server.before_range = None
    server.lock, server.in_flight, server.at_once, server.delay = threading.Lock(), 0, 0, 0.0
    # shutdown() waits for the loop's next poll: a short interval keeps teardown quick
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def http_server(tmp_path):
    """A real HTTP server on 127.0.0.1 serving ``.root`` at ``.base``; ``.requests`` logs
    what it was asked; ``.delay`` and ``.at_once`` are those of RangeHandler."""
    root = tmp_path / "www"
    root.mkdir()
    yield from _serve(root, RangeHandler)


class PlainHandler(ListingSwitch):
    """``python3 -m http.server`` as it is: Range headers ignored (200 and the whole file), no
    ETag, Content-Length and Last-Modified on HEAD. Logs (method, path, Range) quietly."""

    def log_message(self, *args) -> None:
        self.server.requests.append((self.command, self.path, self.headers.get("Range")))


@pytest.fixture
def plain_http_server(tmp_path):
    """Like ``http_server``, but the standard library's own handler, which ignores Range."""
    root = tmp_path / "plain-www"
    root.mkdir()
    yield from _serve(root, PlainHandler)


@pytest.fixture
def http_dir(http_server):
    """(directory, base URL, list of requests) of a real HTTP server serving the directory."""
    return http_server.root, http_server.base, http_server.requests


CHROMIUM = "/usr/bin/chromium"
# The flags that give Neuroglancer WebGL2 in a headless container (SwiftShader through ANGLE).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--use-angle=swiftshader", "--enable-unsafe-swiftshader"]


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's, driven by playwright), or a skip saying why there is none.
    Per module: playwright's sync API keeps an event loop running in the main thread while it
    is open, which the async tests of other modules (zarr's StoreTests) cannot run beside."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (it is in the test extra: "
                    "pip install -e '.[test]')")
    pytest.importorskip("neuroglancer", reason="neuroglancer is not installed (test extra)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no {CHROMIUM} (as root: apt-get install -y chromium)")
    with sync_playwright() as p:
        try:
            chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True,
                                         timeout=60_000)
        except Error as e:
            pytest.skip(f"Chromium did not start: {str(e).strip().splitlines()[0]}")
        try:
            yield chromium
        finally:
            chromium.close()


# --- object-store servers (tests/objectstores.py) ------------------------------------------

def _object_server(kind: str):
    from objectstores import STARTERS

    server = STARTERS[kind]()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 with the test bucket (``.url()``, ``.options``)."""
    yield from _object_server("s3")


@pytest.fixture(scope="session")
def gcs_server():
    """gcp-storage-emulator on 127.0.0.1 with the test bucket; tensorstore's gcs driver in
    this process is pointed at it (TENSORSTORE_GCS_HTTP_URL, read once per process)."""
    for server in _object_server("gcs"):
        os.environ["TENSORSTORE_GCS_HTTP_URL"] = server.endpoint
        os.environ["GOOGLE_AUTH_TOKEN_FOR_TESTING"] = "test"
        yield server


@pytest.fixture(scope="session")
def azure_server():
    """Azurite's blob service on 127.0.0.1 with the test container."""
    yield from _object_server("azure")


@pytest.fixture(params=["s3", "gcs", "azure"])
def object_server(request):
    """Each object-store server in turn."""
    return request.getfixturevalue(f"{request.param}_server")
