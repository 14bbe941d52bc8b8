"""Checking a sharded store from end to end: every shard, index, key and chunk."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .compression import decode, split_twin
from .errors import NgShardError
from .progress import progress_bar
from .sharded import ShardedKV, legacy
from .sharded.format import Entries, decode_all, decode_shard_index
from .sharded.trailer import live_bytes
from .threads import WORKERS, bounded_map
from .volume import Volume
from .volume.encodings import require_codec
from .volume.handle import ScaleHandle


@dataclass
class VerifyReport:
    """What :func:`verify_kv` found: counts and one line per problem."""

    shards: int = 0
    keys: int = 0
    bytes: int = 0
    garbage_bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (f"{self.shards} shard(s), {self.keys} keys, {self.bytes} bytes "
                f"({self.garbage_bytes} unreferenced): "
                f"{'OK' if self.ok else f'{len(self.problems)} problem(s)'}")
        return "\n".join([head, *self.problems])


def _overlaps(ranges: np.ndarray) -> np.ndarray:
    """Rows of non-empty [start, end) ranges that overlap the range before them in start order."""
    ranges = ranges[ranges[:, 1] > ranges[:, 0]]
    order = np.lexsort((ranges[:, 1], ranges[:, 0]))
    r = ranges[order]
    reach = np.maximum.accumulate(r[:, 1])
    bad = np.flatnonzero(r[1:, 0] < reach[:-1]) + 1
    return r[bad]


def _check_shard(kv: ShardedKV, name: str, data: bytes, report: VerifyReport
                 ) -> np.ndarray | None:
    """Check one whole shard; returns its keys, None if its indices do not decode."""
    spec, where = kv.spec, kv.storage.path(name)
    report.shards += 1
    report.bytes += len(data)
    try:
        indices = decode_all(spec, memoryview(data), where)
    except NgShardError as e:
        report.problems.append(str(e))
        return None
    ranges = decode_shard_index(data[:spec.shard_index_size], spec.num_minishards,
                                len(data), where)
    entries = Entries.of(indices)
    report.keys += len(entries.keys)
    report.garbage_bytes += len(data) - live_bytes(spec, ranges, indices)
    problems = report.problems
    num = spec.parse_shard_filename(name)
    shard_of, minishard_of = spec.locate(entries.keys)
    wrong = np.flatnonzero((shard_of != num) | (minishard_of != entries.minishards))
    problems += [f"{where}: key {int(entries.keys[i])} is stored in minishard "
                 f"{int(entries.minishards[i])} but belongs in shard "
                 f"{spec.shard_filename(int(shard_of[i]))} minishard {int(minishard_of[i])}"
                 for i in wrong[:10].tolist()]
    spans = np.concatenate([
        np.array([[0, spec.shard_index_size]], np.uint64), ranges,
        np.stack([entries.starts, entries.starts + entries.sizes], axis=1)])
    problems += [f"{where}: bytes [{s}, {e}) overlap another index or chunk"
                 for s, e in _overlaps(spans)[:10].tolist()]
    if spec.data_encoding != "raw":
        for key, s, n in zip(entries.keys.tolist(), entries.starts.tolist(),
                             entries.sizes.tolist()):
            try:
                decode(data[s:s + n], spec.data_encoding, f"{where} (chunk {key} at {s})")
            except NgShardError as e:
                problems.append(str(e))
    return entries.keys


def verify_kv(kv: ShardedKV, *, progress: bool = False) -> VerifyReport:
    """Read every shard of a store whole and check it: shard index bounds, minishard indices
    decode, no ranges overlap, every key sits in its own shard and minishard, and encoded
    chunks decode. Shards are checked a few at a time on threads; memory is those shards."""
    return _verify_shards(kv, progress, keep_keys=False)[0]


def _verify_shards(kv: ShardedKV, progress: bool, keep_keys: bool = True
                   ) -> tuple[VerifyReport, np.ndarray]:
    """The report of :func:`verify_kv` and (``keep_keys``) the keys of the shards whose
    indices decode."""

    def check(name: str) -> tuple[VerifyReport, np.ndarray | None]:
        part = VerifyReport()
        try:
            data = _read_shard(kv, name)
        except NgShardError as e:  # a directory where the shard should be, say
            part.problems.append(str(e))
            return part, None
        if data is None:
            part.problems.append(f"{kv.storage.path(name)}: vanished during the check")
            return part, None
        return part, _check_shard(kv, name, data, part)

    report, keys = VerifyReport(), [np.zeros(0, np.uint64)]
    names = kv.shard_names()
    for part, found in progress_bar(bounded_map(check, names, WORKERS), total=len(names),
                                    desc="verifying", unit="shard", enabled=progress):
        report.shards += part.shards
        report.keys += part.keys
        report.bytes += part.bytes
        report.garbage_bytes += part.garbage_bytes
        report.problems += part.problems
        if keep_keys and found is not None:
            keys.append(found)
    stray = kv.storage.list() if kv.storage.supports_listing else []  # probed: none stray
    for n in stray:
        if n.endswith(".shard") and kv.spec.parse_shard_filename(n) is None:
            report.problems.append(f"{kv.storage.path(n)}: not a shard name of this spec "
                                   f"(shard_bits {kv.spec.shard_bits})")
    return report, np.concatenate(keys)


def _read_shard(kv: ShardedKV, name: str) -> bytes | None:
    """A whole shard (an obsolete two-file shard's two files as one), None if gone."""
    data = kv.storage.read(name)
    if data is None:
        index, rest = (kv.storage.read(n) for n in legacy.pair_names(name))
        data = None if index is None or rest is None else index + rest
    return data


def verify_volume(vol: Volume | ScaleHandle, *, progress: bool = False) -> VerifyReport:
    """Check one scale of a volume: its shards as :func:`verify_kv` does, that every stored
    chunk belongs to the grid, and that every chunk decodes to its clipped shape, and that
    no conversion into the layer left tasks of this scale undone (its resume records say
    so). ``keys`` counts the chunks.

    Raises MissingDependencyError (rather than reporting every chunk as a problem) where the
    scale's encoding needs a package that is not installed; UnlistableError where the
    scale's chunk files cannot be listed (an unsharded scale over HTTP without listings)."""
    from .pipelines.resume import unfinished

    handle = vol.handle if isinstance(vol, Volume) else vol
    require_codec(handle.scale.encoding, writing=False)
    left = unfinished(handle.storage, handle.scale.key)
    chunks = handle.store
    if chunks.kv is not None:
        report, codes = _verify_shards(chunks.kv, progress)
        report.keys = 0
        inside = handle.grid.codes_in_grid(codes)
        report.problems += [f"{chunks.kv.storage.url}: chunk {int(k)} lies outside the "
                            f"{handle.grid.shape} chunk grid" for k in codes[~inside][:10]]
        positions = handle.grid.unmorton(codes[inside])
    else:
        report, found = VerifyReport(), []
        for name in chunks.storage.list():
            try:
                found.append(handle.grid.parse_chunk_name(split_twin(name)[0]))
            except NgShardError:
                report.problems.append(f"{chunks.storage.path(name)}: not a chunk of the "
                                       f"{handle.grid.shape} chunk grid")
        # a chunk stored both plain and as a twin is read (as readers read it) once
        positions = np.unique(np.array(found, np.int64).reshape(-1, 3), axis=0)
    starts, stops = handle.grid.bounds(positions)
    shapes = [(*s, handle.info.num_channels) for s in (stops - starts).tolist()]
    batches = range(0, len(positions), 256)
    for first in progress_bar(batches, desc="decoding", unit="batch", enabled=progress):
        batch = positions[first:first + 256]
        try:
            blobs = chunks.get(batch)
        except NgShardError as e:  # reported by the shard checks already, or a new problem
            if str(e) not in report.problems:
                report.problems.append(str(e))
            continue
        for i, blob in enumerate(blobs, first):
            if blob is None:
                continue
            try:
                handle.codec.decode(blob, shapes[i], chunks.where(positions[i].tolist()))
                report.keys += 1
            except NgShardError as e:
                report.problems.append(str(e))
    if left is not None:
        report.problems.append(left)
    return report
