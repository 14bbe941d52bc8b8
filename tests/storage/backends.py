"""The byte stores the Storage contract suite runs against, each with a way around it:
``put``/``get`` write and read the objects underneath without the store under test."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from urllib.parse import quote

import fsspec
import pytest
import requests
from objectstores import BUCKET
from peers import PEER_TIMEOUT

import ngshard
from ngshard import storage

ts = pytest.importorskip("tensorstore")

KINDS = ["local", "memory", "http", "http-plain", "s3", "gcs", "azure"]

class Backend:
    """A store under test, and its objects reached around it."""

    kind: str
    storage: storage.Storage
    #: False where tensorstore cannot read the store (it refuses servers that ignore Range).
    peer_reads = True

    def put(self, name: str, data: bytes) -> None:
        """Create or replace an object (a new file, as a writer renaming into place makes)."""
        raise NotImplementedError

    def get(self, name: str) -> bytes | None:
        raise NotImplementedError

    def write_kv(self, spec, items) -> None:
        """A sharded store in the root, written through the store where it can write."""
        ngshard.write_kv(self.storage, spec, items)

    def ts_kvstore(self) -> tuple[dict, ts.Context]:
        """A tensorstore kvstore spec for the root, and the context to open it in."""
        raise NotImplementedError


class DirBackend(Backend):
    """Objects as files of a local directory."""

    def __init__(self, root: Path) -> None:
        self.dir = root

    def put(self, name: str, data: bytes) -> None:
        path = self.dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".put-{uuid.uuid4().hex}")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def get(self, name: str) -> bytes | None:
        path = self.dir / name
        return path.read_bytes() if path.is_file() else None


class LocalBackend(DirBackend):
    kind = "local"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path / "store")
        self.dir.mkdir()
        self.storage = storage.open_storage(self.dir)

    def ts_kvstore(self):
        return {"driver": "file", "path": f"{self.dir}/"}, ts.Context()


class HttpBackend(DirBackend):
    """Read only: the server serves the directory the objects are put in."""

    kind = "http"

    def __init__(self, server) -> None:
        super().__init__(server.root / "store")
        self.dir.mkdir()
        self.base = f"{server.base}/store"
        self.storage = storage.open_storage(self.base)

    def write_kv(self, spec, items) -> None:
        ngshard.write_kv(self.dir, spec, items)

    def ts_kvstore(self):
        return {"driver": "http", "base_url": f"{self.base}/"}, ts.Context()


class PlainHttpBackend(HttpBackend):
    """``python3 -m http.server``: whole files for range requests, no ETag. Its generations
    rest on the size and Last-Modified, which counts whole seconds: each put moves the file's
    time on by a second, as time passing between writes would."""

    kind = "http-plain"
    peer_reads = False

    def __init__(self, server) -> None:
        super().__init__(server)
        self.clock = 1_700_000_000

    def put(self, name: str, data: bytes) -> None:
        super().put(name, data)
        self.clock += 1
        os.utime(self.dir / name, (self.clock, self.clock))


class MemoryBackend(Backend):
    kind = "memory"

    def __init__(self) -> None:
        self.fs = fsspec.filesystem("memory")
        self.root = f"/ngshard-contract-{uuid.uuid4().hex}/store"
        self.storage = storage.open_storage(f"memory://{self.root}")

    def put(self, name: str, data: bytes) -> None:
        self.fs.pipe_file(f"{self.root}/{name}", data)

    def get(self, name: str) -> bytes | None:
        try:
            return self.fs.cat_file(f"{self.root}/{name}")
        except FileNotFoundError:
            return None

    def ts_kvstore(self):
        """tensorstore cannot see fsspec's memory: copy every object the store lists (read
        through the store) into a tensorstore memory kvstore of a shared context."""
        context = ts.Context()
        memory = ts.KvStore.open({"driver": "memory"}, context=context).result(timeout=PEER_TIMEOUT)
        names = self.storage.list()
        for name, data in zip(names, self.storage.read_many(names)):
            memory.write(name, data).result(timeout=PEER_TIMEOUT)
        return {"driver": "memory"}, context


class ObjectStoreBackend(Backend):
    """A folder of the test bucket of an object-store server (tests/objectstores.py),
    reached around the store under test by a client of its own: obstore for S3 and Azure,
    the emulator's JSON API for GCS."""

    def __init__(self, server) -> None:
        self.server, self.kind = server, server.kind
        self.url = server.url(f"{uuid.uuid4().hex}/store")
        self.prefix = self.url.split(f"{BUCKET}/", 1)[1]
        self.storage = storage.open_storage(self.url, storage_options=server.options)
        if server.kind == "s3":
            from obstore.store import S3Store

            self.raw = S3Store(BUCKET, endpoint=server.endpoint, access_key_id="testing",
                               secret_access_key="testing", region="us-east-1",
                               client_options={"allow_http": True})
        elif server.kind == "azure":
            from obstore.store import AzureStore

            self.raw = AzureStore(BUCKET, endpoint=server.options["endpoint"],
                                  account_name=server.options["account_name"],
                                  account_key=server.options["account_key"],
                                  client_options={"allow_http": True})

    def put(self, name: str, data: bytes) -> None:
        key = f"{self.prefix}/{name}"
        if self.kind == "gcs":
            body = (b"--b\r\nContent-Type: application/json\r\n\r\n" +
                    json.dumps({"name": key}).encode() +
                    b"\r\n--b\r\nContent-Type: application/octet-stream\r\n\r\n" + data +
                    b"\r\n--b--")
            requests.post(f"{self.server.endpoint}/upload/storage/v1/b/{BUCKET}/o",
                          params={"uploadType": "multipart"}, data=body,
                          headers={"Content-Type": "multipart/related; boundary=b"},
                          timeout=PEER_TIMEOUT).raise_for_status()
        else:
            import obstore

            obstore.put(self.raw, key, data)

    def get(self, name: str) -> bytes | None:
        key = f"{self.prefix}/{name}"
        if self.kind == "gcs":
            r = requests.get(f"{self.server.endpoint}/storage/v1/b/{BUCKET}/o/"
                             f"{quote(key, safe='')}", params={"alt": "media"},
                             timeout=PEER_TIMEOUT)
            if r.status_code == 404:
                return None
            r.raise_for_status()
            return r.content
        import obstore

        try:
            return bytes(obstore.get(self.raw, key).bytes())
        except FileNotFoundError:
            return None

    def ts_kvstore(self):
        if self.kind == "azure":
            raise NotImplementedError("tensorstore has no Azure driver")
        if self.kind == "gcs":
            return {"driver": "gcs", "bucket": BUCKET, "path": f"{self.prefix}/"}, ts.Context()
        # tensorstore's S3 requests are signed with the environment's keys (moto takes any)
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        return {"driver": "s3", "bucket": BUCKET, "path": f"{self.prefix}/",
                "endpoint": self.server.endpoint, "aws_region": "us-east-1",
                "aws_credentials": {"type": "environment"}}, ts.Context()


class GcsBackend(ObjectStoreBackend):
    """The GCS emulator sends no ``x-goog-generation`` with its reads, which tensorstore's
    gcs driver needs to read within a shard ("Malformed StorageGeneration"): no peer
    read-back here (tensorstore's GCS requests are those of real GCS, not the emulator's)."""

    peer_reads = False


class AzureBackend(ObjectStoreBackend):
    peer_reads = False  # tensorstore has no Azure driver
