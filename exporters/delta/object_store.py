"""Object stores under the Delta tables: the storage options' rules for safe concurrent commits, and
the same options as a pyarrow file system (for listing tables and for Spark's object-store I/O).

Every table with more than one writer (the config log, written by every replica; the gold tables, by
each rollup run; a shard whose replica restarts beside its old process) relies on Delta's rule that a
commit creates the log entry ``_delta_log/<version>.json`` only if it does not exist yet. On a local
file system delta-rs does that with an atomic rename. On S3, deltalake 1.x writes the entry with a
conditional put (``PUT`` with ``If-None-Match: *``, the default; ``aws_conditional_put: etag`` says
so explicitly): the store refuses the second writer of a version (412), which re-reads the log and
retries on the next version. So the store must honour ``If-None-Match`` (AWS S3 has since August
2024); nothing else is needed, and the options that would turn it off or replace it are refused:

- ``aws_conditional_put`` other than ``etag``: ``disabled`` makes every commit fail;
- ``AWS_S3_LOCKING_PROVIDER`` / ``DELTA_DYNAMO_TABLE_NAME``: deltalake 1.x no longer has the
  DynamoDB lock and ignores them (it only logs an error), so a configuration relying on them would
  believe itself safe on a store without conditional put;
- ``AWS_S3_ALLOW_UNSAFE_RENAME``: not needed with conditional put, and unsafe where it is used.

delta-rs takes option keys in any case (``AWS_REGION`` or ``aws_region``); so does this module.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

import pyarrow.fs as pafs

__all__ = ["S3_SCHEMES", "arrow_filesystem", "commit_safety_problems", "is_local", "store_path"]

S3_SCHEMES: Final = ("s3", "s3a")
SAFE_CONDITIONAL_PUT: Final = "etag"
_LOCKING_OPTIONS: Final = ("aws_s3_locking_provider", "delta_dynamo_table_name")
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_S3_KEYS: Final = {
    # pyarrow S3FileSystem argument <- delta-rs (object_store) option names, lower-cased
    "access_key": ("aws_access_key_id", "access_key_id"),
    "secret_key": ("aws_secret_access_key", "secret_access_key"),
    "session_token": ("aws_session_token", "session_token", "aws_token", "token"),
    "region": ("aws_region", "region", "aws_default_region", "default_region"),
    "endpoint_override": (
        "aws_endpoint_url_s3",
        "aws_endpoint_url",
        "aws_endpoint",
        "endpoint_url",
        "endpoint",
    ),
}


def _scheme(uri: str) -> str:
    return urlsplit(uri).scheme.lower() if "://" in uri else ""


def is_local(uri: str) -> bool:
    """Whether ``uri`` is a local path (plain or ``file://``)."""
    return _scheme(uri) in ("", "file")


def store_path(uri: str) -> str:
    """Where ``uri`` is in its pyarrow file system: an absolute local path, or ``bucket/key``."""
    scheme = _scheme(uri)
    if scheme in ("", "file"):
        return os.path.abspath(uri.removeprefix("file://") if scheme else uri)
    split = urlsplit(uri)
    return f"{split.netloc}{split.path}".rstrip("/")


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in options.items()}


def commit_safety_problems(data_root: str, storage_options: Mapping[str, str]) -> list[str]:
    """Why commits of several writers under ``data_root`` would not be safe with these options
    (empty when they are; see the module docstring)."""
    if _scheme(data_root) not in S3_SCHEMES:
        return []
    options = _lower(storage_options)
    problems = []
    mode = options.get("aws_conditional_put", options.get("conditional_put"))
    if mode is not None and mode.lower() != SAFE_CONDITIONAL_PUT:
        problems.append(
            f"storage_options: aws_conditional_put must be {SAFE_CONDITIONAL_PUT} (delta-rs' default) on S3, "
            f"not {mode!r}: concurrent Delta commits need the store's conditional put (If-None-Match)"
        )
    problems += [
        f"storage_options: {key.upper()} is not supported by deltalake 1.x (it is ignored: no DynamoDB "
        "lock is taken); concurrent commits use the store's conditional put (If-None-Match) instead: "
        "remove it"
        for key in _LOCKING_OPTIONS
        if key in options
    ]
    if options.get("aws_s3_allow_unsafe_rename", "").lower() in _TRUE:
        problems.append(
            "storage_options: AWS_S3_ALLOW_UNSAFE_RENAME lets two writers overwrite each other's "
            "commit; it is not needed (commits use the store's conditional put): remove it"
        )
    return problems


def arrow_filesystem(
    uri: str, storage_options: Mapping[str, str] | None = None
) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system for ``uri`` and the path of ``uri`` in it.

    S3 (``s3://``, ``s3a://``) takes its credentials, region and endpoint from the delta-rs
    ``storage_options`` (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
    ``AWS_REGION``, ``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, ``AWS_VIRTUAL_HOSTED_STYLE_REQUEST``),
    falling back on the environment as delta-rs does; other stores take theirs from the environment.
    """
    scheme = _scheme(uri)
    if scheme in ("", "file"):
        return pafs.LocalFileSystem(), store_path(uri)
    if scheme not in S3_SCHEMES:
        fs, path = pafs.FileSystem.from_uri(uri)
        return fs, str(path)
    options = {**_lower(_environment_s3_options()), **_lower(storage_options or {})}
    kwargs: dict[str, object] = {}
    for argument, names in _S3_KEYS.items():
        value = next((options[n] for n in names if options.get(n)), None)
        if value is not None:
            kwargs[argument] = value
    endpoint = kwargs.get("endpoint_override")
    if isinstance(endpoint, str) and "://" in endpoint:
        parts = urlsplit(endpoint)
        kwargs["scheme"], kwargs["endpoint_override"] = parts.scheme, parts.netloc
    elif options.get("aws_allow_http", "").lower() in _TRUE:
        kwargs["scheme"] = "http"
    if options.get("aws_virtual_hosted_style_request", "").lower() in _TRUE:
        kwargs["force_virtual_addressing"] = True
    return pafs.S3FileSystem(**kwargs), store_path(uri)


def _environment_s3_options() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key.upper().startswith("AWS_")}
