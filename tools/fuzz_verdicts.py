"""Verdicts of the fuzzer: when ngshard and tensorstore differ, whether the difference is one of
the deliberate, classified ones (``KNOWN``) or a mismatch."""

from __future__ import annotations

import re

from fuzz_reads import Read, ts_volume
from fuzz_shardfmt import locate, stored_chunk
from fuzz_stores import Case, Store

#: The differences counted apart from mismatches: ngshard's deliberate checks and leniencies,
#: and what tensorstore cannot read.
KNOWN = {
    "short": "shard file shorter than its shard index: ngshard refuses the file, tensorstore "
             "reads the entries that are there",
    "empty": "empty shard file: ngshard refuses it, tensorstore takes it for an empty shard "
             "(listing, whole-shard reads)",
    "bad entry": "bad shard index entry of another minishard: ngshard refuses the shard",
    "overlap": "overlapping minishard index ranges: ngshard refuses the shard",
    "past eof": "another chunk of the minishard lies outside the file: ngshard refuses the "
                "minishard, tensorstore only that chunk",
    "dup": "key twice in one minishard index: ngshard refuses the minishard, tensorstore reads "
           "one of the two",
    "jpeg cut": "jpeg cut after its image data: ngshard decodes it as if the end marker were "
                "there, tensorstore refuses",
    "unneeded minishard": "tensorstore's whole-shard read decodes a damaged minishard index "
                          "that no chunk read needs",
    "inflation limit": "gzip-wrapped volume chunk inflating past 4 x its voxels' bytes + 64 KiB: "
                       "ngshard refuses it, tensorstore reads it (compressed_segmentation allows "
                       "bytes after the data)",
    "interlaced png": "interlaced png: tensorstore reads none (libpng warns that it does not "
                      "handle the interlacing)",
    "png bit depth": "png of another sample size than the volume's: ngshard refuses, tensorstore "
                     "returns the bytes of its samples",
    "png crash": "16-bit png with tRNS or in a uint8 volume: libpng would write past "
                 "tensorstore's buffer, so tensorstore is not asked",
}
# ngshard's message for each defect it checks beyond the key being read
STRICT = [("shorter than its", ("short", "empty")), ("reversed or past the end", ("bad entry",)),
          ("overlapping minishard index bytes", ("overlap",)),
          ("the data region of the file", ("past eof",)), ("appears twice", ("dup",))]


# --- verdicts ---------------------------------------------------------------------------------

def file_named(store: Store, message: str) -> str | None:
    names = [n for n in store.files() if f"/{n}" in message]
    return max(names, key=len) if names else None


def explain_strict(store: Store, message: str, case: Case) -> str | None:
    """The known class when ngshard refuses what tensorstore reads: the file ngshard names holds
    the defect its message names."""
    if case.hazard == "png bit depth" and "does not hold" in message:
        return case.hazard
    if store.kind == "volume" and "inflates past the" in message:
        return "inflation limit"
    name = file_named(store, message)
    if name is None or store.spec is None:
        return None
    dmg = store.damage(name)
    m = re.search(r"\(minishard (\d+) index", message)
    for pattern, defects in STRICT:
        if pattern in message:
            for d in defects:
                if dmg.has(d, int(m.group(1)) if m else None):
                    return d
    return None


def explain_lenient(store: Store, read: Read, case: Case) -> str | None:
    """The known class when tensorstore refuses what ngshard reads."""
    message = str(read.ts.value)
    if "Interlace handling should be turned on" in message:
        return "interlaced png"
    name = file_named(store, message)
    if "Premature end of JPEG file" in message:
        if case.redo:  # the chunk damaged on its own: tensorstore reads it with an end marker
            if case.chunk.endswith(b"\xff\xd9"):
                return None
            store.put(case.name, case.redo(case.chunk + b"\xff\xd9"))
            try:
                again = ts_volume(store, read.index)
            finally:
                store.put(case.name, case.data)
            return "jpeg cut" if again.same(read.ng) else None
        chunk = re.search(r"chunk (\d+) in minishard", message)  # cut by a damaged index
        data = chunk and name and stored_chunk(store.spec, store.read(name), int(chunk[1]))
        return "jpeg cut" if data and not data.endswith(b"\xff\xd9") else None
    if store.spec is None:
        return None
    m = re.search(r"for minishard (\d+)", message)
    if m and name and store.kind == "volume":
        shard = int(name.split(".")[0], 16) if store.spec["shard_bits"] else 0
        needed = {locate(store.spec, k)[1] for k in store.keys
                  if locate(store.spec, k)[0] == shard}
        if int(m.group(1)) not in needed:
            return "unneeded minishard"
    return None


def diagnose(store: Store, read: Read) -> str:
    """The cause of a mismatch, where it is a known bug rather than a deliberate difference."""
    if store.spec is not None:
        for name in store.files():
            cross = store.damage(name).cross
            if cross and (read.key is None or read.key in cross):
                return " [a key also under another minishard of its shard: ShardReader._lookup]"
    return ""


def verdict(store: Store, read: Read, case: Case) -> str:
    ng, them = read.ng, read.ts
    if read.verdict.startswith("known") and ng.kind != "foreign":
        return read.verdict
    if read.verdict.startswith("internal"):
        if read.verdict == "internal" and ng.same(them):
            return "agree"
        return f"mismatch: {read.verdict}{diagnose(store, read)}"
    if ng.kind == "foreign":
        return "foreign"
    if ng.same(them):
        return {"value": "equal", "missing": "both missing", "error": "both error"}[ng.kind]
    known = explain_strict(store, str(ng.value), case) if ng.kind == "error" else \
        explain_lenient(store, read, case) if them.kind == "error" else None
    if known:
        return f"known: {known}"
    return f"mismatch: ngshard {ng.kind}, tensorstore {them.kind}{diagnose(store, read)}" \
        if ng.kind != them.kind else f"mismatch: different values{diagnose(store, read)}"
