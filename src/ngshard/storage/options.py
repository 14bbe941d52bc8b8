"""``storage_options``: how to reach a URL's storage (credentials, anonymous access, an
endpoint, requester-pays, retries), as every ``open_*``, ``create_*``, ``write_*`` and
``convert`` takes them and ``--storage-option KEY=VALUE`` gives them on the command line.

ngshard's own options, taken out before the rest goes to the backend:

- ``retries``: how many times one request is sent again after a transient failure (and one
  object may be found changed under one read); 10 by default;
- ``retry_seconds``: the time all tries of one request or read may take; 60 by default.

For ``s3://`` and ``az://`` URLs (obstore) the usual fsspec names are understood and mapped:
``endpoint_url`` (or ``endpoint``, ``client_kwargs={"endpoint_url": ...}``), ``key``,
``secret``, ``token``, ``region`` (``region_name``), ``anon``, ``requester_pays``,
``profile`` (a profile of ``~/.aws/credentials``); for Azure ``account_name``,
``account_key``, ``sas_token``, ``connection_string``, ``anon``. obstore's own configuration
keys (``S3Config``, ``AzureConfig``) pass through as they are. Without credentials in the
options, the environment (``AWS_*``, ``AZURE_STORAGE_*``) or ``~/.aws``, requests go
unsigned: public buckets read without an account. (On a cloud machine whose role gives the
credentials, say ``anon=False`` to use them.)

For every other scheme the options are the fsspec filesystem's keyword arguments (gcsfs'
``token``, ``project``, ``requester_pays``, ...); ngshard adds ``skip_instance_cache`` and
``use_listings_cache=False``, so no listing or size is ever taken from a cache another
store filled.
"""

from __future__ import annotations

import configparser
import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from ..errors import MissingDependencyError, SpecError
from ..limits import CONNECT_TIMEOUT, DEFAULT_READ_RETRIES, REQUEST_TIMEOUT, RETRY_SECONDS
from .retry import RetryPolicy

#: Schemes served by obstore (the rest go through fsspec).
OBJECT_STORE_SCHEMES = {"s3": "s3", "s3a": "s3", "az": "azure", "abfs": "azure",
                        "abfss": "azure", "azure": "azure"}
_S3_ALIASES = {"endpoint_url": "endpoint", "aws_endpoint_url": "endpoint",
               "key": "access_key_id", "aws_access_key_id": "access_key_id",
               "secret": "secret_access_key", "aws_secret_access_key": "secret_access_key",
               "token": "session_token", "aws_session_token": "session_token",
               "region_name": "region", "aws_region": "region",
               "requester_pays": "request_payer"}
_AZURE_ALIASES = {"endpoint_url": "endpoint", "account_url": "endpoint",
                  "sas_token": "sas_key", "credential": "account_key"}
_S3_ENV = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
           "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI")
_AZURE_ENV = ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_SAS_KEY",
              "AZURE_STORAGE_TOKEN", "AZURE_CLIENT_ID", "AZURE_STORAGE_CONNECTION_STRING",
              "AZURE_STORAGE_USE_EMULATOR")


# Options given for whole trees (see rooted_options): root URL -> options.
_ROOTED: dict[str, Mapping[str, Any]] = {}
_ROOTED_LOCK = threading.Lock()


@contextlib.contextmanager
def rooted_options(roots: Mapping[str, Mapping[str, Any] | None]) -> Iterator[None]:
    """While inside, a URL under one of ``roots`` (plain storage URLs) opened without
    ``storage_options`` is opened with that root's options.

    For pipelines (:func:`ngshard.convert`): their tasks carry URLs (small, picklable, the
    same in every process), and every process a task runs in opens the URLs under the job's
    source and destination as the caller asked, without each task and source carrying the
    options (and credentials) along.
    """
    given = {root.rstrip("/"): dict(o) for root, o in roots.items() if o}
    with _ROOTED_LOCK:
        before = dict(_ROOTED)
        _ROOTED.update(given)
    try:
        yield
    finally:
        with _ROOTED_LOCK:
            _ROOTED.clear()
            _ROOTED.update(before)


def options_for(url: str) -> Mapping[str, Any] | None:
    """The options :func:`rooted_options` gives ``url`` (a plain storage URL): those of the
    longest root it lies under, None outside them all."""
    with _ROOTED_LOCK:
        roots = [r for r in _ROOTED if url == r or url.startswith(r + "/")]
        return _ROOTED[max(roots, key=len)] if roots else None


