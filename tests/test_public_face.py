"""The public face: every public name of DESIGN.md is a plain attribute of ``ngshard`` (so
``dir()``, ``help()``, IDEs and type checkers see it), ``import ngshard`` stays light, every
``write_*`` returns what it wrote open for reading, and the signatures carry ``Literal`` types."""

from __future__ import annotations

import inspect
import pydoc
import subprocess
import sys
import typing

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard
import ngshard.compression
import ngshard.types

# The public names of DESIGN.md that exist today (transfer, mesh, skeletonize and
# attach are still to come), and the errors.
DESIGN = ["ShardingSpec", "ShardedKV", "open_kv", "write_kv", "open_volume", "create_volume",
          "Volume", "Bounds", "open", "write_skeletons", "write_meshes", "write_legacy_meshes",
          "write_annotations", "write_segment_properties", "Skeletons", "Meshes",
          "LegacyMeshes", "Annotations", "SegmentProperties", "convert", "downsample", "serve",
          "dask", "zarr", "types"]
ERRORS = ["NgShardError", "SpecError", "CorruptDataError", "InvalidKeyError", "NotFoundError",
          "ConflictError", "ExistsError", "ReadOnlyError", "MissingDependencyError",
          "StorageWriteError", "UnlistableError"]
HEAVY = ["dask", "distributed", "pandas", "DracoPy", "PIL", "simplejpeg", "zarr", "numcodecs",
         "tensorstore", "compresso", "crackle", "cc3d", "neuroglancer", "aiohttp"]
SPEC = ngshard.ShardingSpec(hash="murmurhash3_x86_128", minishard_bits=2, shard_bits=1)


def test_every_public_name_is_a_plain_attribute():
    names = set(dir(ngshard))
    assert not set(DESIGN + ERRORS) - names
    # held by the module itself, not made on access by a module __getattr__
    assert not set(DESIGN + ERRORS) - set(vars(ngshard))
    assert not hasattr(ngshard, "__getattr__")
    assert not set(ngshard.__all__) - set(vars(ngshard))
    assert inspect.isfunction(ngshard.open) and ngshard.open.__doc__
    assert callable(ngshard.convert) and callable(ngshard.serve)
    for name in ERRORS:
        assert issubclass(getattr(ngshard, name), ngshard.NgShardError)


def test_help_lists_the_public_names():
    text = pydoc.render_doc(ngshard, renderer=pydoc.plaintext)
    for name in ["open_volume", "create_volume", "open_kv", "write_kv", "write_skeletons",
                 "write_meshes", "write_legacy_meshes", "write_annotations",
                 "write_segment_properties", "Skeletons", "Meshes", "LegacyMeshes",
                 "Annotations", "SegmentProperties", "Volume", "ShardedKV", "ShardingSpec",
                 "Bounds", "convert", "serve", "dask", "zarr", "open", *ERRORS]:
        assert f"\n    {name}" in text or f" {name}(" in text or f"{name} = " in text, name


def test_public_functions_are_typed_for_type_checkers():
    """Every public function's annotations resolve (no name a type checker cannot see) and
    say what it returns."""
    functions = [getattr(ngshard, n) for n in ngshard.__all__
                 if inspect.isfunction(getattr(ngshard, n))]
    functions += [ngshard.dask.write_kv, ngshard.dask.write_chunks, ngshard.zarr.open_array,
                  ngshard.zarr.create_array]
    assert len(functions) > 15
    for f in functions:
        hints = typing.get_type_hints(f)
        assert "return" in hints, f.__name__


def test_import_ngshard_imports_no_optional_package():
    code = ("import sys, ngshard, ngshard.dask, ngshard.zarr, ngshard.pipelines\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=PEER_TIMEOUT).stdout
    assert out.strip() == "[]"


def test_literal_types_are_in_the_signatures_and_the_checks():
    hints = typing.get_type_hints(ngshard.open_kv)
    assert hints["mode"] == ngshard.types.Mode and hints["strategy"] == ngshard.types.Strategy
    assert typing.get_type_hints(ngshard.open_volume)["mode"] == ngshard.types.VolumeMode
    create = typing.get_type_hints(ngshard.create_volume)
    assert create["encoding"] == ngshard.types.Encoding
    assert create["compress"] == ngshard.types.Compress | None
    assert typing.get_type_hints(ngshard.write_skeletons)["compress"] == create["compress"]
    assert typing.get_type_hints(ngshard.convert)["encoding"] == create["encoding"] | None
    assert (typing.get_type_hints(ngshard.zarr.create_array)["index_location"]
            == ngshard.types.IndexLocation)
    spec = typing.get_type_hints(ngshard.ShardingSpec)
    assert spec["hash"] == ngshard.types.HashName
    assert spec["data_encoding"] == ngshard.types.DataEncoding
    # what the checks at run time accept is what the types say
    assert set(typing.get_args(ngshard.types.Compress)) == set(ngshard.compression.COMPRESS)
    with pytest.raises(ngshard.SpecError, match="r, r\\+, a, w"):
        ngshard.open_kv("memory://face-mode", SPEC, mode="x")  # type: ignore[arg-type]
    with pytest.raises(ngshard.SpecError, match="identity, murmurhash3_x86_128"):
        ngshard.ShardingSpec(hash="murmur")  # type: ignore[arg-type]


def test_every_writer_returns_what_it_wrote_open_for_reading(tmp_path):
    kv = ngshard.write_kv(tmp_path / "kv", SPEC, {1: b"one", 2**40: b"big"})
    assert isinstance(kv, ngshard.ShardedKV) and kv.mode == "r" and kv.spec == SPEC
    assert kv[1] == b"one" and kv.get(3) is None and sorted(kv) == [1, 2**40]
    arrays = ngshard.write_kv(tmp_path / "arrays", SPEC, keys=[5, 6],
                              values=np.zeros((2, 3), np.uint8))
    assert arrays.mode == "r" and arrays.get_many([5, 6, 7]) == {5: b"\0" * 3, 6: b"\0" * 3}
    vertices = np.array([[0, 0, 0], [1, 1, 1]], np.float32)
    skeletons = ngshard.write_skeletons(tmp_path / "sk", {7: (vertices, np.array([[0, 1]]))})
    assert isinstance(skeletons, ngshard.Skeletons) and 7 in skeletons
    faces = np.array([[0, 1, 2]], np.uint32)
    legacy = ngshard.write_legacy_meshes(tmp_path / "lm", {7: (np.eye(3, dtype=np.float32),
                                                                faces)})
    assert isinstance(legacy, ngshard.LegacyMeshes) and list(legacy) == [7]
    points = ngshard.write_annotations(tmp_path / "an", "point", np.eye(3), ids=[4, 5, 6])
    assert isinstance(points, ngshard.Annotations) and points[5].id == 5
    props = ngshard.write_segment_properties(tmp_path / "sp", [1], labels=["a"])
    assert isinstance(props, ngshard.SegmentProperties) and props[1] == {"label": "a"}
    with ngshard.create_volume(tmp_path / "vol", dtype="uint8", shape=(4, 4, 4)) as vol:
        assert isinstance(vol, ngshard.Volume) and vol.mode == "r+"  # the one to fill in
