"""The Storage contract: one suite every byte store passes (after zarr-python's StoreTests).

Each store kind comes with a way around it (``Backend.put``/``get`` write and read the objects
underneath without the store under test), so every method is checked against the real thing:
local files, fsspec's memory filesystem, HTTP (read only: objects are written into the
served directory), both from a server with Range support and ETags and from ``python3 -m
http.server``, which has neither, and the object stores S3 (moto's server), GCS
(gcp-storage-emulator) and Azure (Azurite), each a real server on 127.0.0.1. What a store
cannot do is skipped by its capability flags, never by its class. Each kind also has a peer
read-back: a sharded store written through it (or, read only, into the served directory) is
read by tensorstore, value for value, and by ngshard through the store under test.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from backends import (
    KINDS,
    AzureBackend,
    Backend,
    GcsBackend,
    HttpBackend,
    LocalBackend,
    MemoryBackend,
    ObjectStoreBackend,
    PlainHttpBackend,
)
from peers import PEER_TIMEOUT

import ngshard
from ngshard import storage
from ngshard.storage import ANY, FileSlice, Head, Ranges

ts = pytest.importorskip("tensorstore")



@pytest.fixture(params=KINDS)
def backend(request, tmp_path) -> Backend:
    if request.param == "local":
        return LocalBackend(tmp_path)
    if request.param == "memory":
        return MemoryBackend()
    if request.param == "http":
        return HttpBackend(request.getfixturevalue("http_server"))
    if request.param == "http-plain":
        return PlainHttpBackend(request.getfixturevalue("plain_http_server"))
    server = request.getfixturevalue(f"{request.param}_server")
    kinds = {"s3": ObjectStoreBackend, "gcs": GcsBackend, "azure": AzureBackend}
    return kinds[request.param](server)


def needs_writes(backend: Backend) -> storage.Storage:
    if not backend.storage.supports_writes:
        pytest.skip(f"{backend.kind} storage is read only")
    return backend.storage


def needs_append(backend: Backend) -> storage.Storage:
    if not backend.storage.supports_append:
        pytest.skip(f"{backend.kind} storage cannot append")
    return backend.storage


def blob(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, np.uint8).tobytes()


def as_bytes(chunks) -> list[bytes]:
    return [bytes(c) for c in chunks]


@pytest.mark.filterwarnings("ignore::ngshard.storage.RangesIgnoredWarning")
class TestStorageContract:
    # --- what the store says about itself ------------------------------------------------

    def test_capabilities_are_plain_flags(self, backend):
        s = backend.storage
        assert isinstance(s, storage.Storage)
        for flag in ("supports_writes", "supports_append", "reads_report_generation"):
            assert type(getattr(s, flag)) is bool
        assert s.local_root is None or os.path.isdir(s.local_root)
        assert s.supports_writes == (not backend.kind.startswith("http"))
        assert s.supports_append == (backend.kind == "local")

    def test_path_names_the_object(self, backend):
        s = backend.storage
        assert s.path("a.shard").endswith("/store/a.shard")
        assert s.path("a.shard").startswith(s.url.rstrip("/"))
        assert s.child("sub").path("x") == s.path("sub/x")

    # --- stat and whole reads -------------------------------------------------------------

    def test_stat_and_read_of_present_and_missing_objects(self, backend):
        s, data = backend.storage, blob(1000)
        backend.put("a", data)
        backend.put("empty", b"")
        info = s.stat("a")
        assert isinstance(info, storage.ObjectInfo)
        assert info.size == 1000
        hash(info.generation)
        assert s.read("a") == data
        assert s.stat("empty").size == 0 and s.read("empty") == b""
        assert s.stat("missing") is None
        assert s.read("missing") is None
        assert s.stat("no/such/dir/x") is None and s.read("no/such/dir/x") is None

    def test_stat_many_and_read_many(self, backend):
        s = backend.storage
        objects = {f"o{i}": blob(10 * i, seed=i) for i in range(12)}
        for name, data in objects.items():
            backend.put(name, data)
        names = ["missing-1", *objects, "missing-2"]
        infos = s.stat_many(names)
        assert infos[0] is None and infos[-1] is None
        assert [i.size for i in infos[1:-1]] == [len(v) for v in objects.values()]
        assert infos[1:-1] == [s.stat(n) for n in objects]
        assert s.read_many(names) == [None, *objects.values(), None]
        assert s.stat_many([]) == [] and s.read_many([]) == []

    def test_generation_changes_when_an_object_is_replaced(self, backend):
        s = backend.storage
        backend.put("a", b"x" * 100)
        first = s.stat("a").generation
        assert s.stat("a").generation == first  # stable while nothing changes
        backend.put("a", b"y" * 100)  # the same size, other bytes
        second = s.stat("a").generation
        assert second != first
        backend.put("a", b"y" * 101)
        assert s.stat("a").generation not in (first, second)

    # --- ranged reads ---------------------------------------------------------------------

    def test_read_ranges_of_several_objects_many_ranges(self, backend):
        s = backend.storage
        objects = {"a": blob(200_000, 1), "b": blob(5000, 2), "c": blob(30, 3)}
        for name, data in objects.items():
            backend.put(name, data)
        rng = np.random.default_rng(7)
        requests = []
        for name, data in objects.items():
            starts = rng.integers(0, len(data), 150)
            ranges = np.stack([starts, np.minimum(starts + rng.integers(0, 3000, 150),
                                                  len(data))], axis=1)
            ranges[:3] = [[0, 0], [0, len(data)], ranges[5]]  # empty, whole, a duplicate
            requests.append((name, ranges))
        requests.append(("missing", np.array([[0, 10]])))
        requests.append(("a", np.array([[10, 20]])))  # one object asked for twice
        got = s.read_ranges(requests)
        assert len(got) == len(requests)
        for (name, ranges), (gen, chunks) in zip(requests, got):
            if name == "missing":
                assert (gen, chunks) == (None, None)
                continue
            assert gen == s.stat(name).generation
            assert as_bytes(chunks) == [objects[name][a:b] for a, b in ranges.tolist()]
        assert s.read_ranges([]) == []

    def test_far_apart_ranges_and_ranges_that_merge(self, backend):
        s, data = backend.storage, blob(100_000)
        backend.put("a", data)
        ranges = np.array([[0, 10], [10, 20], [5, 15], [50_000, 50_100], [99_990, 100_000]])
        gen, chunks = s.read_ranges([("a", ranges)])[0]
        assert as_bytes(chunks) == [data[a:b] for a, b in ranges.tolist()]

    def test_reads_past_the_end_come_back_short(self, backend):
        s, data = backend.storage, blob(1000)
        backend.put("a", data)
        backend.put("empty", b"")
        got = s.read_ranges([("a", np.array([[990, 1010]])),
                             ("a", np.array([[5000, 6000]])),
                             ("a", np.array([[0, 4], [998, 2000], [3000, 4000]])),
                             ("empty", np.array([[0, 16]]))])
        assert [as_bytes(chunks) for _, chunks in got] == [
            [data[990:]], [b""], [data[:4], data[998:], b""], [b""]]

    def test_read_range(self, backend):
        s, data = backend.storage, blob(5000)
        backend.put("a", data)
        gen, chunk = s.read_range("a", 100, 350)
        assert bytes(chunk) == data[100:350]
        assert gen == s.stat("a").generation
        assert bytes(s.read_range("a", 4990, 5100)[1]) == data[4990:]
        assert s.read_range("missing", 0, 10) == (None, None)

    def test_reads_report_the_generation_they_read(self, backend):
        s = backend.storage
        backend.put("a", b"old" * 100)
        old = s.read_range("a", 0, 3)[0]
        backend.put("a", b"new" * 100)
        gen, chunk = s.read_range("a", 0, 3)
        assert bytes(chunk) == b"new"
        assert gen != old and gen == s.stat("a").generation

    def test_run_chains_answers_each_step_as_the_batch_reads_do(self, backend):
        s = backend.storage
        objects = {"a": blob(3000, 1), "b": blob(700, 2)}
        for name, data in objects.items():
            backend.put(name, data)

        def chain(name):  # the head, then the last 100 bytes its answer says are there
            head = yield Head(name, 10)
            if head is None:
                return None
            info, first = head
            gen, chunks = yield Ranges(name, np.array([[info.size - 100, info.size]]))
            return bytes(first), [bytes(c) for c in chunks], gen == info.generation

        got = s.run_chains([chain("a"), chain("missing"), chain("b")])
        assert got == [(objects["a"][:10], [objects["a"][-100:]], True), None,
                       (objects["b"][:10], [objects["b"][-100:]], True)]
        assert s.run_chains([]) == []

        def failing():
            yield Head("a", 10)
            raise ValueError("a chain's own error")

        with pytest.raises(ValueError, match="own error"):
            s.run_chains([chain("b"), failing()])

    # --- writes ---------------------------------------------------------------------------

    def test_write_replaces_whole_objects(self, backend):
        s = needs_writes(backend)
        s.write("a", [b"x" * 10, b"y", memoryview(b"zz")])
        assert backend.get("a") == b"x" * 10 + b"yzz"
        s.write("a", [b"short"])
        assert backend.get("a") == b"short"
        s.write("a", [])
        assert backend.get("a") == b"" and s.stat("a").size == 0
        s.write("sub/dir/b", [b"nested"])
        assert backend.get("sub/dir/b") == b"nested"
        assert s.child("sub").child("dir").read("b") == b"nested"

    def test_write_many(self, backend):
        s = needs_writes(backend)
        items = [(f"k{i}", blob(i * 7, i)) for i in range(10)]
        s.write_many(items)
        assert [backend.get(n) for n, _ in items] == [v for _, v in items]
        s.write_many([])

    def test_write_if_generation(self, backend):
        s = needs_writes(backend)
        s.write("a", [b"one"], if_generation=None)  # None: must not exist yet
        with pytest.raises(ngshard.ConflictError, match="changed on storage"):
            s.write("a", [b"two"], if_generation=None)
        assert backend.get("a") == b"one"
        gen = s.stat("a").generation
        s.write("a", [b"two"], if_generation=gen)  # still the generation we saw
        assert backend.get("a") == b"two"
        with pytest.raises(ngshard.ConflictError):  # a stale generation
            s.write("a", [b"three"], if_generation=gen)
        assert backend.get("a") == b"two"
        with pytest.raises(ngshard.ConflictError):  # was there, is gone
            s.write("gone", [b"x"], if_generation=gen)
        assert backend.get("gone") is None
        s.write("a", [b"four"], if_generation=ANY)
        assert backend.get("a") == b"four"

    def test_write_from_file_slices(self, backend, tmp_path):
        s = needs_writes(backend)
        source = tmp_path / "source"
        data = blob(10_000)
        source.write_bytes(data)
        s.write("a", [b"head", FileSlice(str(source), 100, 5000), b"tail"])
        assert backend.get("a") == b"head" + data[100:5100] + b"tail"
        # an owned slice that is the file from len(head) on: a local store takes the file over
        spill = tmp_path / "spill"
        spill.write_bytes(b"\0" * 4 + data)
        s.write("b", [b"HEAD", FileSlice(str(spill), 4, len(data), owned=True), b"!"])
        assert backend.get("b") == b"HEAD" + data + b"!"
        assert source.read_bytes() == data

    def test_failed_write_leaves_the_old_object_and_nothing_else(self, backend, tmp_path):
        s = needs_writes(backend)
        s.write("a", [b"old"])
        listed = s.list()
        with pytest.raises(FileNotFoundError):
            s.write("a", [b"new", FileSlice(str(tmp_path / "no-such-file"), 0, 10)])
        assert backend.get("a") == b"old"
        assert s.list() == listed

    def test_delete_many(self, backend):
        s = needs_writes(backend)
        for i in range(20):
            backend.put(f"r{i}", b"x")
        s.delete_many([f"r{i}" for i in range(15)] + ["never-was"])  # absent: ignored
        assert [n for n in s.list() if n.startswith("r")] == sorted(f"r{i}" for i in
                                                                    range(15, 20))
        s.delete_many([])

    def test_delete(self, backend):
        s = needs_writes(backend)
        backend.put("a", b"x")
        backend.put("b", b"y")
        s.delete("a")
        assert backend.get("a") is None and s.stat("a") is None
        s.delete("a")  # already gone: fine
        s.delete("never-was")
        gen = s.stat("b").generation
        backend.put("b", b"z")
        with pytest.raises(ngshard.ConflictError):
            s.delete("b", if_generation=gen)
        assert backend.get("b") == b"z"
        s.delete("b", if_generation=s.stat("b").generation)
        assert backend.get("b") is None

    def test_read_only_store_refuses_writes(self, backend):
        s = backend.storage
        if s.supports_writes:
            pytest.skip(f"{backend.kind} storage can write")
        backend.put("a", b"x")
        with pytest.raises(ngshard.ReadOnlyError, match="read-only"):
            s.write("a", [b"y"])
        with pytest.raises(ngshard.ReadOnlyError):
            s.write_many([("b", b"y")])
        with pytest.raises(ngshard.ReadOnlyError):
            s.delete("a")
        assert backend.get("a") == b"x" and backend.get("b") is None

    # --- append and patch -----------------------------------------------------------------

    def test_append_and_patch(self, backend):
        s = needs_append(backend)
        s.write("a", [b"HEAD", b"-body-"])
        info = s.stat("a")
        s.append_and_patch("a", info.generation, info.size, [b"tail", b"!"], b"head")
        assert backend.get("a") == b"head-body-tail!"
        after = s.stat("a")
        assert after.size == info.size + 5 and after.generation != info.generation
        with pytest.raises(ngshard.ConflictError):  # a stale generation: nothing written
            s.append_and_patch("a", info.generation, after.size, [b"more"], b"HEAD")
        with pytest.raises(ngshard.ConflictError):  # the offset is past the end
            s.append_and_patch("a", after.generation, after.size + 1, [b"more"], b"HEAD")
        assert backend.get("a") == b"head-body-tail!"
        # bytes past the offset (a dead append's tail) are replaced by the new tail
        s.append_and_patch("a", after.generation, info.size, [b"TAIL"], b"HEAD")
        assert backend.get("a") == b"HEAD-body-TAIL"

    def test_stores_that_cannot_append_say_so(self, backend):
        s = backend.storage
        if s.supports_append:
            pytest.skip(f"{backend.kind} storage can append")
        with pytest.raises(NotImplementedError):
            s.append_and_patch("a", None, 0, [b"x"], b"y")

    # --- the directory tree ---------------------------------------------------------------

    def test_list(self, backend):
        s = backend.storage
        assert s.list() == []
        for name in ("b.shard", "a.shard", "info", "sub/c"):
            backend.put(name, b"x")
        assert s.list() == ["a.shard", "b.shard", "info"]  # sorted, files only
        assert s.child("sub").list() == ["c"]
        assert s.child("nothing-here").list() == []

    def test_child_and_parent(self, backend):
        s = backend.storage
        backend.put("top", b"top")
        backend.put("sub/inner/x", b"x")
        inner = s.child("sub").child("inner")
        assert inner.read("x") == b"x"
        assert inner.url.rstrip("/") == s.url.rstrip("/") + "/sub/inner"
        assert inner.parent().parent().read("top") == b"top"
        assert inner.parent().parent().url.rstrip("/") == s.url.rstrip("/")
        assert type(inner) is type(s) and inner.supports_writes == s.supports_writes
        # parents end, at the top of the filesystem
        up, steps = s, 0
        while up is not None:
            up, steps = up.parent(), steps + 1
            assert steps < 50

    # --- names stay inside the root -------------------------------------------------------

    @pytest.mark.parametrize("name", ["../outside", "sub/../../outside", "/etc/hostname", "",
                                      "a//b", "./a", "a/.", "a\\..\\b", "a\x00b",
                                      "file:///etc/hostname", "gs://bucket/x", "C:x"])
    def test_names_outside_the_root_are_refused(self, backend, name):
        """Every method refuses a name that leaves the root before touching storage (so the
        message can say nothing of what lies outside)."""
        s = backend.storage
        backend.put("sub/x", b"inside")
        calls = [lambda: s.stat(name), lambda: s.read(name), lambda: s.read_many([name]),
                 lambda: s.stat_many([name]), lambda: s.read_range(name, 0, 10),
                 lambda: s.read_ranges([(name, np.array([[0, 10]]))]), lambda: s.child(name)]
        if s.supports_writes:
            calls += [lambda: s.write(name, [b"x"]), lambda: s.delete(name)]
        for call in calls:
            with pytest.raises(ngshard.SpecError, match="must name something inside"):
                call()
        if s.supports_writes:
            assert backend.get("outside") is None

    def test_folder_names_may_end_in_a_slash(self, backend):
        backend.put("sub/x", b"inside")
        assert backend.storage.child("sub/").read("x") == b"inside"

    def test_a_range_past_the_end_costs_what_the_object_holds(self, backend):
        """A range a hostile index claims (2**40 bytes of a 1000-byte object) reads the
        object's bytes, without a buffer of the size claimed."""
        s, data = backend.storage, blob(1000)
        backend.put("a", data)
        assert bytes(s.read_range("a", 10, 1 << 40)[1]) == data[10:]
        got = s.read_ranges([("a", np.array([[0, 1 << 40], [999, (1 << 40) + 5]]))])[0][1]
        assert as_bytes(got) == [data, data[999:]]

    # --- peers read what is written through the store -------------------------------------

    @pytest.mark.parametrize("spec", [
        {"hash": "murmurhash3_x86_128", "minishard_bits": 3, "shard_bits": 2,
         "minishard_index_encoding": "gzip", "data_encoding": "gzip"},
        {"hash": "identity", "preshift_bits": 1, "minishard_bits": 2, "shard_bits": 1,
         "minishard_index_encoding": "raw", "data_encoding": "raw"},
    ], ids=["murmur-gzip", "identity-raw"])
    def test_tensorstore_reads_a_store_written_through_it(self, backend, spec):
        spec = {"@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 0, **spec}
        rng = np.random.default_rng(3)
        keys = np.unique(rng.integers(0, 2**64 - 1, 400, np.uint64, endpoint=True)).tolist()
        items = {k: rng.bytes(int(rng.integers(0, 200))) for k in [0, 2**64 - 1, *keys]}
        absent = [k for k in rng.integers(0, 2**63, 30).tolist() if k not in items]
        backend.write_kv(spec, items)
        # ngshard reads the store back through the store under test
        mine = ngshard.open_kv(backend.storage, spec)
        assert mine.get_many([*items, *absent]) == items
        assert sorted(mine.keys_array().tolist()) == sorted(items)
        if not backend.peer_reads:
            pytest.skip(f"tensorstore cannot read {backend.kind} storage")
        base, context = backend.ts_kvstore()
        kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": base,
                              "metadata": spec}, context=context).result(timeout=PEER_TIMEOUT)
        reads = [(k, kv.read(k.to_bytes(8, "big"))) for k in [*items, *absent]]
        got = {}
        for k, future in reads:
            r = future.result(timeout=PEER_TIMEOUT)
            if r.state == "value":
                got[k] = bytes(r.value)
        assert got == items
