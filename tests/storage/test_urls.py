"""The URL forms of Neuroglancer, cloud-volume and tensorstore, as ngshard reads them: the
plain storage URL and the format each names; tensorstore spec dicts checked against
tensorstore's own reading of their kvstore; bad input as one SpecError naming the URL."""

from __future__ import annotations

import sys

import pytest

import ngshard
from ngshard.storage import open_storage, parse_url, source_of

ts = pytest.importorskip("tensorstore")

FORMS = [
    # plain storage URLs: no format
    ("/data/em", "/data/em", None),
    ("/data/em/", "/data/em", None),
    ("relative/em", "relative/em", None),
    ("file:///data/em", "file:///data/em", None),
    ("gs://bucket/em", "gs://bucket/em", None),
    ("s3://bucket/em/", "s3://bucket/em", None),
    ("https://host/em", "https://host/em", None),
    ("memory://em", "memory://em", None),
    ("gs://bucket/em|", "gs://bucket/em", None),
    # Neuroglancer's and cloud-volume's prefixes
    ("precomputed://gs://bucket/em", "gs://bucket/em", "precomputed"),
    ("precomputed://https://host/path/em/", "https://host/path/em", "precomputed"),
    ("precomputed://http://127.0.0.1:8000/em", "http://127.0.0.1:8000/em", "precomputed"),
    ("precomputed://s3://bucket/em", "s3://bucket/em", "precomputed"),
    ("precomputed://file:///data/em", "file:///data/em", "precomputed"),
    ("precomputed:///data/em", "/data/em", "precomputed"),
    ("precomputed://memory://em", "memory://em", "precomputed"),
    ("precomputed://gs://bucket/mesh#type=mesh", "gs://bucket/mesh", "precomputed"),
    ("zarr://gs://bucket/a.zarr", "gs://bucket/a.zarr", "zarr"),
    ("zarr2://https://host/a.zarr/", "https://host/a.zarr", "zarr2"),
    ("zarr3://s3://bucket/a.zarr", "s3://bucket/a.zarr", "zarr3"),
    ("zarr3:///data/a.zarr", "/data/a.zarr", "zarr3"),
    # Neuroglancer's URL pipelines (with and without the slash before the "|")
    ("gs://bucket/em/|neuroglancer-precomputed:", "gs://bucket/em", "precomputed"),
    ("gs://bucket/em|neuroglancer-precomputed:", "gs://bucket/em", "precomputed"),
    ("https://host/em/|neuroglancer-precomputed:#type=mesh", "https://host/em",
     "precomputed"),
    ("https://host/a.zarr/|zarr3:", "https://host/a.zarr", "zarr3"),
    ("https://host/a.zarr|zarr2:", "https://host/a.zarr", "zarr2"),
    ("s3://bucket/a.zarr/|zarr:", "s3://bucket/a.zarr", "zarr"),
    ("gs://bucket/a.zarr/|zarr3:s0/", "gs://bucket/a.zarr/s0", "zarr3"),
    ("gs://bucket/a.zarr/|zarr:labels/cells", "gs://bucket/a.zarr/labels/cells", "zarr"),
    ("file:///data/a.zarr/|zarr2:", "file:///data/a.zarr", "zarr2"),
    ("/data/em/|neuroglancer-precomputed:", "/data/em", "precomputed"),
    # Neuroglancer's authenticated GCS form: this machine's credentials instead
    ("gs+ngauth+https://ngauth.example.org/bucket/em|neuroglancer-precomputed:",
     "gs://bucket/em", "precomputed"),
]


@pytest.mark.parametrize("url, plain, fmt", FORMS, ids=[f[0] for f in FORMS])
def test_forms(url, plain, fmt):
    assert parse_url(url)[:2] == (plain, fmt)


