"""Random sequences of reads, writes (basic and orthogonal indices, whole and partial chunks),
resizes, loads, commits and aborts, checked against a numpy model after every step: on a bare
StagedChangesArray over whole-edge-chunk storage (zarr's layout), and on precomputed volumes,
sharded or not, whose stored data tensorstore reads back after every commit. Small memory
budgets make staged slabs go back to the store (and its spill files) all the time."""

from __future__ import annotations

import shutil
import tempfile

import numpy as np
import tensorstore as ts
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from peers import PEER_TIMEOUT
from staged_oracle import box_index, expand, index, oget, oset

import ngshard
from ngshard.staged import MemoryChunks, StagedChangesArray

SETTINGS = settings(max_examples=60, stateful_step_count=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def random_value(data, shape, dtype, rng_max: int):
    """A value for ``shape``: the full array, a scalar, or one that broadcasts."""
    style = data.draw(st.sampled_from(["full", "full", "scalar", "broadcast"]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    if style == "scalar" or not shape:
        return dtype.type(rng.integers(0, rng_max))
    if style == "broadcast":
        shape = tuple(1 if data.draw(st.booleans()) else n for n in shape)
        shape = shape[data.draw(st.integers(0, len(shape))):]
    value = rng.integers(0, rng_max, shape).astype(dtype)
    if data.draw(st.booleans()):  # Fortran order: whole chunks get slabs of that order
        event("value in Fortran order")
        value = np.asfortranarray(value)
    return value


def note(idx) -> None:
    """Record the kinds of index used (``--hypothesis-show-statistics`` lists them)."""
    for part in idx if isinstance(idx, tuple) else (idx,):
        if isinstance(part, slice):
            event(f"index: slice step {'-' if (part.step or 1) < 0 else '+'}"
                  f"{'1' if abs(part.step or 1) == 1 else 'n'}")
        elif isinstance(part, np.ndarray):
            event(f"index: {'mask' if part.dtype == bool else 'int array'}")
        else:
            event(f"index: {'ellipsis' if part is Ellipsis else 'integer'}")


def note_staging(written_back: bool, budget: int) -> None:
    if written_back:
        event("staged slabs written back to the store before the commit (over budget)")
    if budget < 1 << 30:
        event("small budget")


def note_resize(old: tuple[int, ...], new: tuple[int, ...]) -> None:
    event("resize: " + ("grow" if all(a >= b for a, b in zip(new, old))
                        else "shrink" if all(a <= b for a, b in zip(new, old))
                        else "grow and shrink"))


def resized(model: np.ndarray, shape: tuple[int, ...], fill) -> np.ndarray:
    out = np.full(shape, fill, model.dtype)
    common = tuple(slice(0, min(a, b)) for a, b in zip(model.shape, shape))
    out[common] = model[common]
    return out


class ModelMachine(RuleBasedStateMachine):
    """What the machines here and the zarr ones do alike: ``self.staged`` is read, written and
    aborted, and checked against ``self.model``, a numpy array of ``self.dtype``;
    ``self.committed`` is the model at the last commit, ``self.budget`` the staging budget."""

    write_max = 9  # ``write`` stores values below this

    def teardown(self):
        if hasattr(self, "path"):  # the machines that store files
            shutil.rmtree(self.path, ignore_errors=True)

    def spilled(self) -> int:
        """How many times staged slabs went back to the store (0 where not counted)."""
        return 0

    def stage(self, idx, value) -> None:
        """``self.staged[idx] = value``, and the same to the model."""
        before = self.spilled()
        self.staged[idx] = value
        note_staging(self.spilled() > before, self.budget)
        oset(self.model, idx, value)

    def resize_staged(self, shape: tuple[int, ...]) -> None:
        """``self.staged.resize(shape)``, and the same to the model."""
        note_resize(self.model.shape, shape)
        self.staged.resize(shape)
        self.model = resized(self.model, shape, self.fill)

    @rule(data=st.data())
    def read(self, data):
        idx = data.draw(index(self.model.shape))
        np.testing.assert_array_equal(self.staged[idx], oget(self.model, idx))

    @rule(data=st.data())
    def write(self, data):
        idx = data.draw(index(self.model.shape))
        note(idx)
        self.stage(idx, random_value(data, oget(self.model, idx).shape, self.dtype,
                                     self.write_max))

    @rule()
    def abort(self):
        self.staged.abort()
        self.model = self.committed.copy()

    @invariant()
    def matches_the_model(self):
        if hasattr(self, "staged"):
            assert self.staged.shape == self.model.shape
            np.testing.assert_array_equal(self.staged[...], self.model)


class ArrayMachine(ModelMachine):
    """StagedChangesArray over MemoryChunks (whole chunks at the edge, as zarr stores them)."""

    write_max = 1000

    @initialize(data=st.data())
    def setup(self, data):
        ndim = data.draw(st.integers(1, 3))
        shape = tuple(data.draw(st.integers(0, 11)) for _ in range(ndim))
        chunks = tuple(data.draw(st.integers(1, 5)) for _ in range(ndim))
        self.fill = data.draw(st.integers(-2, 2))
        self.dtype = np.dtype(np.int32)
        self.source = MemoryChunks(shape, chunks, "int32", self.fill,
                                   data.draw(st.sampled_from("CF")))
        chunk_bytes = int(np.prod(chunks)) * 4
        self.budget = data.draw(st.sampled_from([1, 2 * chunk_bytes, 5 * chunk_bytes, 1 << 30]))
        self.staged = StagedChangesArray(self.source, self.budget)
        self.model = np.full(shape, self.fill, np.int32)
        if data.draw(st.booleans()) and all(shape):  # something stored to begin with
            first = np.random.default_rng(0).integers(0, 50, shape).astype(np.int32)
            self.staged[...] = first
            self.staged.commit()
            self.model = first
        self.committed = self.model.copy()

    def spilled(self) -> int:
        return self.source.writes

    def stage(self, idx, value) -> None:
        if self.staged.setitem_plan(idx).through is not None:
            event("whole chunks written through")
        super().stage(idx, value)

    @rule(data=st.data())
    def write_whole_chunks(self, data):
        if not all(self.model.shape):
            return
        idx = box_index(data.draw, self.model.shape, self.source.geometry.chunks)
        value = random_value(data, oget(self.model, idx).shape, self.dtype, self.write_max)
        reads = self.source.reads
        self.stage(idx, value)
        assert self.source.reads == reads or not self._aligned(idx)

    def _aligned(self, idx) -> bool:
        g = self.source.geometry
        return all(s.start % c == 0 and (s.stop % c == 0 or s.stop == n)
                   for s, c, n in zip(idx, g.chunks, g.shape))

    @rule(data=st.data())
    def resize(self, data):
        self.resize_staged(tuple(data.draw(st.integers(0, 13)) for _ in self.model.shape))

    @rule()
    def load(self):
        self.staged.load()

    @rule()
    def commit(self):
        self.staged.commit()
        self.committed = self.model.copy()
        np.testing.assert_array_equal(self.source.array(), self.model)
        assert self.staged.nbytes_staged == 0

    @invariant()
    def stays_within_the_budget(self):
        if hasattr(self, "staged"):
            assert self.staged.nbytes_staged <= self.budget or \
                len(self.staged.map.live_slabs()) <= 1


class InCoordinates:
    """A volume indexed as the model is (numpy: from 0, negative from the end, slices
    clipped): each index is translated to the same voxels in the volume's own coordinates."""

    def __init__(self, vol) -> None:
        self.vol = vol

    def index(self, idx) -> tuple:
        idx = expand(idx, 4)
        out = []
        for i, n, o in zip(idx, self.vol.shape, self.vol.voxel_offset):
            if isinstance(i, slice):
                a, b, step = i.indices(n)
                out.append(slice(a + o, None if b < 0 else b + o, step))
            elif isinstance(i, (int, np.integer)):
                out.append(i % n + o)
            else:
                arr = np.asarray(i)
                out.append(arr if arr.dtype == bool else np.where(arr < 0, arr + n, arr) + o)
        return (*out, idx[3])

    def __getitem__(self, idx):
        return self.vol[self.index(idx)]

    def __setitem__(self, idx, value) -> None:
        self.vol[self.index(idx)] = value

    def __getattr__(self, name):
        return getattr(self.vol, name)


class VolumeMachine(ModelMachine):
    """Precomputed volumes, sharded or not, raw or compressed_segmentation (each pair a test
    of its own below), checked against tensorstore reading what each commit stored."""

    sharding: str | None = None
    encoding = "raw"

    @initialize(data=st.data())
    def setup(self, data):
        self.path = tempfile.mkdtemp(prefix="ngshard-machine-")
        size = tuple(data.draw(st.integers(1, 11)) for _ in range(3))
        chunk = tuple(data.draw(st.integers(1, 4)) for _ in range(3))
        channels = data.draw(st.integers(1, 2))
        encoding, sharding = self.encoding, self.sharding
        self.dtype = np.dtype("uint16" if encoding == "raw" else "uint32")
        spec = None if sharding is None else {
            "@type": "neuroglancer_uint64_sharded_v1", "preshift_bits": 1,
            "hash": "identity" if sharding == "identity" else "murmurhash3_x86_128",
            "minishard_bits": 1, "shard_bits": 2, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}
        chunk_bytes = int(np.prod(chunk)) * channels * np.dtype(self.dtype).itemsize
        self.vol = ngshard.create_volume(
            self.path, dtype=self.dtype, shape=(*size, channels), chunk_size=chunk,
            encoding=encoding, sharding=spec, voxel_offset=(3, -2, 0),
            compressed_segmentation_block_size=(2, 3, 2),
            staged_bytes=data.draw(st.sampled_from([2 * chunk_bytes, 1 << 30, 2 * chunk_bytes])))
        self.staged = InCoordinates(self.vol)
        self.budget = self.vol.array.staged_bytes
        self.model = np.zeros((*size, channels), self.dtype)
        self.spills, spill = 0, self.vol.encoded().spill

        def counted_spill():  # called after staged slabs go back to the store
            self.spills += 1
            spill()

        self.vol.encoded().spill = counted_spill
        if data.draw(st.booleans()):
            first = np.random.default_rng(1).integers(0, 9, self.model.shape).astype(self.dtype)
            self.vol[...] = first
            self.vol.commit()
            self.model = first
        self.committed = self.model.copy()

    def spilled(self) -> int:
        return self.spills

    @rule(data=st.data())
    def write_whole_chunks(self, data):
        idx = box_index(data.draw, self.model.shape[:3], self.vol.chunk_size)
        self.stage(idx, random_value(data, oget(self.model, idx).shape, self.dtype, 2**16))

    @rule(data=st.data())
    def resize(self, data):
        if data.draw(st.booleans()):
            size = tuple(data.draw(st.integers(1, 13)) for _ in range(3))
        else:  # within the grid's powers of two: a sharded scale can take it
            size = tuple(data.draw(st.integers(max(1, (1 << (b - 1)) * c + 1) if b else 1,
                                               (1 << b) * c))
                         for b, c in zip(self.vol.grid.bits, self.vol.chunk_size))
        shape = (*size, self.model.shape[3])
        grid = ngshard.volume.grid.ChunkGrid(size, self.vol.chunk_size)
        if self.vol.scale.sharding is not None and grid.bits != self.vol.grid.bits:
            try:
                self.vol.resize(size)
            except ngshard.SpecError as e:
                assert "Morton bits" in str(e)
                event("volume resize: refused (sharded, Morton bits change)")
                return
            raise AssertionError("a resize that changes the Morton bits went through")
        self.vol.resize(size)
        event(f"volume resize: {'sharded' if self.vol.scale.sharding else 'unsharded'}")
        self.model = resized(self.model, shape, 0)

    @rule()
    def load(self):
        self.vol.load()

    @precondition(lambda self: hasattr(self, "vol"))
    @rule()
    def commit(self):
        self.vol.commit()
        event(f"volume commit: {'sharded' if self.vol.scale.sharding else 'unsharded'}, "
              f"{self.vol.scale.encoding}")
        self.committed = self.model.copy()
        store = ts.open({"driver": "neuroglancer_precomputed",
                         "kvstore": {"driver": "file", "path": self.path}}
                        ).result(timeout=PEER_TIMEOUT)
        # read in its coordinates
        np.testing.assert_array_equal(store.read().result(timeout=PEER_TIMEOUT), self.model)
        np.testing.assert_array_equal(ngshard.open_volume(self.path)[...], self.model)


TestArrayMachine = ArrayMachine.TestCase
TestArrayMachine.settings = settings(SETTINGS, max_examples=100, stateful_step_count=30)


def volume_test(sharding: str | None, encoding: str):
    machine = type(f"VolumeMachine_{sharding}_{encoding}", (VolumeMachine,),
                   {"sharding": sharding, "encoding": encoding})
    test = machine.TestCase
    test.settings = settings(SETTINGS, max_examples=15, stateful_step_count=20)
    return test


TestUnshardedRawVolume = volume_test(None, "raw")
TestUnshardedSegmentation = volume_test(None, "compressed_segmentation")
TestIdentityShardedRawVolume = volume_test("identity", "raw")
TestIdentityShardedSegmentation = volume_test("identity", "compressed_segmentation")
TestMurmurShardedRawVolume = volume_test("murmur", "raw")
