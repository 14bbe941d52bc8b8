"""Random sequences of staged reads, writes (basic and orthogonal indices, whole and partial
chunks), resizes, commits and aborts on zarr arrays, sharded or not, plus writes that commit
at once, checked against a numpy model after every step and, after each commit, against
tensorstore and zarr-python reading what was stored. Small memory budgets make staged slabs
go back to the store before the commit."""

from __future__ import annotations

import tempfile

import numpy as np
import tensorstore as ts
import zarr
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule
from peers import PEER_TIMEOUT
from staged_oracle import box_index, index, oget, oset
from test_staged_state_machine import SETTINGS, ModelMachine, random_value

from ngshard.zarr import create_array, open_array


class ZarrMachine(ModelMachine):
    sharded = True

    @initialize(data=st.data())
    def setup(self, data):
        self.path = tempfile.mkdtemp(prefix="ngshard-zarr-machine-")
        ndim = data.draw(st.integers(1, 3))
        shape = tuple(data.draw(st.integers(1, 11)) for _ in range(ndim))
        chunks = tuple(data.draw(st.integers(1, 4)) for _ in range(ndim))
        shards = tuple(c * data.draw(st.integers(1, 3)) for c in chunks) if self.sharded \
            else None
        self.fill = data.draw(st.sampled_from([0, 3]))
        self.dtype = np.dtype(data.draw(st.sampled_from(["uint16", "int32"])))
        compression = data.draw(st.sampled_from([[], [{"name": "gzip",
                                                       "configuration": {"level": 1}}]]))
        transpose = [{"name": "transpose", "configuration": {"order": list(range(ndim))[::-1]}}]
        codecs = (transpose if data.draw(st.booleans()) else []) + [
            {"name": "bytes", "configuration": {"endian": "little"}}] + compression
        self.arr = create_array(self.path, shape, self.dtype, chunks, shards=shards,
                                codecs=codecs, fill_value=self.fill,
                                index_location=data.draw(st.sampled_from(["start", "end"])))
        chunk_bytes = int(np.prod(chunks)) * self.dtype.itemsize
        self.arr.array.staged_bytes = data.draw(st.sampled_from([2 * chunk_bytes, 1 << 30]))
        self.arr.array.write_through_bytes = self.arr.array.staged_bytes // 8
        self.budget = self.arr.array.staged_bytes
        self.staged = self.arr.staged()
        self.model = np.full(shape, self.fill, self.dtype)
        if data.draw(st.booleans()):
            first = np.random.default_rng(1).integers(0, 9, shape).astype(self.dtype)
            self.arr[...] = first
            self.model = first
        self.committed = self.model.copy()

    @rule(data=st.data())
    def write_whole_chunks(self, data):
        idx = box_index(data.draw, self.model.shape, self.arr.chunks)
        value = random_value(data, oget(self.model, idx).shape, self.dtype, 2**15)
        if data.draw(st.booleans()):
            event("whole chunks of the fill value (left out of shards)")
            value = self.dtype.type(self.fill)
        self.stage(idx, value)

    @rule(data=st.data())
    def write_at_once(self, data):
        """``arr[...] = value``: stored at once, with whatever was staged."""
        idx = data.draw(index(self.model.shape))
        value = random_value(data, oget(self.model, idx).shape, self.dtype, 9)
        self.arr[idx] = value
        oset(self.model, idx, value)
        self._committed()

    @rule(data=st.data())
    def resize(self, data):
        self.resize_staged(tuple(data.draw(st.integers(1, 13)) for _ in self.model.shape))

    @precondition(lambda self: hasattr(self, "arr"))
    @rule()
    def commit(self):
        self.staged.commit()
        self._committed()

    def _committed(self):
        self.committed = self.model.copy()
        stored = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": self.path}},
                         open=True).result(timeout=PEER_TIMEOUT)
        np.testing.assert_array_equal(stored.read().result(timeout=PEER_TIMEOUT), self.model)
        np.testing.assert_array_equal(zarr.open_array(self.path, mode="r")[...], self.model)
        np.testing.assert_array_equal(open_array(self.path)[...], self.model)

    @invariant()
    def matches_the_model(self):  # through the array, not the staged view
        if hasattr(self, "arr"):
            assert self.arr.shape == self.model.shape
            np.testing.assert_array_equal(self.arr[...], self.model)


class UnshardedZarrMachine(ZarrMachine):
    sharded = False


TestShardedZarr = ZarrMachine.TestCase
TestShardedZarr.settings = settings(SETTINGS, max_examples=40, stateful_step_count=20)
TestUnshardedZarr = UnshardedZarrMachine.TestCase
TestUnshardedZarr.settings = settings(SETTINGS, max_examples=15, stateful_step_count=20)
