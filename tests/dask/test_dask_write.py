"""ngshard.dask.write_kv on a LocalCluster of worker processes: the same shard files as the
local writer (tensorstore reads them), the last value of a repeated key wins, bad input is
refused, and a worker killed in the middle of a shard leaves no partial shard behind."""

from __future__ import annotations

import os
import socket
import sys

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
ts = pytest.importorskip("tensorstore")
import cloudpickle  # noqa: E402  (comes with dask)
import dask.bag as db  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402

import ngshard.dask  # noqa: E402
from ngshard.storage import LocalStorage  # noqa: E402

RAW = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=3, shard_bits=3,
                           minishard_index_encoding="gzip", data_encoding="raw")
GZIP = ngshard.ShardingSpec(hash="identity", preshift_bits=1, minishard_bits=2, shard_bits=2,
                            minishard_index_encoding="raw", data_encoding="gzip")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def pairs(n: int, seed: int = 0) -> list[tuple[int, bytes]]:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True).tolist()
    return [(k, rng.bytes(int(rng.integers(0, 60)))) for k in keys]


def shard_files(path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.shard"))}


def ts_contents(path, spec) -> dict[int, bytes]:
    kv = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded", "base": f"file://{path}/",
                          "metadata": spec.to_json()}).result(timeout=PEER_TIMEOUT)
    futures = {int.from_bytes(k, "big"): kv.read(k) for k in kv.list().result(timeout=PEER_TIMEOUT)}
    return {k: f.result(timeout=PEER_TIMEOUT).value for k, f in futures.items()}


def test_bag_gives_the_local_writers_bytes(client, tmp_path):
    items = pairs(3000)
    items += [(k, b"later %d" % k) for k, _ in items[:3000:7]]  # repeated: the later wins
    expected = dict(items)
    ngshard.write_kv(tmp_path / "local", RAW, expected)
    (tmp_path / "dask").mkdir()
    (tmp_path / "dask" / RAW.shard_filename(0)).write_bytes(b"an earlier store's shard")
    done = ngshard.dask.write_kv(tmp_path / "dask", RAW, db.from_sequence(items, npartitions=5),
                                 overwrite=True)
    assert isinstance(done, ngshard.ShardedKV) and done.mode == "r" and done.spec == RAW
    assert sorted(done.keys_array().tolist()) == sorted(expected)  # open for reading
    assert shard_files(tmp_path / "dask") == shard_files(tmp_path / "local")
    assert ts_contents(tmp_path / "dask", RAW) == expected
    assert sorted(os.listdir(tmp_path / "dask")) == sorted([*shard_files(tmp_path / "local"),
                                                             "info"])
    assert ngshard.open_kv(tmp_path / "dask").get_many(list(expected)) == expected


def test_dataframe_with_gzip_and_few_partitions(client, tmp_path):
    items = dict(pairs(2000, seed=1))
    ngshard.write_kv(tmp_path / "local", GZIP, items)
    with dask.config.set({"dataframe.convert-string": False}):
        frame = pd.DataFrame({"id": np.array(list(items), np.uint64),
                              "blob": pd.Series(list(items.values()), dtype=object)})
        ddf = dd.from_pandas(frame, npartitions=3)
    ngshard.dask.write_kv(tmp_path / "dask", GZIP, ddf, key="id", value="blob", npartitions=2)
    assert shard_files(tmp_path / "dask") == shard_files(tmp_path / "local")
    assert ts_contents(tmp_path / "dask", GZIP) == items


