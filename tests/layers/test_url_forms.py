"""Every URL form opens the same layer: local and over a real HTTP server, precomputed (written
by tensorstore) and zarr (written by zarr-python), Neuroglancer's prefixes and pipelines and
tensorstore spec dicts (read value for value against tensorstore opening the same dict), in
Python, on the command line, in conversions, and as ``ngshard serve`` prints them."""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from peers import PEER_TIMEOUT

import ngshard
from ngshard.cli import main

ts = pytest.importorskip("tensorstore")
zarr = pytest.importorskip("zarr")

SHARDING = {"@type": "neuroglancer_uint64_sharded_v1", "hash": "identity", "preshift_bits": 0,
            "minishard_bits": 1, "shard_bits": 1, "minishard_index_encoding": "raw",
            "data_encoding": "gzip"}
DATA = np.random.default_rng(7).integers(0, 60000, (40, 30, 20), np.uint16)


def write_layers(root):
    """A two-scale volume written by tensorstore (the second sharded), a Zarr v3 and a
    Zarr v2 array written by zarr-python (z, y, x), under ``root``."""
    kvstore = {"driver": "file", "path": f"{root}/vol/"}
    fine = ts.open({"driver": "neuroglancer_precomputed", "kvstore": kvstore, "create": True,
                    "multiscale_metadata": {"type": "image", "data_type": "uint16",
                                            "num_channels": 1},
                    "scale_metadata": {"size": [40, 30, 20], "resolution": [4, 4, 40],
                                       "encoding": "raw", "chunk_size": [16, 16, 8]}}
                   ).result(timeout=PEER_TIMEOUT)
    fine.write(DATA[..., None]).result(timeout=PEER_TIMEOUT)
    coarse = ts.open({"driver": "neuroglancer_precomputed", "kvstore": kvstore, "create": True,
                      "scale_metadata": {"size": [20, 15, 10], "resolution": [8, 8, 80],
                                         "encoding": "raw", "chunk_size": [8, 8, 8],
                                         "sharding": SHARDING}}).result(timeout=PEER_TIMEOUT)
    coarse.write(DATA[::2, ::2, ::2, None]).result(timeout=PEER_TIMEOUT)
    zyx = np.ascontiguousarray(DATA.T)
    for name, version in (("z3", 3), ("z2", 2)):
        arr = zarr.create_array(store=str(root / name), shape=zyx.shape, chunks=(8, 16, 16),
                                dtype=zyx.dtype, zarr_format=version, fill_value=0)
        arr[...] = zyx


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    root = tmp_path_factory.mktemp("forms")
    write_layers(root)
    return root


def voxels(layer) -> np.ndarray:
    """Every voxel of a volume or array, as numpy."""
    return np.asarray(layer[...])


def peer(spec) -> np.ndarray:
    """What tensorstore reads from the same spec."""
    return ts.open(spec).result(timeout=PEER_TIMEOUT).read().result(timeout=PEER_TIMEOUT)


def test_precomputed_forms_open_the_same_volume(local):
    vol = f"{local}/vol"
    for url in (vol, f"{vol}/", f"precomputed://{vol}", f"precomputed://file://{vol}",
                f"precomputed://{vol}/", f"file://{vol}/|neuroglancer-precomputed:",
                f"{vol}|neuroglancer-precomputed:", f"{vol}/|neuroglancer-precomputed:"):
        np.testing.assert_array_equal(voxels(ngshard.open(url)), DATA[..., None], err_msg=url)
        np.testing.assert_array_equal(voxels(ngshard.open_volume(url, scale=1)),
                                      DATA[::2, ::2, ::2, None], err_msg=url)


