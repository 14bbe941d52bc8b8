"""Real object-store servers on 127.0.0.1 for the tests, each started once per session:
moto's S3 server (PyPI ``moto[server]``), ``gcp-storage-emulator`` (PyPI) for GCS and
Microsoft's Azurite (npm; ``.ci/run`` installs it into ``.ci/node_modules``, or give its
``azurite-blob`` in ``NGSHARD_AZURITE``).

A server that cannot start fails the tests that need it: in CI a missing server must not
pass as a skip. Only Azurite may be missing for a reason a test run cannot help, no npm to
install it with: those tests then skip, saying so. ``NGSHARD_CLOUD_SKIP=1`` turns every
failure to start into a skip, for a machine where the servers cannot be installed.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from peers import PEER_TIMEOUT

REPO = Path(__file__).resolve().parent.parent
BUCKET = "ngshard-tests"
#: Azurite's well-known development account.
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBe"
          "ksoGMGw==")
STARTUP_SECONDS = 60


@dataclass
class ObjectServer:
    """A running server: ``kind`` ("s3", "gcs", "azure"), its ``endpoint`` (http://host:port),
    the ``scheme`` of its URLs and the ``options`` that reach it."""

    kind: str
    endpoint: str
    process: subprocess.Popen
    log: Path
    scheme: str = ""
    options: dict = field(default_factory=dict)

    def url(self, path: str = "") -> str:
        """A URL in the test bucket: a fresh folder of its own where no path is given."""
        return f"{self.scheme}://{BUCKET}/{path or uuid.uuid4().hex}"

    def through(self, endpoint: str) -> dict:
        """The options that reach this server's bucket through another endpoint (a proxy)."""
        key = "endpoint" if self.kind == "azure" else "endpoint_url"
        base = f"{endpoint}/{AZ_ACCOUNT}" if self.kind == "azure" else endpoint
        return {**self.options, key: base}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=PEER_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unavailable(why: str) -> None:
    """Fail (or, with NGSHARD_CLOUD_SKIP=1, skip) the tests that need a server."""
    if os.environ.get("NGSHARD_CLOUD_SKIP") == "1":
        pytest.skip(why)
    pytest.fail(f"{why} (NGSHARD_CLOUD_SKIP=1 skips the object-store tests instead)",
                pytrace=False)


def _start(kind: str, argv: list[str], port: int, ready: str) -> ObjectServer:
    log = Path(tempfile.mkstemp(prefix=f"ngshard-{kind}-", suffix=".log")[1])
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            requests.get(endpoint + ready, timeout=2)
            return ObjectServer(kind, endpoint, process, log)
        except requests.RequestException:
            time.sleep(0.1)
    process.kill()
    unavailable(f"the {kind} server did not start: {' '.join(argv)}; its log: "
                f"{log.read_text(errors='replace')[-2000:]}")
    raise AssertionError  # unreachable


def start_s3() -> ObjectServer:
    """moto's S3 server, with the test bucket."""
    port = free_port()
    server = _start("s3", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                           str(port)], port, "/moto-api/")
    requests.put(f"{server.endpoint}/{BUCKET}", timeout=PEER_TIMEOUT).raise_for_status()
    server.scheme = "s3"
    server.options = {"endpoint_url": server.endpoint, "key": "testing", "secret": "testing",
                      "region": "us-east-1"}
    return server


def start_gcs() -> ObjectServer:
    """gcp-storage-emulator, in memory, with the test bucket."""
    port = free_port()
    server = _start("gcs", [sys.executable, "-m", "gcp_storage_emulator", "start", "--host",
                            "127.0.0.1", "--port", str(port), "--in-memory"], port, "/")
    requests.post(f"{server.endpoint}/storage/v1/b", json={"name": BUCKET},
                  timeout=PEER_TIMEOUT).raise_for_status()
    server.scheme = "gs"
    server.options = {"endpoint_url": server.endpoint, "token": "anon"}
    return server


def azurite_binary() -> str | None:
    candidates = [os.environ.get("NGSHARD_AZURITE"),
                  str(REPO / ".ci" / "node_modules" / ".bin" / "azurite-blob"),
                  shutil.which("azurite-blob")]
    return next((c for c in candidates if c and os.path.exists(c)), None)


def start_azure() -> ObjectServer:
    """Azurite's blob service, its data in a temporary folder, with the test container."""
    binary = azurite_binary()
    if binary is None:
        if shutil.which("npm") is None:
            pytest.skip("no Azurite, and no npm to install it with (.ci/run installs both "
                        "where it can)")
        unavailable("no Azurite: .ci/run installs it (npm install --prefix .ci azurite@3), "
                    "or give its azurite-blob in NGSHARD_AZURITE")
    port = free_port()
    data = tempfile.mkdtemp(prefix="ngshard-azurite-")
    server = _start("azure", [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port),
                              "--location", data, "--skipApiVersionCheck",
                              "--disableTelemetry", "--silent"], port,
                    f"/{AZ_ACCOUNT}?comp=list")
    azure_request("PUT", f"{server.endpoint}/{AZ_ACCOUNT}/{BUCKET}?restype=container")
    server.scheme = "az"
    server.options = {"account_name": AZ_ACCOUNT, "account_key": AZ_KEY,
                      "endpoint": f"{server.endpoint}/{AZ_ACCOUNT}"}
    return server


def azure_request(method: str, url: str) -> requests.Response:
    """A request to Azurite signed with the development account's shared key (enough for
    creating a container: no body, no content headers)."""
    date = email.utils.formatdate(usegmt=True)
    version = "2021-08-06"
    path, _, query = url.split(f"/{AZ_ACCOUNT}", 1)[1].partition("?")
    params = "".join(f"\n{k}:{v}" for k, v in sorted(p.split("=", 1) for p in query.split("&")
                                                      if p))
    canonical = (f"{method}\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n"
                 f"/{AZ_ACCOUNT}/{AZ_ACCOUNT}{path}{params}")
    signature = base64.b64encode(hmac.new(base64.b64decode(AZ_KEY), canonical.encode(),
                                          hashlib.sha256).digest()).decode()
    response = requests.request(method, url, timeout=PEER_TIMEOUT, headers={
        "x-ms-date": date, "x-ms-version": version,
        "Authorization": f"SharedKey {AZ_ACCOUNT}:{signature}"})
    if response.status_code not in (201, 409):  # 409: it exists already
        response.raise_for_status()
    return response


STARTERS = {"s3": start_s3, "gcs": start_gcs, "azure": start_azure}