def split_options(options: Mapping[str, Any] | None) -> tuple[RetryPolicy, dict[str, Any]]:
    """The retry policy ngshard's own options ask for, and the options for the backend.

    Raises
    ------
    SpecError
        ``storage_options`` is not a mapping with text keys, or ``retries`` /
        ``retry_seconds`` is not a number of the right kind.
    """
    if options is None:
        return RetryPolicy(), {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise SpecError(f"storage_options must be a dict of option names to values, not "
                        f"{options!r}")
    rest = dict(options)
    retries = rest.pop("retries", DEFAULT_READ_RETRIES)
    seconds = rest.pop("retry_seconds", RETRY_SECONDS)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise SpecError(f"storage option retries={retries!r}: give a whole number >= 0")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise SpecError(f"storage option retry_seconds={seconds!r}: give seconds >= 0")
    return RetryPolicy(retries, budget=float(seconds)), rest


def fsspec_options(options: dict[str, Any]) -> dict[str, Any]:
    """The fsspec filesystem's keyword arguments: the caller's, on a filesystem instance of
    its own with no listing cache (sizes and listings are always asked afresh)."""
    return {"skip_instance_cache": True, "use_listings_cache": False, **options}


def object_store(url: str, options: dict[str, Any], where: str) -> tuple[Any, str]:
    """An obstore store for the bucket (container) of an ``s3://`` or ``az://`` URL, and the
    path inside it (``where``: the URL as the caller gave it, for messages).

    Raises
    ------
    MissingDependencyError
        obstore is not installed.
    SpecError
        An option obstore does not know, or of the wrong kind (named).
    """
    try:
        from obstore.exceptions import BaseError
        from obstore.store import from_url
    except ImportError:
        raise MissingDependencyError(f"{where}: s3:// and az:// URLs need obstore: pip "
                                     f"install 'ngshard[cloud]' (or obstore)") from None
    scheme, rest = url.split("://", 1)
    bucket, _, prefix = rest.partition("/")
    kind = OBJECT_STORE_SCHEMES[scheme.lower()]
    config = _s3_config(options) if kind == "s3" else _azure_config(options)
    client: dict[str, Any] = {"timeout": timedelta(seconds=REQUEST_TIMEOUT),
                              "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT)}
    client.update(config.pop("client_options", {}))
    if str(config.get("endpoint", "")).startswith("http://"):
        client.setdefault("allow_http", True)
    # The store's policy retries transient failures (and counts them); obstore's own
    # retries would also repeat a refused precondition for seconds.
    retry_config = {"max_retries": 0, "retry_timeout": timedelta(seconds=REQUEST_TIMEOUT)}
    try:
        store = from_url(f"{scheme}://{bucket}", config=cast(Any, config),
                         client_options=cast(Any, client), retry_config=cast(Any, retry_config))
    except BaseError as e:
        raise SpecError(f"{where}: storage_options {sorted(options)}: "
                        f"{str(e).splitlines()[0]}") from None
    except TypeError as e:
        raise SpecError(f"{where}: storage_options {sorted(options)}: {e}") from None
    return store, prefix


def http_store(url: str, options: dict[str, Any], where: str) -> tuple[Any, str]:
    """An obstore HTTP store for the server of an ``http://`` or ``https://`` URL, and the
    path of the URL on it (so stores derived from it reach the folders above, as a layer's
    stores reach its info); ``where``: the URL as the caller gave it, for messages. aiohttp
    must be there too, for listings (see :mod:`ngshard.storage.http`). Options: ``headers`` (sent
    with every request) and obstore's own client options (``ClientConfig``).

    Raises
    ------
    MissingDependencyError
        obstore or aiohttp is not installed.
    SpecError
        An option obstore does not know, or of the wrong kind (named).
    """
    try:
        import aiohttp  # noqa: F401  (listings: the server's pages, through fsspec)
        from obstore.exceptions import BaseError
        from obstore.store import HTTPStore
    except ImportError:
        raise MissingDependencyError(f"{where}: http:// and https:// URLs need more packages: "
                                     f"pip install 'ngshard[http]' (obstore, aiohttp)"
                                     ) from None
    client: dict[str, Any] = {"timeout": timedelta(seconds=REQUEST_TIMEOUT),
                              "connect_timeout": timedelta(seconds=CONNECT_TIMEOUT),
                              "allow_http": True}
    config = dict(options)
    if "headers" in config:
        client["default_headers"] = config.pop("headers")
    client.update(config.pop("client_options", {}))
    client.update(config)
    retry_config = {"max_retries": 0, "retry_timeout": timedelta(seconds=REQUEST_TIMEOUT)}
    parts = urlsplit(url)
    try:
        store = HTTPStore.from_url(f"{parts.scheme}://{parts.netloc}",
                                   client_options=cast(Any, client),
                                   retry_config=cast(Any, retry_config))
    except (BaseError, TypeError, ValueError) as e:
        raise SpecError(f"{where}: storage_options {sorted(options)}: "
                        f"{str(e).splitlines()[0]}") from None
    return store, unquote(parts.path).strip("/")


def _s3_config(options: dict[str, Any]) -> dict[str, Any]:
    config = _flatten(options)
    anon = config.pop("anon", None)
    profile = config.pop("profile", None)
    for old, new in _S3_ALIASES.items():
        if old in config:
            config.setdefault(new, config.pop(old))
    signed = {"access_key_id", "session_token", "role_arn", "web_identity_token_file"}
    in_env = any(os.environ.get(v) for v in _S3_ENV if v != "AWS_PROFILE")
    if profile is not None:
        config = {**_aws_profile(str(profile)), **config}
    elif anon is not True and not signed & set(config) and not in_env:
        config = {**_aws_profile(os.environ.get("AWS_PROFILE", "default"), False), **config}
    if anon is True or (anon is None and not signed & set(config) and not in_env):
        config.setdefault("skip_signature", True)
    if "request_payer" in config:
        config["request_payer"] = bool(config["request_payer"])
    config.setdefault("conditional_put", "etag")  # If-Match on PUT (create and update)
    return config


def _azure_config(options: dict[str, Any]) -> dict[str, Any]:
    config = _flatten(options)
    anon = config.pop("anon", None)
    for old, new in _AZURE_ALIASES.items():
        if old in config:
            config.setdefault(new, config.pop(old))
    connection = config.pop("connection_string", None) or \
        (os.environ.get("AZURE_STORAGE_CONNECTION_STRING") if not config else None)
    if connection:
        parts = dict(p.split("=", 1) for p in str(connection).split(";") if "=" in p)
        for theirs, ours in (("AccountName", "account_name"), ("AccountKey", "account_key"),
                             ("BlobEndpoint", "endpoint"), ("SharedAccessSignature",
                                                            "sas_key")):
            if theirs in parts:
                config.setdefault(ours, parts[theirs])
    signed = {"account_key", "sas_key", "token", "client_secret", "use_azure_cli",
              "use_emulator"}
    if anon is True or (anon is None and not signed & set(config) and
                        not any(os.environ.get(v) for v in _AZURE_ENV)):
        config.setdefault("skip_signature", True)
    return config


def _flatten(options: dict[str, Any]) -> dict[str, Any]:
    """fsspec's nested ``client_kwargs`` / ``config_kwargs`` lifted to the top."""
    config = dict(options)
    for nested in ("client_kwargs", "config_kwargs"):
        inner = config.pop(nested, None) or {}
        if not isinstance(inner, Mapping):
            raise SpecError(f"storage option {nested}={inner!r}: give a dict")
        for k, v in inner.items():
            config.setdefault(k, v)
    return config


def _credentials_file() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(os.path.expanduser(os.environ.get("AWS_SHARED_CREDENTIALS_FILE",
                                                  "~/.aws/credentials")))
    return parser


def _aws_profile(profile: str, required: bool = True) -> dict[str, Any]:
    """The keys of a profile of the shared credentials file (which botocore reads and
    obstore does not); {} for a missing profile that is not ``required``."""
    parser = _credentials_file()
    if not parser.has_section(profile):
        if not required:
            return {}
        raise SpecError(f"storage option profile={profile!r}: no such profile in the AWS "
                        f"credentials file")
    section = parser[profile]
    keys = {"aws_access_key_id": "access_key_id", "aws_secret_access_key": "secret_access_key",
            "aws_session_token": "session_token", "region": "region"}
    return {ours: section[theirs] for theirs, ours in keys.items() if theirs in section}


def parse_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--storage-option``: the value read as JSON where it is JSON
    (``true``, ``3``, ``{"a": 1}``), else as text.

    Raises
    ------
    SpecError
        No ``=``, or an empty key.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--storage-option {text!r}: give KEY=VALUE (e.g. anon=true, "
                        f"endpoint_url=http://127.0.0.1:9000)")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    return key.strip(), parsed