@pytest.mark.parametrize(("collection", "error", "message"), [
    (lambda: db.from_sequence([(1, b"a"), (2**64, b"b")], npartitions=2),
     ngshard.InvalidKeyError, "outside"),
    (lambda: db.from_sequence([(1, b"a"), (-2, b"b")], npartitions=1),
     ngshard.InvalidKeyError, "outside"),
    (lambda: db.from_sequence([(1, b"a"), (2, "text")], npartitions=1),
     TypeError, "value of key 2 must be bytes"),
    (lambda: dd.from_pandas(pd.DataFrame({"key": [1, 2], "value": ["a", "b"]}),
                            npartitions=1), TypeError, "must be bytes"),
    (lambda: dd.from_pandas(pd.DataFrame({"k": [1], "value": [b"a"]}), npartitions=1),
     ValueError, "no column key"),
    (lambda: [(1, b"a")], TypeError, "dask Bag"),
])
def test_bad_input(client, tmp_path, collection, error, message):
    with pytest.raises(error, match=message):
        ngshard.dask.write_kv(tmp_path, RAW, collection())
    assert not list(tmp_path.glob("*.shard"))


class DiesOnce(LocalStorage):
    """Local storage whose first shard write, on whichever worker gets it, writes half the
    shard into its temporary file and kills the worker process there."""

    def __init__(self, root: str, marker: str) -> None:
        super().__init__(root, durable=False)
        self.marker = marker

    def write(self, name, parts, if_generation=None, **kw):
        if name.endswith(".shard"):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.close(fd)
                # half a shard in a temporary file named as writers name them
                tmp = self.path(f".{name}~{os.getpid()}@{socket.gethostname()}~0a1b.tmp")
                with open(tmp, "wb") as f:
                    f.write(bytes(parts[0])[:100])
                os._exit(1)
        return super().write(name, parts)


def test_a_worker_killed_mid_shard_leaves_no_partial_shard(client, tmp_path):
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    items = dict(pairs(1500, seed=2))
    ngshard.write_kv(tmp_path / "local", RAW, items)
    storage = DiesOnce(str(tmp_path / "dask"), str(tmp_path / "marker"))
    ngshard.dask.write_kv(storage, RAW, db.from_sequence(list(items.items()), npartitions=4))
    assert (tmp_path / "marker").exists()  # a worker did die
    assert shard_files(tmp_path / "dask") == shard_files(tmp_path / "local")
    assert sorted(os.listdir(tmp_path / "dask")) == sorted([*shard_files(tmp_path / "local"),
                                                             "info"])
    assert ngshard.open_kv(tmp_path / "dask").get_many(list(items)) == items


@pytest.mark.parametrize("encoding", ["raw", "compressed_segmentation"])
def test_volume_chunks_give_the_local_writers_bytes(client, tmp_path, encoding):
    """A sharded scale written chunk by chunk from a bag: the shards of a local write."""
    rng = np.random.default_rng(4)
    data = rng.integers(0, 5, (70, 50, 40), dtype=np.uint32)  # edge chunks are clipped
    kw = dict(dtype="uint32", shape=data.shape, chunk_size=(16, 16, 16), encoding=encoding,
              sharding={"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity",
                        "preshift_bits": 2, "minishard_bits": 2, "shard_bits": 3,
                        "minishard_index_encoding": "gzip", "data_encoding": "gzip"})
    with ngshard.create_volume(tmp_path / "local", **kw) as vol:
        vol[:, :, :] = data
    ngshard.create_volume(tmp_path / "dask", **kw)  # its info
    chunks = [((x, y, z), data[16 * x:16 * x + 16, 16 * y:16 * y + 16, 16 * z:16 * z + 16])
              for x in range(5) for y in range(4) for z in range(3)]
    done = ngshard.dask.write_chunks(tmp_path / "dask", db.from_sequence(chunks, npartitions=6))
    assert isinstance(done, ngshard.Volume) and done.mode == "r"
    assert len(done.chunk_positions()) == 60 and (np.asarray(done)[..., 0] == data).all()
    key = ngshard.open_volume(tmp_path / "local").scale.key
    assert shard_files(tmp_path / "dask" / key) == shard_files(tmp_path / "local" / key)
    assert (np.asarray(ngshard.open_volume(tmp_path / "dask"))[..., 0] == data).all()
    with pytest.raises(ValueError, match=r"grid position \(0, 0, 0\) has shape"):
        ngshard.dask.write_chunks(tmp_path / "dask", db.from_sequence([((0, 0, 0), data)]))


