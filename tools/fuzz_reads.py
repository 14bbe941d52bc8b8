"""Reading a damaged store with ngshard and tensorstore: each side's outcome, and the reads of
a key-value store or a volume that a case compares."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

import numpy as np
import tensorstore as ts
from fuzz_mutate import pick
from fuzz_probes import Memory
from fuzz_shardfmt import locate
from fuzz_stores import Case, Store

import ngshard

#: Seconds a tensorstore call may take before the run fails as hung (the test sets it to
#: tests/peers.py's); a timeout is never counted as tensorstore's "error" outcome.
PEER_TIMEOUT = 120

# --- reading with both ------------------------------------------------------------------------

@dataclass
class Outcome:
    kind: str  # "value", "missing", "error", "foreign"
    value: object = None

    def __str__(self) -> str:
        if self.kind == "value":
            v = self.value
            text = repr(bytes(v)[:24]) if isinstance(v, bytes) else \
                f"array {getattr(v, 'shape', '?')}" if isinstance(v, np.ndarray) else repr(v)
            return f"value {text[:120]}"
        return self.kind if self.value is None else f"{self.kind} {str(self.value)[:300]}"

    def same(self, other: Outcome) -> bool:
        if self.kind != other.kind:
            return False
        if self.kind != "value":
            return True
        a, b = self.value, other.value
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            a, b = np.asarray(a), np.asarray(b)
            return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
        return a == b


def ng_call(fn) -> Outcome:
    try:
        return Outcome("value", fn())
    except KeyError:
        return Outcome("missing")
    except ngshard.NgShardError as e:  # the message only: a traceback holds the read's buffers
        return Outcome("error", str(e))
    except Exception as e:  # a foreign exception: always a bug
        where = traceback.extract_tb(e.__traceback__)[-1]
        return Outcome("foreign", f"{type(e).__name__}: {e} at {where.filename}:{where.lineno}")


def ts_call(fn) -> Outcome:
    try:
        return Outcome("value", fn())
    except TimeoutError:
        raise  # tensorstore hung: the run fails, this is no outcome to compare
    except Exception as e:
        return Outcome("error", str(e))



@dataclass
class Read:
    """One comparison: what was read, each side's outcome, and the verdict."""

    what: str
    ng: Outcome
    ts: Outcome
    verdict: str = ""  # preset for ngshard's internal consistency checks
    key: int | None = None  # the key read from a kv store
    index: tuple = ()  # the box read from a volume


def contains_agrees(contains: Outcome, read: Outcome) -> bool:
    """``k in kv`` against ``kv[k]``: True for a value, False when missing; it reads no chunk
    data, so a key whose data is damaged may be True as well as an error."""
    if read.kind == "error":
        return contains.kind == "error" or contains.value is True
    return contains.kind == "value" and contains.value is (read.kind == "value")


def check_kv(store: Store, case: Case, rng, mem: Memory) -> list[Read]:
    spec, reads = store.spec, []
    tstore = ts.KvStore.open({"driver": "neuroglancer_uint64_sharded",
                              "base": f"file://{store.root}/", "metadata": spec},
                             context=ts.Context()).result(timeout=PEER_TIMEOUT)
    ts_list = ts_call(lambda: sorted(int.from_bytes(k, "big")
                                     for k in tstore.list().result(timeout=PEER_TIMEOUT)))
    with mem:
        kv = ngshard.open_kv(store.root, spec)
        ng_list = ng_call(lambda: sorted(kv.keys_array().tolist()))
    reads.append(Read("list", ng_list, ts_list))
    listed = {k for o in (ng_list, ts_list) if o.kind == "value" for k in o.value}
    extra = sorted(listed - set(store.keys) - set(store.absent))
    keys = store.keys + store.absent + [pick(rng, extra) for _ in range(min(8, len(extra)))]
    keys = list(dict.fromkeys(keys))
    futures = [tstore.read(k.to_bytes(8, "big")) for k in keys]
    theirs = [ts_call(lambda f=f: f.result(timeout=PEER_TIMEOUT)) for f in futures]
    theirs = [o if o.kind == "error" else Outcome("missing") if o.value.state == "missing"
              else Outcome("value", bytes(o.value.value)) for o in theirs]
    with mem:
        many, ours = ng_per_key(kv, keys, spec)
        for i in rng.choice(len(keys), min(3, len(keys)), replace=False).tolist():
            k = keys[i]
            single = ng_call(lambda k=k: kv[k])
            contains = ng_call(lambda k=k: k in kv)
            reads.append(Read(f"kv[{k}] against get_many", single, ours[i], "internal", k))
            if ours[i].kind != "foreign" and not contains_agrees(contains, ours[i]):
                reads.append(Read(f"{k} in kv", contains, ours[i], "internal: contains", k))
    if many.kind == "error" and all(o.kind != "error" for o in ours):
        reads.append(Read("get_many", many, Outcome("value", "every single read succeeds"),
                          "internal: get_many"))
    reads += [Read(f"key {k}", o, t, key=k) for k, o, t in zip(keys, ours, theirs)]
    return reads