def spec_dicts(kvstore, parent_kvstore):
    base = {"driver": "neuroglancer_precomputed", "kvstore": kvstore}
    return [base, {**base, "scale_index": 1},
            {"driver": "neuroglancer_precomputed", "kvstore": parent_kvstore, "path": "vol"},
            {**base, "scale_metadata": {"key": "8_8_80"}},
            {**base, "scale_metadata": {"resolution": [8, 8, 80]}},
            {**base, "scale_index": 1, "dtype": "uint16",
             "scale_metadata": {"size": [20, 15, 10], "chunk_size": [8, 8, 8],
                                "sharding": SHARDING, "encoding": "raw"},
             "multiscale_metadata": {"num_channels": 1, "type": "image"},
             "context": {"cache_pool": {"total_bytes_limit": 0}},
             "recheck_cached_data": False}]


def test_tensorstore_specs_read_what_tensorstore_reads(local):
    for spec in spec_dicts({"driver": "file", "path": f"{local}/vol/"},
                           {"driver": "file", "path": f"{local}/"}) + \
            spec_dicts(f"file://{local}/vol/", f"file://{local}"):
        theirs = peer(spec)
        np.testing.assert_array_equal(voxels(ngshard.open(spec)), theirs, err_msg=str(spec))
        np.testing.assert_array_equal(voxels(ngshard.open_volume(spec)), theirs)


def test_precomputed_over_http(http_server, local):
    shutil.copytree(local / "vol", http_server.root / "vol")
    base = http_server.base
    for url in (f"precomputed://{base}/vol", f"precomputed://{base}/vol/",
                f"{base}/vol/|neuroglancer-precomputed:",
                f"{base}/vol|neuroglancer-precomputed:"):
        np.testing.assert_array_equal(voxels(ngshard.open(url, scale=1)),
                                      DATA[::2, ::2, ::2, None], err_msg=url)
    for spec in spec_dicts({"driver": "http", "base_url": base, "path": "vol/"},
                           {"driver": "http", "base_url": f"{base}/"}) + \
            spec_dicts(f"{base}/vol/", f"{base}/"):
        np.testing.assert_array_equal(voxels(ngshard.open(spec)), peer(spec),
                                      err_msg=str(spec))


def test_zarr_forms_open_the_same_arrays(local, http_server):
    shutil.copytree(local / "z3", http_server.root / "z3")
    zyx = DATA.T
    forms = {"z3": ["zarr://{p}", "zarr3://{p}", "{p}/|zarr3:", "{p}|zarr:",
                    "{parent}/|zarr3:z3", "{parent}|zarr:z3/"],
             "z2": ["zarr://{p}", "zarr2://{p}/", "{p}/|zarr2:", "{parent}/|zarr2:z2"]}
    for name, urls in forms.items():
        for url in urls:
            url = url.format(p=local / name, parent=local)
            np.testing.assert_array_equal(ngshard.zarr.open_array(url)[...], zyx, err_msg=url)
            np.testing.assert_array_equal(ngshard.open(url)[...], zyx, err_msg=url)
    for url in (f"zarr://{http_server.base}/z3", f"{http_server.base}/z3/|zarr3:"):
        np.testing.assert_array_equal(ngshard.open(url)[...], zyx, err_msg=url)
    for spec in ({"driver": "zarr3", "kvstore": f"file://{local}/z3/"},
                 {"driver": "zarr3", "kvstore": {"driver": "file", "path": f"{local}/"},
                  "path": "z3"},
                 {"driver": "zarr3", "kvstore": {"driver": "http",
                                                 "base_url": http_server.base},
                  "path": "z3"},
                 {"driver": "zarr", "kvstore": {"driver": "file", "path": f"{local}/z2/"}},
                 {"driver": "zarr2", "kvstore": f"file://{local}/", "path": "z2"}):
        theirs = peer(spec)
        np.testing.assert_array_equal(ngshard.open(spec)[...], theirs, err_msg=str(spec))
        np.testing.assert_array_equal(ngshard.zarr.open_array(spec)[...], theirs)


