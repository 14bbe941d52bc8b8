"""Write golden volume fixtures with cloud-volume, as the field has them on disk.

Into fixtures/cloudvolume_volumes/<case>/ (each case a precomputed layer, small enough to
commit): 40 x 30 x 20 voxel volumes in 16^3 chunks (edge chunks clipped), written with
cloud-volume's ``compress=`` values (None, gzip, br, zstd, xz, bz2: the chunk file twins),
its encodings (raw, compressed_segmentation, compresso, crackle, jpeg, png, jxl), voxel
offsets other than zero (negative too), unsharded and sharded. Beside each layer,
``expected.npz`` holds cloud-volume's own reads: ``whole`` (the layer's bounds, x y z c) and
``box<i>`` for each ``boxes[i]`` (``(start, stop)`` in the layer's global voxel coordinates).

The ``ngshard_*`` cases go the other way: written by ngshard (this checkout's ``src``, with
``compress=`` and its encodings), read by cloud-volume into ``expected.npz`` (and checked
equal to what was written). The tests check that ngshard still writes the same files.

Into fixtures/layers/: the unsharded files of segment layers as cloud-files writes them with
``compress=`` (twins), each read back by cloud-volume first:
``cv_skeletons_br`` (the ``cv_skeletons_unsharded`` skeletons as ``<id>.br``),
``ig_meshes_legacy_zstd`` (the igneous legacy meshes, every file a ``.zstd`` twin) and
``ig_meshes_unsharded_br`` (the igneous multi-resolution meshes, ``<id>.index.br``
manifests; fragments stay plain, as cloud-volume reads them by byte range). What they hold
is in the source case's expected file.

Run from the repository root in a venv holding cloud-volume and the codecs (kept out of the
repository and of the test extra):

    python3 -m venv /work/cvenv
    /work/cvenv/bin/pip install cloud-volume compresso crackle-codec imagecodecs pyspng-seunglab
    /work/cvenv/bin/pip install fsspec mmh3 Pillow pillow-jxl-plugin connected-components-3d
    /work/cvenv/bin/python tools/make_cloudvolume_volume_fixtures.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent / "fixtures"
OUT = ROOT / "cloudvolume_volumes"
SHAPE = (40, 30, 20)
CHUNK = (16, 16, 16)
OFFSET = (1000, 2000, 30)
NEGATIVE = (-40, -7, 5)
SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 3,
            "minishard_bits": 1, "shard_bits": 0, "minishard_index_encoding": "gzip",
            "data_encoding": "gzip"}

# case: (data kind, dtype, channels, encoding, compress, voxel offset, sharded, extra scale
# members). compress None is cloud-volume's default (gzip but for images), False plain files.
# Not here: multi-channel jpeg, png and jxl, which cloud-volume 12.15 reads back scrambled
# (it reshapes the interleaved pixels in Fortran order); png uint16, which pyspng does not
# encode.
CASES = {
    "raw_plain": ("image", "uint8", 1, "raw", False, OFFSET, False, {}),
    "raw_gzip": ("image", "uint16", 1, "raw", "gzip", NEGATIVE, False, {}),
    "raw_br": ("image", "uint8", 1, "raw", "br", OFFSET, False, {}),
    "raw_zstd": ("labels", "uint32", 1, "raw", "zstd", OFFSET, False, {}),
    "raw_xz": ("image", "uint8", 1, "raw", "xz", (0, 0, 0), False, {}),
    "raw_bz2": ("image", "uint8", 1, "raw", "bz2", NEGATIVE, False, {}),
    "raw_rgb_br": ("image", "uint8", 3, "raw", "br", OFFSET, False, {}),
    "cseg_br": ("labels", "uint64", 1, "compressed_segmentation", "br", OFFSET, False, {}),
    "cseg_gzip": ("labels", "uint32", 1, "compressed_segmentation", "gzip", NEGATIVE, False,
                  {}),
    "compresso_uint32": ("labels", "uint32", 1, "compresso", False, OFFSET, False, {}),
    "compresso_uint64_br": ("labels", "uint64", 1, "compresso", "br", NEGATIVE, False, {}),
    "crackle_uint32": ("labels", "uint32", 1, "crackle", False, OFFSET, False, {}),
    "crackle_uint64_zstd": ("labels", "uint64", 1, "crackle", "zstd", NEGATIVE, False, {}),
    "jpeg_gray": ("image", "uint8", 1, "jpeg", None, OFFSET, False, {}),
    "png_br": ("image", "uint8", 1, "png", "br", OFFSET, False, {}),
    "png_plain": ("image", "uint8", 1, "png", None, NEGATIVE, False, {}),
    "jxl_lossless": ("image", "uint8", 1, "jxl", None, OFFSET, False, {"jxl_quality": 100}),
    "jxl_lossy": ("image", "uint8", 1, "jxl", None, NEGATIVE, False, {"jxl_quality": 85}),
    "sharded_raw": ("image", "uint8", 1, "raw", None, OFFSET, True, {}),
    "sharded_cseg": ("labels", "uint64", 1, "compressed_segmentation", None, NEGATIVE, True,
                     {}),
    "sharded_compresso": ("labels", "uint32", 1, "compresso", None, OFFSET, True, {}),
    "sharded_jpeg": ("image", "uint8", 1, "jpeg", None, (0, 0, 0), True, {}),
}


def voxels(kind: str, dtype: str, channels: int, seed: int) -> np.ndarray:
    """(x, y, z, c) data that compresses well: images of ramps with a small texture,
    labels in blocks with ragged edges and holes (large ids for 64-bit ones)."""
    rng = np.random.default_rng(seed)
    x, y, z = np.meshgrid(*(np.arange(n) for n in SHAPE), indexing="ij")
    if kind == "image":
        scale = 1 if dtype == "uint8" else 251
        texture = 9 * ((x // 4 + y // 3 + z // 5) % 3)
        out = [(x * 5 + y * 3 + z * 7 + 40 * c + texture + seed) % 256 for c in range(channels)]
        return (np.stack(out, axis=-1) * scale).astype(dtype)
    blocks = (x // 7) + 10 * (y // 9) + 100 * ((z + x // 5) // 6)
    labels = blocks.astype(np.uint64) * (2**40 + 7 if dtype == "uint64" else 3)
    labels[rng.random(SHAPE) < 0.02] = 0
    return labels.astype(dtype)[..., None]


def boxes(offset: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Boxes in global voxel coordinates: one inside a chunk, one across chunks, one at the
    clipped far edge, one at the start."""
    o = np.array(offset)
    rel = [((3, 4, 5), (9, 12, 10)), ((10, 12, 14), (35, 20, 19)), ((30, 20, 15), SHAPE),
           ((0, 0, 0), (1, 30, 2))]
    return [((o + a).tolist(), (o + b).tolist()) for a, b in rel]