BAD = [
    ("", "empty URL"),
    ("precomputed://", "empty URL"),
    ("zarr3://", "empty URL"),
    ("|zarr3:", "empty URL"),
    ("gs://", "no bucket or path after gs://"),
    ("precomputed://gs://", "no bucket or path"),
    ("file://", "no path after file://"),
    ("precomputed://zarr://gs://b/a", "a zarr:// prefix inside another URL"),
    ("precomputed://gs://b/a|zarr3:", "prefix cannot start a |-pipeline"),
    ("gs://b/a.zip|zip:inner/|zarr3:", "the |zip: adapter is not supported"),
    ("gs://b/a/|ocdbt:|neuroglancer-precomputed:", "the |ocdbt: adapter is not supported"),
    ("gs://b/a/|n5:", "the |n5: adapter is not supported"),
    ("gs://b/a/|zarr3:|zarr2:", "more than one format"),
    ("gs://b/a/|zarr3", "not a pipeline part"),
    ("gs://b/a/|neuroglancer-precomputed:sub/", "takes no path after it"),
    ("n5://gs://b/a", "n5:// is a Neuroglancer data source ngshard does not read"),
    ("graphene://https://host/seg", "graphene:// is a Neuroglancer data source"),
    ("s3+https://host/bucket/a", "endpoint_url=..."),
    ("zarr2://gs://b/a#dimension_separator=/", "set \"dimension_separator\" there"),
    ("precomputed://gs://b/a#type=skeletons", "#type=skeletons is not supported"),
    ("gs://b/a/|zarr3:?x=1", "query parameters"),
]


@pytest.mark.parametrize("url, message", BAD, ids=[b[0] or "empty" for b in BAD])
def test_bad_urls_are_one_spec_error_naming_the_url(url, message):
    with pytest.raises(ngshard.SpecError, match=message) as e:
        open_storage(url)
    assert url in str(e.value) or repr(url) in str(e.value)


@pytest.mark.parametrize("url", [5, None, b"/data/em", ["gs://bucket/em"]])
def test_a_url_that_is_not_text(url):
    with pytest.raises(ngshard.SpecError, match="a URL or path must be text"):
        open_storage(url)


@pytest.mark.parametrize("url", ["precomputed://htp://host/em", "zarr://bogus://x/y",
                                 "bogus://x/y|neuroglancer-precomputed:"])
def test_unknown_scheme_inside_a_source(url):
    with pytest.raises(ngshard.SpecError, match="unknown URL scheme") as e:
        open_storage(url)
    assert str(e.value).startswith(f"{url}: ")


@pytest.mark.parametrize("url, package", [("precomputed://gs://bucket/em", "gcsfs"),
                                          ("s3://bucket/a.zarr/|zarr3:", "obstore"),
                                          ("zarr://s3://bucket/a.zarr", "obstore"),
                                          ("az://container/a.zarr", "obstore")])
def test_object_stores_without_their_package(url, package, monkeypatch):
    for name in [n for n in sys.modules if n.split(".")[0] == package] + [package]:
        monkeypatch.setitem(sys.modules, name, None)  # importing it (or a part) fails
    with pytest.raises(ngshard.MissingDependencyError,
                       match=rf"pip install 'ngshard\[cloud\]'.*{package}") as e:
        open_storage(url)
    assert str(e.value).startswith(f"{url}: ")