CONTRADICTIONS = [
    ("zarr://{root}/vol", "the URL says zarr, but {root}/vol holds a precomputed layer"),
    ("{root}/vol/|zarr3:", "the URL says zarr3, but {root}/vol holds a precomputed layer"),
    ("precomputed://{root}/z3", "the URL says precomputed, but {root}/z3 holds a Zarr v3"),
    ("{root}/z2|neuroglancer-precomputed:",
     "the URL says precomputed, but {root}/z2 holds a Zarr v2"),
    ("zarr2://{root}/z3", "the URL says zarr2, but {root}/z3 holds a Zarr v3"),
    ("zarr3://{root}/z2", "the URL says zarr3, but {root}/z2 holds a Zarr v2"),
]


@pytest.mark.parametrize("url, message", CONTRADICTIONS, ids=[c[0] for c in CONTRADICTIONS])
def test_a_format_that_contradicts_what_is_there(local, url, message, capsys):
    url, message = url.format(root=local), message.format(root=local)
    with pytest.raises(ngshard.SpecError) as e:
        ngshard.open(url)
    assert str(e.value).startswith(f"{url}: {message}")
    assert main(["info", url]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_openers_refuse_the_other_format(local):
    cases = [(ngshard.open_volume, f"zarr://{local}/vol", "names zarr, but this opens "
                                                          "precomputed data"),
             (ngshard.open_kv, f"{local}/vol/|zarr:", "names zarr, but this opens "
                                                      "precomputed"),
             (ngshard.zarr.open_array, f"precomputed://{local}/z3", "names precomputed, but "
                                                                    "this opens zarr data"),
             (ngshard.zarr.open_array, f"zarr2://{local}/z3", "Zarr v2 was asked for, but "
                                                              "only .*zarr.json"),
             (ngshard.zarr.open_array, f"zarr3://{local}/z2", "Zarr v3 was asked for"),
             (ngshard.open, {"driver": "zarr3", "kvstore": f"file://{local}/vol/"},
              "its driver says zarr3, but .*vol holds a precomputed layer"),
             (ngshard.open, {"driver": "neuroglancer_precomputed",
                             "kvstore": f"file://{local}/z2/"}, "holds a Zarr v2")]
    for opener, url, message in cases:
        with pytest.raises(ngshard.SpecError, match=message):
            opener(url)
    with pytest.raises(ngshard.SpecError, match="a zarr array takes no mode="):
        ngshard.open(f"zarr://{local}/z3", mode="r+")
    with pytest.raises(ngshard.SpecError, match="writes Zarr v3, the URL says zarr2"):
        ngshard.zarr.create_array(f"zarr2://{local}/new", (4, 4), "uint8", (2, 2))
    with pytest.raises(ngshard.SpecError, match="names zarr"):
        ngshard.create_volume(f"zarr3://{local}/new", dtype="uint8", shape=(4, 4, 4))
    assert not (local / "new").exists()


def test_specs_the_layer_disagrees_with(local):
    base = {"driver": "neuroglancer_precomputed", "kvstore": f"file://{local}/vol/"}
    vol = f"{local}/vol"
    cases = [({**base, "scale_index": 2}, "scale must be an index below 2"),
             ({**base, "scale_metadata": {"key": "1_1_1"}}, "no scale with key '1_1_1'"),
             ({**base, "scale_metadata": {"resolution": [1, 1, 1]}},
              r"no scale has resolution \[1, 1, 1\]"),
             ({**base, "scale_metadata": {"size": [1, 2, 3]}},
              r"scale_metadata.size is \[1, 2, 3\], the layer's \[40, 30, 20\]"),
             ({**base, "dtype": "uint8"}, "dtype is 'uint8', the layer's 'uint16'"),
             ({**base, "multiscale_metadata": {"num_channels": 3}},
              "multiscale_metadata.num_channels is 3, the layer's 1"),
             ({**base, "scale_metadata": {"jpeg_quality": 70}},
              "scale_metadata.jpeg_quality is not supported")]
    for spec, message in cases:
        with pytest.raises(ngshard.SpecError, match=message) as e:
            ngshard.open(spec)
        assert vol in str(e.value)
        with pytest.raises(ngshard.SpecError, match=message):
            ngshard.open_volume(spec)
    with pytest.raises(ngshard.SpecError, match="the spec selects scale 1, scale= says '4_4_40'"):
        ngshard.open_volume({**base, "scale_index": 1}, scale="4_4_40")


def test_cli_takes_every_form(local, http_server, capsys):
    ngshard.write_kv(http_server.root / "kv", ngshard.ShardingSpec.from_json(SHARDING),
                     {1: b"one", 7: b"seven"})
    base = http_server.base
    assert main(["info", f"precomputed://{local}/vol"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"volume       {local}/vol") and "key 8_8_80" in out
    assert main(["verify", f"{local}/vol/|neuroglancer-precomputed:"]) == 0
    assert capsys.readouterr().out.count("OK") == 2
    for url in (f"precomputed://{base}/kv", f"{base}/kv/|neuroglancer-precomputed:"):
        assert main(["info", url]) == 0
        assert "keys         2" in capsys.readouterr().out
        assert main(["ls", url, "--sort"]) == 0
        assert capsys.readouterr().out.split() == ["1", "7"]
        assert main(["get", url, "7"]) == 0
        assert capsys.readouterr().out == "seven"
    for url in (f"zarr3://{local}/z3", f"{local}/z2/|zarr2:", f"zarr://{local}/z2"):
        assert main(["info", url]) == 0
        assert "shape (20, 30, 40)" in capsys.readouterr().out
    assert main(["info", "precomputed://htp://host/layer"]) == 1
    assert "precomputed://htp://host/layer: unknown URL scheme 'htp'" in \
        capsys.readouterr().err


def test_what_serve_prints_opens_back(tmp_path, local):
    root = tmp_path / "served"
    for name in ("vol", "z3", "z2"):
        shutil.copytree(local / name, root / name)
    with ThreadPoolExecutor(2) as pool:
        ngshard.convert(root / "vol", root / "ome.zarr", executor=pool, progress=False)
    with ngshard.serve(root) as server:  # no directory listings, as it serves by default
        sources = server.sources()
        assert sorted(sources) == ["ome.zarr", "vol", "z2", "z3"]
        assert sources["vol"] == f"precomputed://{server.url}/vol"
        assert sources["z3"] == f"zarr://{server.url}/z3"
        for path, source in sources.items():
            layer = ngshard.open(source)
            np.testing.assert_array_equal(voxels(layer), voxels(ngshard.open(root / path)),
                                          err_msg=source)
            assert main(["info", source]) == 0
        # the OME-Zarr group's levels are the volume's scales (z, y, x)
        np.testing.assert_array_equal(ngshard.open(sources["ome.zarr"], scale=1)[...],
                                      DATA[::2, ::2, ::2].T)


def test_convert_takes_sources(local, tmp_path):
    with ThreadPoolExecutor(2) as pool:
        ngshard.convert(f"zarr3://{local}/z3", f"precomputed://{tmp_path}/pre", executor=pool,
                        progress=False)
        np.testing.assert_array_equal(voxels(ngshard.open(tmp_path / "pre")),
                                      DATA[..., None])
        ngshard.convert(f"{tmp_path}/pre/|neuroglancer-precomputed:",
                        f"zarr://{tmp_path}/back.zarr", executor=pool, progress=False)
        np.testing.assert_array_equal(ngshard.open(f"{tmp_path}/back.zarr/|zarr3:s0")[...],
                                      DATA.T)
        with pytest.raises(ngshard.SpecError, match="the URL says zarr, but .*holds a "
                                                    "precomputed layer"):
            ngshard.convert(f"zarr://{local}/vol", tmp_path / "x", executor=pool)
        with pytest.raises(ngshard.SpecError, match="the destination says zarr3, but "
                                                    "converting .* makes a precomputed"):
            ngshard.convert(f"{local}/z3", f"zarr3://{tmp_path}/y", executor=pool)
        with pytest.raises(ngshard.SpecError, match="destination says zarr2, but .* makes "
                                                    "Zarr v3"):
            ngshard.convert(f"{local}/vol", f"zarr2://{tmp_path}/y", executor=pool)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
