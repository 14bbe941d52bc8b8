"""PrecomputedStore against zarr-python's own Store test suite (``zarr.testing.store``).

The suite needs a backend it can put arbitrary keys into without the store: for this store
that is the layer's directory, whose files other than the layer's own are shown as they are.
The store cannot write: the suite's write tests are declared unsupported here (each asserts
the refusal instead), and the read tests that fill the store through ``store.set`` are run
with the same data put into the directory instead.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from peers import PEER_TIMEOUT
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import Buffer, cpu, default_buffer_prototype
from zarr.core.sync import _collect_aiterator
from zarr.testing.store import StoreTests

from ngshard.errors import ReadOnlyError
from ngshard.storage import open_storage
from ngshard.zarr import PrecomputedStore

READ_ONLY = "store was opened in read-only mode and does not support writing"


class TestPrecomputedStore(StoreTests[PrecomputedStore, cpu.Buffer]):
    store_cls = PrecomputedStore
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, tmp_path) -> dict:
        return {"url": str(tmp_path)}

    async def set(self, store: PrecomputedStore, key: str, value: Buffer) -> None:
        open_storage(store.storage.url).write(key, [value.to_bytes()])

    async def get(self, store: PrecomputedStore, key: str) -> Buffer:
        return self.buffer_cls.from_bytes(open_storage(store.storage.url).read(key))

    async def fill(self, store: PrecomputedStore, items) -> None:
        for key, value in items:
            await self.set(store, key, value)

    def test_store_repr(self, store: PrecomputedStore) -> None:
        assert repr(store) == f"PrecomputedStore({store.storage.url!r}, scale=0)"

    def test_store_supports_writes(self, store: PrecomputedStore) -> None:
        assert not store.supports_writes and not store.supports_deletes

    def test_store_supports_listing(self, store: PrecomputedStore) -> None:
        assert store.supports_listing

    # --- the write tests, declared unsupported -----------------------------------------------

    def test_store_read_only(self, store: PrecomputedStore) -> None:
        assert store.read_only
        with pytest.raises(AttributeError):
            store.read_only = False

    @pytest.mark.parametrize("read_only", [True, False])
    async def test_store_open_read_only(self, open_kwargs: dict, read_only: bool) -> None:
        if not read_only:
            with pytest.raises(ReadOnlyError, match="read-only"):
                await self.store_cls.open(**open_kwargs, read_only=False)
            return
        store = await self.store_cls.open(**open_kwargs, read_only=True)
        assert store._is_open and store.read_only

    async def test_serializable_store(self, store: PrecomputedStore) -> None:
        await self.set(store, "foo", self.buffer_cls.from_bytes(b"\x01\x02\x03\x04"))
        copy = pickle.loads(pickle.dumps(store))
        assert copy == store and copy.read_only
        got = await copy.get("foo", prototype=default_buffer_prototype())
        assert got.to_bytes() == b"\x01\x02\x03\x04"

    @pytest.mark.parametrize("key", ["zarr.json", "c/0", "foo/c/0.0"])
    async def test_set(self, store: PrecomputedStore, key: str) -> None:
        with pytest.raises(ValueError, match=READ_ONLY):
            await store.set(key, self.buffer_cls.from_bytes(b"\x01"))
        assert not await store.exists(key)

    async def test_set_not_open(self, store_not_open: PrecomputedStore) -> None:
        with pytest.raises(ValueError, match=READ_ONLY):
            await store_not_open.set("c/0", self.buffer_cls.from_bytes(b"\x01"))

    async def test_set_many(self, store: PrecomputedStore) -> None:
        with pytest.raises(ValueError, match=READ_ONLY):
            await store._set_many([("zarr.json", self.buffer_cls.from_bytes(b"{}"))])

    async def test_set_if_not_exists(self, store: PrecomputedStore) -> None:
        await self.set(store, "k", self.buffer_cls.from_bytes(b"0000"))
        await store.set_if_not_exists("k", self.buffer_cls.from_bytes(b"1111"))  # exists
        assert (await store.get("k", default_buffer_prototype())).to_bytes() == b"0000"
        with pytest.raises(ValueError, match=READ_ONLY):
            await store.set_if_not_exists("k2", self.buffer_cls.from_bytes(b"1111"))

    async def test_clear(self, store: PrecomputedStore) -> None:
        await self.set(store, "key", self.buffer_cls.from_bytes(b"something"))
        with pytest.raises(NotImplementedError):
            await store.clear()
        assert not await store.is_empty("")

    # --- read tests that fill the store through store.set: filled through the directory ----

    async def test_exists(self, store: PrecomputedStore) -> None:
        assert not await store.exists("foo")
        await self.set(store, "foo/zarr.json", self.buffer_cls.from_bytes(b"bar"))
        assert await store.exists("foo/zarr.json")
        assert not await store.exists("foo")  # a directory, not a key

    async def test_list(self, store: PrecomputedStore) -> None:
        assert await _collect_aiterator(store.list()) == ()
        keys = ["foo/zarr.json", *(f"foo/c/{i}" for i in range(10))]
        await self.fill(store, [(k, self.buffer_cls.from_bytes(b"")) for k in keys])
        assert sorted(await _collect_aiterator(store.list())) == sorted(keys)

    async def test_list_prefix(self, store: PrecomputedStore) -> None:
        prefixes = ("", "a/", "a/b/", "a/b/c/")
        keys = [f"{p}zarr.json" for p in prefixes]
        await self.fill(store, [(k, self.buffer_cls.from_bytes(b"")) for k in keys])
        for prefix in prefixes:
            observed = sorted(await _collect_aiterator(store.list_prefix(prefix)))
            assert observed == sorted(k for k in keys if k.startswith(prefix))
        # a prefix is a string prefix, not only a directory
        assert await _collect_aiterator(store.list_prefix("a/b/c/z")) == ("a/b/c/zarr.json",)

    async def test_list_empty_path(self, store: PrecomputedStore) -> None:
        keys = ["foo/bar/zarr.json", "foo/bar/c/1", "foo/baz/c/0"]
        await self.fill(store, [(k, self.buffer_cls.from_bytes(b"")) for k in keys])
        assert sorted(await _collect_aiterator(store.list())) == sorted(keys)
        assert sorted(await _collect_aiterator(store.list_prefix(""))) == sorted(keys)
        assert sorted(await _collect_aiterator(store.list_prefix("foo/bar/"))) == keys[:2][::-1]

    async def test_list_dir(self, store: PrecomputedStore) -> None:
        assert await _collect_aiterator(store.list_dir("")) == ()
        for root, keys in [("foo", ["foo/zarr.json", "foo/c/1"]),
                           ("foo/bar", ["foo/bar/foobar_first_child",
                                        "foo/bar/foobar_second_child/zarr.json"])]:
            assert await _collect_aiterator(store.list_dir(root)) == ()
            await self.fill(store, [(k, self.buffer_cls.from_bytes(b"1")) for k in keys])
            expected = sorted({k.removeprefix(root + "/").split("/")[0] for k in keys})
            assert sorted(await _collect_aiterator(store.list_dir(root))) == expected
            assert sorted(await _collect_aiterator(store.list_dir(root + "/"))) == expected

    async def test_getsize_prefix(self, store: PrecomputedStore) -> None:
        keys = ["c/0/0", "c/0/1", "c/1/0", "c/1/1"]
        await self.fill(store, [(k, self.buffer_cls.from_bytes(b"\x01\x02\x03\x04")) for k in keys])
        assert await store.getsize_prefix("c") == 16

    # --- more reads --------------------------------------------------------------------------

    async def test_get_ranges_past_the_end(self, store: PrecomputedStore) -> None:
        await self.set(store, "k", self.buffer_cls.from_bytes(b"0123456789"))
        proto = default_buffer_prototype()
        for request, expected in [(RangeByteRequest(8, 20), b"89"),
                                  (RangeByteRequest(12, 20), b""),
                                  (OffsetByteRequest(10), b""),
                                  (SuffixByteRequest(20), b"0123456789"),
                                  (SuffixByteRequest(0), b"")]:
            assert (await store.get("k", proto, request)).to_bytes() == expected
        assert await store.get("missing", proto, RangeByteRequest(0, 1)) is None

    async def test_keys_outside_the_directory_are_absent(self, tmp_path) -> None:
        (tmp_path / "secret").write_bytes(b"x")
        (tmp_path / "layer").mkdir()
        store = PrecomputedStore(tmp_path / "layer")
        proto = default_buffer_prototype()
        for key in ["../secret", "./../secret", "a//b", "/etc/hostname", "a\\..\\..\\secret"]:
            assert await store.get(key, proto) is None
            assert not await store.exists(key)


def test_import_ngshard_does_not_import_zarr_python():
    code = ("import sys, ngshard, ngshard.zarr; assert 'zarr' not in sys.modules; "
            "ngshard.zarr.PrecomputedStore; assert 'zarr' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=PEER_TIMEOUT)


def test_without_zarr_python_one_line_says_what_to_install():
    code = ("import sys; sys.modules['zarr'] = None  # as if not installed\n"
            "import ngshard.zarr\n"
            "try:\n"
            "    ngshard.zarr.PrecomputedStore\n"
            "except ngshard.MissingDependencyError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=PEER_TIMEOUT).stdout
    assert "pip install 'ngshard[zarr]'" in out, out