def ng_per_key(kv, keys: list[int], spec: dict) -> tuple[Outcome, list[Outcome]]:
    """get_many of all keys, and ngshard's outcome for each key: from that batch, or where it
    fails, from one batch per minishard, and where that fails, from one read per key (ngshard
    refuses whole minishards, or single chunks)."""
    def batch(group: list[int]) -> tuple[Outcome, dict[int, Outcome] | None]:
        many = ng_call(lambda: kv.get_many(group))
        if many.kind == "error":
            return many, None
        return many, {k: many if many.kind == "foreign" else Outcome("value", many.value[k])
                      if k in many.value else Outcome("missing") for k in group}

    many, out = batch(keys)
    if out is None:
        out, groups = {}, {}
        for k in keys:
            groups.setdefault(locate(spec, k), []).append(k)
        for group in groups.values():
            got = batch(group)[1] if len(group) > 1 else None
            out.update(got or {k: ng_call(lambda k=k: kv[k]) for k in group})
    return many, [out[k] for k in keys]


def check_volume(store: Store, case: Case, rng, mem: Memory) -> list[Read]:
    shape, offset = store.volume["shape"], store.volume["offset"]
    lo = [int(rng.integers(n)) for n in shape]
    # voxel coordinates (from voxel_offset), as both libraries index
    box = tuple(slice(o + a, o + int(rng.integers(a + 1, n + 1)))
                for a, n, o in zip(lo, shape, offset))
    if store.volume["encoding"] == "png":
        case.hazard = png_hazard(case.chunk, store.volume["dtype"])
    reads = []
    for what, index in (("volume[:]", ()), (f"volume{[(s.start, s.stop) for s in box]}", box)):
        with mem:
            ours = ng_call(lambda index=index: np.asarray(ngshard.open_volume(store.root)[index]))
        if case.hazard == "png crash":
            reads.append(Read(what, ours, Outcome("error", "not read"), "known: png crash"))
        else:
            reads.append(Read(what, ours, ts_volume(store, index), index=index))
    return reads


def png_hazard(data: bytes, dtype: str) -> str | None:
    """"png crash" where libpng would write past tensorstore's buffer (16 bits with tRNS, which
    its png_set_expand_16 expands to an alpha channel, or 16 bits in a uint8 volume); "png bit
    depth" where tensorstore returns the bytes of samples of another size."""
    pos, depth, trns = 8, None, False
    while pos + 17 <= len(data) and data[pos + 4:pos + 8] != b"IDAT":
        if data[pos + 4:pos + 8] == b"IHDR" and depth is None:
            depth = data[pos + 16]
        trns |= data[pos + 4:pos + 8] == b"tRNS"
        pos += 12 + int.from_bytes(data[pos:pos + 4], "big")
    if depth == 16 and (trns or dtype == "uint8"):
        return "png crash"
    return "png bit depth" if depth and (depth == 16) != (dtype == "uint16") else None


def ts_volume(store: Store, index: tuple) -> Outcome:
    def read():
        vol = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{store.root}/"},
                      context=ts.Context(), read=True).result(timeout=PEER_TIMEOUT)
        return vol[index].read().result(timeout=PEER_TIMEOUT)

    return ts_call(read)