# tensorstore specs: the kvstore as tensorstore itself resolves it (its .url) is the URL
# ngshard opens.
SPECS = [
    {"driver": "neuroglancer_precomputed", "kvstore": "gs://bucket/em/"},
    {"driver": "neuroglancer_precomputed", "kvstore": "gs://bucket/", "path": "em"},
    {"driver": "neuroglancer_precomputed",
     "kvstore": {"driver": "gcs", "bucket": "bucket", "path": "em"}, "scale_index": 2},
    {"driver": "neuroglancer_precomputed",
     "kvstore": {"driver": "gcs", "bucket": "bucket"}, "path": "a/em/"},
    {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": "/data/em/"}},
    {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file", "path": "/data/"},
     "path": "em"},
    {"driver": "neuroglancer_precomputed", "kvstore": "file:///data/em"},
    {"driver": "neuroglancer_precomputed",
     "kvstore": {"driver": "s3", "bucket": "bucket", "path": "em/"}},
    {"driver": "neuroglancer_precomputed",
     "kvstore": {"driver": "http", "base_url": "http://127.0.0.1:9000/a", "path": "b c/em"}},
    {"driver": "neuroglancer_precomputed",
     "kvstore": {"driver": "http", "base_url": "https://host"}, "path": "em"},
    {"driver": "neuroglancer_precomputed", "kvstore": {"driver": "memory", "path": "em/"},
     "scale_metadata": {"key": "8_8_8"}},
    {"driver": "zarr3", "kvstore": "s3://bucket/a.zarr/"},
    {"driver": "zarr3", "kvstore": {"driver": "file", "path": "/data/a.zarr"}, "path": "s0"},
    {"driver": "zarr", "kvstore": "gs://bucket/a.zarr/", "path": "0"},
    {"driver": "zarr2", "kvstore": {"driver": "memory", "path": "a.zarr"}},
]


@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
def test_tensorstore_specs_name_what_tensorstore_opens(spec):
    source = source_of(spec)
    expected = ts.Spec(spec).kvstore.url.rstrip("/")
    assert source.url == parse_url(expected).url
    assert source.format == {"neuroglancer_precomputed": "precomputed", "zarr3": "zarr3",
                             "zarr": "zarr2", "zarr2": "zarr2"}[spec["driver"]]
    assert source.scale == spec.get("scale_index", spec.get("scale_metadata", {}).get("key"))


BAD_SPECS = [
    ({"kvstore": "gs://bucket/em/"}, "no \"driver\""),
    ({"driver": "n5", "kvstore": "gs://bucket/em/"}, "driver 'n5' is not supported"),
    ({"driver": "neuroglancer_precomputed"}, "no \"kvstore\""),
    ({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "ocdbt", "base": "x"}},
     "kvstore driver 'ocdbt' is not supported"),
    ({"driver": "neuroglancer_precomputed", "kvstore": "gs://bucket/a/|ocdbt:"},
     "the |ocdbt: adapter is not supported"),
    ({"driver": "neuroglancer_precomputed", "kvstore": "gs://bucket/a/|zarr3:"},
     "names a format"),
    ({"driver": "neuroglancer_precomputed",
      "kvstore": {"driver": "s3", "bucket": "bucket", "endpoint": "http://minio"}},
     "kvstore member 'endpoint' is not supported"),
    ({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "gcs", "path": "a"}},
     "the gcs kvstore has no bucket"),
    ({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "file"}},
     "the file kvstore has no path"),
    ({"driver": "neuroglancer_precomputed", "kvstore": {"driver": "http",
                                                        "base_url": "ftp://x"}},
     "is not an http"),
    ({"driver": "neuroglancer_precomputed", "kvstore": 7}, "kvstore must be a URL"),
    ({"driver": "neuroglancer_precomputed", "kvstore": "gs://b/a/", "transform": {}},
     "member 'transform' is not supported"),
    ({"driver": "neuroglancer_precomputed", "kvstore": "gs://b/a/", "create": True},
     "member 'create' is not supported"),
    ({"driver": "neuroglancer_precomputed", "kvstore": "gs://b/a/", "scale_index": -1},
     "scale_index must be an integer >= 0"),
    ({"driver": "zarr3", "kvstore": "gs://b/a/", "scale_index": 0},
     "member 'scale_index' is not supported for driver zarr3"),
]


@pytest.mark.parametrize("spec, message", BAD_SPECS, ids=range(len(BAD_SPECS)))
def test_bad_tensorstore_specs(spec, message):
    with pytest.raises(ngshard.SpecError, match=message) as e:
        open_storage(spec)
    assert str(e.value).startswith("tensorstore spec {")


def test_canonical_url_is_one_spelling_per_place(tmp_path, monkeypatch):
    from ngshard.storage import canonical_url

    monkeypatch.chdir(tmp_path)
    here = str(tmp_path)
    for spelling in ("data/out", "./data/out/", "data//out", "data/x/../out",
                     f"file://{here}/data/out", f"{here}/data/out/"):
        assert canonical_url(source_of(spelling).url) == f"{here}/data/out", spelling
    assert canonical_url("S3://bucket/a/b/") == "s3://bucket/a/b"
    assert canonical_url("gs://bucket") == "gs://bucket"