# written by ngshard, read by cloud-volume: (data kind, dtype, encoding, compress, offset)
NGSHARD_CASES = {
    "ngshard_raw_gzip": ("image", "uint8", "raw", "gzip", OFFSET),
    "ngshard_raw_br": ("image", "uint16", "raw", "br", NEGATIVE),
    "ngshard_cseg_zstd": ("labels", "uint64", "compressed_segmentation", "zstd", OFFSET),
    "ngshard_compresso": ("labels", "uint32", "compresso", None, NEGATIVE),
    "ngshard_crackle_br": ("labels", "uint64", "crackle", "br", OFFSET),
    "ngshard_jxl": ("image", "uint8", "jxl", None, NEGATIVE),
}


def write_case(name: str, spec: tuple, seed: int) -> None:
    from cloudvolume import CloudVolume

    kind, dtype, channels, encoding, compress, offset, sharded, extra = spec
    path = OUT / name
    shutil.rmtree(path, ignore_errors=True)
    info = CloudVolume.create_new_info(
        num_channels=channels, layer_type="image" if kind == "image" else "segmentation",
        data_type=dtype, encoding=encoding, resolution=[8, 8, 40], voxel_offset=list(offset),
        volume_size=list(SHAPE), chunk_size=list(CHUNK))
    info["scales"][0].update(extra)
    if sharded:
        info["scales"][0]["sharding"] = SHARDING
    data = voxels(kind, dtype, channels, seed)
    cv = CloudVolume(path.as_uri(), info=info, compress=compress, progress=False)
    cv.commit_info()
    cv[cv.bounds] = data
    lossless = encoding not in ("jpeg", "jxl") or extra.get("jxl_quality") == 100
    record(name, path, offset, data if lossless else None)


def write_ngshard_case(name: str, spec: tuple, seed: int) -> None:
    import sys

    sys.path.insert(0, str(ROOT.parent / "src"))
    import ngshard

    kind, dtype, encoding, compress, offset = spec
    path = OUT / name
    shutil.rmtree(path, ignore_errors=True)
    data = voxels(kind, dtype, 1, seed)
    with ngshard.create_volume(path, dtype=dtype, shape=SHAPE, chunk_size=CHUNK,
                               encoding=encoding, resolution=(8, 8, 40), voxel_offset=offset,
                               compress=compress) as vol:
        vol[...] = data
    record(name, path, offset, data if encoding != "jxl" else None)


