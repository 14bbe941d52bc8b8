"""Write golden neuroglancer_uint64_sharded_v1 fixtures using cloud-volume's own sharding code.

For each case this writes, into fixtures/cloudvolume/<case>/:
  * the ``.shard`` files exactly as ``synthesize_shard_files`` returns them (its file names),
  * ``info``: ``{"@type": "neuroglancer_skeletons", "sharding": <spec>}``,
  * ``expected.json``: decimal key -> hex SHA-256 of the value, plus ``"values_hex"``
    (decimal key -> full hex value) for up to 20 keys, always including the smallest
    and largest key and every empty value.
Each case is then read back with cloud-volume's ShardReader over a ``file://`` path.

Run from the repo root (cloud-volume lives in its own venv, outside the repo):
    /work/cvenv/bin/python tools/make_cloudvolume_fixtures.py
"""

import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from cloudvolume.cacheservice import CacheService
from cloudvolume.cloudvolume import SharedConfiguration
from cloudvolume.datasource.precomputed.sharding import (
    ShardingSpecification,
    ShardReader,
    synthesize_shard_files,
)

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "cloudvolume"
U64_MAX = 2**64 - 1

# name: (hash, preshift_bits, minishard_bits, shard_bits, minishard_index_encoding,
#        data_encoding, number of random keys, exclusive key bound, keys always included)
CASES = {
    "murmur_gzip": ("murmurhash3_x86_128", 0, 3, 2, "gzip", "gzip", 498, 2**64, [0, U64_MAX]),
    "identity_raw": ("identity", 2, 2, 3, "raw", "raw", 298, 100_001, [0, 100_000]),
    "identity_noshard": ("identity", 0, 0, 0, "raw", "gzip", 49, 10_000, [0]),
}
SPEC_FIELDS = ("hash", "preshift_bits", "minishard_bits", "shard_bits")
SPEC_FIELDS += ("minishard_index_encoding", "data_encoding")


def make_data(seed, n, high, extra):
    rng = np.random.default_rng(seed)
    keys = sorted({int(k) for k in rng.integers(0, high, size=n, dtype=np.uint64)} | set(extra))
    data = {}
    for k in keys:
        data[k] = rng.integers(0, 256, size=int(rng.integers(0, 301)), dtype=np.uint8).tobytes()
    data[keys[1]] = b""  # guarantee at least one empty value
    return data


def read_back(case_dir, spec, keys):
    url = case_dir.as_uri()
    # cdn_cache, compress, compress_level, green, mip, parallel, progress, secrets,
    # spatial_index_db, cache_locking, codec_threads
    config = SharedConfiguration(False, None, None, False, 0, 1, False, None, None, False, 1)
    cache = CacheService(url, enabled=False, config=config, meta=SimpleNamespace(cloudpath=url))
    reader = ShardReader(url, cache, spec)
    whole = {}  # second path: cloud-volume's whole-shard decoder
    for shard in case_dir.glob("*.shard"):
        whole.update(reader.disassemble_shard(shard.read_bytes()))
    return reader.get_data(keys), whole


def main():
    for seed, (name, (*fields, n, high, extra)) in enumerate(CASES.items()):
        fields = dict(zip(SPEC_FIELDS, fields, strict=True))
        spec = ShardingSpecification("neuroglancer_uint64_sharded_v1", **fields)
        data = make_data(seed, n, high, extra)
        case_dir = OUT / name
        shutil.rmtree(case_dir, ignore_errors=True)
        case_dir.mkdir(parents=True)
        for fname, blob in synthesize_shard_files(spec, data).items():
            (case_dir / fname).write_bytes(blob)

        spec_dict = {k: (v if isinstance(v, str) else int(v)) for k, v in spec.to_dict().items()}
        (case_dir / "info").write_text(
            json.dumps({"@type": "neuroglancer_skeletons", "sharding": spec_dict}, indent=2) + "\n"
        )

        keys = list(data)
        shown = sorted({*keys[:9], *keys[-9:], *[k for k in keys if not data[k]][:2]})
        expected = {str(k): hashlib.sha256(v).hexdigest() for k, v in data.items()}
        expected["values_hex"] = {str(k): data[k].hex() for k in shown}
        (case_dir / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")

        for got in read_back(case_dir, spec, keys):
            assert {int(k): bytes(v) for k, v in got.items()} == data, name
        files = sorted(p.name for p in case_dir.glob("*.shard"))
        print(f"{name}: {len(data)} keys, shards {files}; ShardReader read-back OK")


if __name__ == "__main__":
    main()
