"""Idempotent appends to one Delta table with delta-rs (``deltalake``).

Each ``append(data, version)`` is one Delta commit carrying a transaction action ``txn(app_id,
version)``. Before writing, the appender reads the table's latest ``txn`` version for its app id: if
the batch is already there (an earlier attempt committed but reported an error), nothing is written
again. Transient storage errors are retried with bounded exponential backoff; concurrent writers'
commits are resolved by delta-rs (appends do not conflict; it retries for the next log version).
Files of a failed attempt are never referenced by the log, so readers never see them (``vacuum``
removes them).
"""

from __future__ import annotations

import ctypes
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Final, Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import TableNotFoundError

__all__ = ["AppendError", "DeltaAppender", "storage_option", "sync_local_table"]

log = logging.getLogger(__name__)

TABLE_CONFIGURATION: Final = {
    # txn entries of writers that are gone are forgotten after a week
    "delta.setTransactionRetentionDuration": "interval 7 days",
}
REOPEN_EVERY_COMMITS: Final = 100
"""A ``DeltaTable`` kept across commits and updated in place grows without bound in delta-rs (native
memory, and slower commits): measured by ``benchmarks/push_path/soak.py``, +100% resident memory in 10
minutes. The appender opens the table afresh after this many commits, which keeps both flat."""
Compression = Literal["UNCOMPRESSED", "SNAPPY", "GZIP", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"]


def storage_option(text: str) -> tuple[str, str]:
    """One delta-rs storage option from the command line, ``KEY=VALUE``; ValueError otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"expected KEY=VALUE, got {text!r}")
    return key, value


class AppendError(Exception):
    """A batch could not be committed after every attempt; nothing of it is visible."""


class DeltaAppender:
    """Appends Arrow data to the Delta table at ``table_uri`` as ``app_id``."""

    def __init__(
        self,
        table_uri: str,
        schema: pa.Schema,
        app_id: str,
        *,
        partition_by: Sequence[str] = (),
        storage_options: Mapping[str, str] | None = None,
        attempts: int = 5,
        backoff_ms: int = 100,
        max_backoff_ms: int = 2000,
        max_commit_retries: int = 100,
        stats_columns: Sequence[str] = (),
        compression: Compression = "SNAPPY",
        table_configuration: Mapping[str, str] | None = None,
        reopen_every: int = REOPEN_EVERY_COMMITS,
    ) -> None:
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.table_uri = table_uri
        self.schema = schema
        self.app_id = app_id
        self.partition_by = list(partition_by)
        self.storage_options = dict(storage_options or {})
        self.attempts = attempts
        self.backoff_ms = backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.max_commit_retries = max_commit_retries
        self.configuration = {**TABLE_CONFIGURATION, **(table_configuration or {})}
        if stats_columns:
            self.configuration["delta.dataSkippingStatsColumns"] = ",".join(stats_columns)
        self.writer_properties = WriterProperties(compression=compression)
        self.reopen_every = reopen_every
        self._table: DeltaTable | None = None
        self._commits_since_open = 0

    def load(self) -> DeltaTable | None:
        """The table at its latest version, or None if it does not exist yet."""
        if self._commits_since_open >= self.reopen_every:
            self._table = None
        if self._table is None:
            self._commits_since_open = 0
            try:
                self._table = DeltaTable(self.table_uri, storage_options=self.storage_options or None)
            except TableNotFoundError:
                return None
        else:
            self._table.update_incremental()
        return self._table

    def committed_version(self) -> int:
        """The last ``txn`` version this app id committed, or -1."""
        table = self.load()
        if table is None:
            return -1
        version = table.transaction_version(self.app_id)
        return -1 if version is None else version

    def append(self, data: pa.Table, version: int) -> bool:
        """Commit ``data`` as batch ``version``; False if that batch was already committed.

        Raises AppendError after the last failed attempt.
        """
        delay = self.backoff_ms
        last_error: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                if self.committed_version() >= version:
                    return attempt > 1  # found on a retry: our earlier attempt committed it
                self._write(data, version)
                return True
            except Exception as exc:  # storage faults surface as many types (OSError, DeltaError, ...)
                last_error = exc
                self._table = None  # reload from scratch next time
                log.warning(
                    "commit of %s batch %d failed (attempt %d): %s", self.app_id, version, attempt, exc
                )
                if attempt < self.attempts:
                    time.sleep(delay / 1000)
                    delay = min(delay * 2, self.max_backoff_ms)
        try:
            if self.committed_version() >= version:
                return True  # the last attempt committed after all
        except Exception as exc:
            last_error = exc
        raise AppendError(f"{self.table_uri}: batch {version} not committed: {last_error}") from last_error

    def _create(self) -> DeltaTable:
        """Create the table, or open it if another writer just did.

        A losing creator's commit must fail rather than be retried on top of the winner's (which
        would add a second table id to the log), hence no commit retries here.
        """
        try:
            return DeltaTable.create(
                self.table_uri,
                self.schema,
                mode="ignore",
                partition_by=self.partition_by or None,
                configuration=self.configuration,
                storage_options=self.storage_options or None,
                commit_properties=CommitProperties(max_commit_retries=0),
            )
        except Exception as exc:  # lost the race: the table exists now (or the real error surfaces)
            log.info("creating %s: %s; opening it", self.table_uri, exc)
            return DeltaTable(self.table_uri, storage_options=self.storage_options or None)

    def _write(self, data: pa.Table, version: int) -> None:
        table = self._table
        if table is None:
            table = self._table = self._create()
        write_deltalake(
            table,
            data,
            mode="append",
            writer_properties=self.writer_properties,
            storage_options=self.storage_options or None,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(self.app_id, version, int(time.time() * 1000))],
                max_commit_retries=self.max_commit_retries,
            ),
        )
        self._commits_since_open += 1


def _local_path(table_uri: str) -> str | None:
    if table_uri.startswith("file://"):
        return table_uri.removeprefix("file://")
    return None if "://" in table_uri else table_uri


def sync_local_table(table_uri: str) -> None:
    """Flush the file system holding a local table to stable storage (delta-rs does not fsync).

    Uses ``syncfs`` on the table's directory (Linux), else ``sync``. Object stores need nothing: a
    completed PUT is durable.
    """
    path = _local_path(table_uri)
    if path is None:
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syncfs = getattr(libc, "syncfs", None)
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"syncfs({path}): {os.strerror(errno)}")
    finally:
        os.close(fd)