def record(name: str, path: Path, offset: tuple[int, ...], data: np.ndarray | None) -> None:
    """cloud-volume's reads of the layer at ``path`` into its expected.npz."""
    from cloudvolume import Bbox, CloudVolume

    cv = CloudVolume(path.as_uri(), progress=False, fill_missing=False)
    reads = {"whole": np.asarray(cv[cv.bounds])}
    found = boxes(offset)
    for i, (a, b) in enumerate(found):
        reads[f"box{i}"] = np.asarray(cv[Bbox(a, b)])
    reads["boxes"] = np.array(found, np.int64)
    if data is not None:
        assert np.array_equal(reads["whole"], data), name  # lossless: what was written
    np.savez_compressed(path / "expected.npz", **reads)
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    suffixes = sorted({p.suffix or "(plain)" for p in (path / cv.key).iterdir()})
    scale = cv.info["scales"][0]
    line = (f"| {name} | {cv.info['data_type']} x{cv.info['num_channels']} | "
            f"{scale['encoding']} | {' '.join(suffixes)} | {scale['voxel_offset']} | {size} |")
    SUMMARY.append(line)
    print(line)


def layer_twins() -> None:
    """Segment layer files re-put by cloud-files with ``compress=``, read back by
    cloud-volume."""
    from cloudfiles import CloudFiles
    from cloudvolume import CloudVolume

    layers = ROOT / "layers"
    cases = (("cv_skeletons_unsharded", "cv_skeletons_br", "skeletons", "br", None),
             ("ig_meshes_legacy", "ig_meshes_legacy_zstd", "mesh", "zstd", None),
             ("ig_meshes_unsharded", "ig_meshes_unsharded_br", "mesh", "br", ".index"))
    for src, dst, sub, compress, only in cases:
        shutil.rmtree(layers / dst, ignore_errors=True)
        shutil.copytree(layers / src / sub, layers / dst / sub)  # tests read src's expected
        shutil.copy(layers / src / "info", layers / dst / "info")
        folder = layers / dst / sub
        files = [p for p in folder.iterdir() if p.name != "info" and
                 (only is None or p.name.endswith(only))]
        cf = CloudFiles(folder.as_uri())
        cf.puts([(p.name, p.read_bytes()) for p in files], compress=compress, raw=False)
        for p in files:
            p.unlink()
        cv = CloudVolume((layers / dst).as_uri(), progress=False)
        if sub == "skeletons":
            expected = json.loads((layers / src / "expected.json").read_text())
            for segid, want in expected.items():
                got = cv.skeleton.get(int(segid))
                assert np.allclose(got.vertices, np.array(want["vertices"]).reshape(-1, 3))
        else:
            expected = np.load(layers / src / "expected.npz")
            for key in (k for k in expected.files if k.endswith("_0_v")):
                got = cv.mesh.get(int(key.split("_")[0]))
                got = got[int(key.split("_")[0])] if isinstance(got, dict) else got
                assert len(got.vertices) == len(expected[key]), key
        twins = sorted({p.name[len(p.stem):] for p in folder.iterdir() if p.name != "info"})
        print(f"{dst}: {len(files)} files re-put as {compress} twins {twins}, read back by "
              f"cloud-volume")


SUMMARY: list[str] = []


def main() -> None:
    import cloudvolume

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    for seed, (name, spec) in enumerate(CASES.items()):
        write_case(name, spec, seed)
    for seed, (name, spec) in enumerate(NGSHARD_CASES.items()):
        write_ngshard_case(name, spec, 100 + seed)
    layer_twins()
    (OUT / "README.md").write_text(
        f"# cloud-volume volume fixtures\n"
        f"Written by `tools/make_cloudvolume_volume_fixtures.py` with cloud-volume "
        f"{cloudvolume.__version__} (the `ngshard_*` cases by ngshard, read by cloud-volume); "
        f"its docstring says what each holds and how to regenerate them. `expected.npz`: "
        f"cloud-volume's reads of the whole layer and of `boxes` (global coordinates).\n\n"
        f"| case | data | encoding | chunk files | voxel_offset | bytes |\n"
        f"| --- | --- | --- | --- | --- | --- |\n" + "\n".join(SUMMARY) + "\n")


if __name__ == "__main__":
    main()
