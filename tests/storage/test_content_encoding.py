"""Objects stored with a Content-Encoding, as cloud-files stores a file written with
``compress=`` on S3 and Azure (the plain name, the coding recorded on the object): read
decoded, whole, through the object stores (real servers: moto, Azurite); a coding no twin
has, or bytes that do not decode, is an error naming the object. The same volumes on local
disk are cloud-volume's fixtures (``name.gz``, ``name.br``, ``name.zstd``)."""

from __future__ import annotations

import gzip
from pathlib import Path

import brotli
import numpy as np
import pytest
import zstandard
from backends import ObjectStoreBackend

import ngshard
from ngshard import CorruptDataError
from ngshard.compression import decode_content

FIXTURES = Path(__file__).parents[2] / "fixtures" / "cloudvolume_volumes"
CODING = {".gz": "gzip", ".br": "br", ".zstd": "zstd"}
CONTENT = bytes(range(256)) * 40


def encode(coding: str, data: bytes) -> bytes:
    return {"gzip": gzip.compress, "br": brotli.compress,
            "zstd": zstandard.ZstdCompressor().compress}[coding](data)


@pytest.fixture(params=["s3", "azure"])
def bucket(request) -> ObjectStoreBackend:
    return ObjectStoreBackend(request.getfixturevalue(f"{request.param}_server"))


def put(bucket: ObjectStoreBackend, name: str, data: bytes, coding: str | None) -> None:
    import obstore

    obstore.put(bucket.raw, f"{bucket.prefix}/{name}", data,
                attributes={"Content-Encoding": coding} if coding else None)


def test_objects_read_decoded_whole_and_as_stored_in_ranges(bucket):
    for coding in ("gzip", "br", "zstd"):
        put(bucket, f"f.{coding}", encode(coding, CONTENT), coding)
    put(bucket, "plain", CONTENT, None)
    store = bucket.storage
    assert store.read_many(["f.gzip", "f.br", "f.zstd", "plain", "absent"]) == \
        [CONTENT] * 4 + [None]
    assert store.read("f.br") == CONTENT


@pytest.mark.parametrize(("coding", "data", "says"), [
    ("compress", b"anything", "does not decode"),
    ("gzip", b"not gzip at all", "gzip"),
    ("br", b"not brotli at all", "br"),
])
def test_an_object_that_does_not_decode_is_an_error_naming_it(bucket, coding, data, says):
    put(bucket, "bad", data, coding)
    with pytest.raises(CorruptDataError, match=f"{bucket.prefix}/bad.*{says}"):
        bucket.storage.read("bad")


@pytest.mark.parametrize("case", ["raw_gzip", "raw_br", "raw_zstd", "cseg_gzip"])
def test_volumes_cloud_files_wrote_to_a_bucket(bucket, case):
    """A cloud-volume fixture as cloud-files lays it out in a bucket: its twins under their
    plain names, the coding on the object; read value for value as from the disk."""
    root = FIXTURES / case
    for path in root.rglob("*"):
        if path.is_file() and path.name != "expected.npz":
            name, dot, suffix = path.relative_to(root).as_posix().rpartition(".")
            coding = CODING.get(f".{suffix}") if dot else None
            put(bucket, name if coding else path.relative_to(root).as_posix(),
                path.read_bytes(), coding)
    with np.load(root / "expected.npz") as want:
        got = ngshard.open_volume(bucket.url, storage_options=bucket.server.options)
        np.testing.assert_array_equal(np.asarray(got), want["whole"])


def test_codings_are_undone_in_reverse_order_and_bounded():
    data = CONTENT
    both = brotli.compress(gzip.compress(data))
    assert decode_content(both, "gzip, br") == data
    assert decode_content(gzip.compress(data), "x-gzip") == data
    assert decode_content(data, "identity") == data
    with pytest.raises(CorruptDataError, match="where.*past"):
        decode_content(gzip.compress(bytes(10_000)), "gzip", "where", limit=1_000)