def test_volume_chunks_from_a_mapped_bag(client, tmp_path):
    """A bag made with .map hands each partition over as an iterator: every chunk is
    written all the same (it was read twice, and nothing was written)."""
    ngshard.create_volume(tmp_path, dtype="uint16", shape=(64, 64, 16), chunk_size=(16, 16, 16),
                          sharding="auto")
    positions = [(x, y, 0) for x in range(4) for y in range(4)]
    chunks = db.from_sequence(positions, npartitions=3).map(
        lambda p: (p, np.full((16, 16, 16), 4 * p[0] + p[1], np.uint16)))
    done = ngshard.dask.write_chunks(tmp_path, chunks)
    assert len(done.chunk_positions()) == 16
    assert done[50, 10, 5, 0] == 12


def test_every_whole_shard_writer_gives_the_same_bytes(client, tmp_path):
    """The chunks of a conversion's sharded scale, written again through write_kv (arrays,
    and pairs spilled past a small buffer), ngshard.dask.write_kv and a ShardedKV commit in
    mode "w": every path writes each shard whole by one writer, so every shard file is the
    conversion's, byte for byte."""
    import ngshard.zarr

    data = np.random.default_rng(5).integers(0, 4, (40, 48, 56), dtype=np.uint8)
    data[:, :, :16] = 0  # chunks of zeros are left out
    src = ngshard.zarr.create_array(tmp_path / "src.zarr", data.shape, "uint8", (16, 16, 16))
    src[...] = data
    spec = ngshard.ShardingSpec(hash="identity", preshift_bits=1, minishard_bits=2,
                                shard_bits=3, minishard_index_encoding="gzip",
                                data_encoding="gzip")
    ngshard.convert(tmp_path / "src.zarr", tmp_path / "converted", sharding=spec.to_json(),
                    workers=1, progress=False)
    key = ngshard.open_volume(tmp_path / "converted").scale.key
    converted = shard_files(tmp_path / "converted" / key)
    kv = ngshard.open_kv(tmp_path / "converted" / key)
    items = kv.get_many(kv.keys_array())
    assert len(converted) > 2 and len(items) > 20
    ngshard.write_kv(tmp_path / "dict", spec, items)
    ngshard.write_kv(tmp_path / "spilled", spec, reversed(list(items.items())),
                     buffer_bytes=3000)
    ngshard.dask.write_kv(tmp_path / "dask", spec, db.from_sequence(list(items.items()),
                                                                    npartitions=3))
    with ngshard.open_kv(tmp_path / "committed", spec, "w") as kv:
        kv.update(items)
    for path in ("dict", "spilled", "dask", "committed"):
        assert shard_files(tmp_path / path) == converted, path


def test_one_task_per_shard_whatever_the_input_partitions(tmp_path):
    """2 input partitions, 8 shards: each writing task holds one shard's keys (its result
    names one shard), so a worker's memory is that of a shard, not of an input partition."""
    from dask.callbacks import Callback

    written = []

    class Watch(Callback):
        def _posttask(self, key, result, dsk, state, id):
            if isinstance(result, pd.DataFrame) and list(result.columns) == ["shard", "keys",
                                                                             "bytes"]:
                written.append(len(result))

    items = pairs(3000, seed=5)
    # in this process (callbacks see each task), whatever cluster another test started
    with dask.config.set({"scheduler": "sync", "dataframe.shuffle.method": "tasks"}), Watch():
        ngshard.dask.write_kv(tmp_path / "out", RAW, db.from_sequence(items, npartitions=2))
    # one result per writing task, then their concatenation
    assert written == [1] * RAW.num_shards + [RAW.num_shards]
    assert len(shard_files(tmp_path / "out")) == 8
    assert ts_contents(tmp_path / "out", RAW) == dict(items)
