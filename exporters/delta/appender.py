"""Exactly-once appends to one Delta table with delta-rs (``deltalake``), acknowledged only on proof.

Each ``append(data, version)`` is one Delta commit carrying a transaction action ``txn(app_id,
version)``. The app id is the writer's name plus an incarnation drawn at random by each appender
(``<app id>/<16 hex digits>``), so no other process, and no earlier run of this one, ever commits
under it; versions strictly increase, and appends run one at a time. A retry after an ambiguous
failure (the commit may have landed, but the answer was lost) therefore knows the batch is in the
table exactly when the table's ``txn`` for that app id has reached its version: the proof that the
commit is its own, not a stale number or another process's. Nothing is read at start-up, so a writer
whose storage is down when it starts has nothing stale to trust later.

Transient storage errors are retried with bounded exponential backoff; concurrent writers' commits
are resolved by delta-rs (appends do not conflict; it retries for the next log version). Files of a
failed attempt are never referenced by the log, so readers never see them (``vacuum`` removes them).
With a ``WriterClaim``, every commit also carries the writer id's lease and is refused
(``ClaimRefusedError``, never retried) when another process holds it (``writer_claim``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Literal

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties, write_deltalake
from deltalake.exceptions import TableNotFoundError

from exporters.delta.writer_claim import ClaimRefusedError, WriterClaim
from exporters.errors import ExporterError

__all__ = ["AppendError", "DeltaAppender", "latest", "storage_option", "sync_local_table", "wall_clock_ms"]

log = logging.getLogger(__name__)

TABLE_CONFIGURATION: Final = {
    # txn entries of writers that are gone are forgotten after a week
    "delta.setTransactionRetentionDuration": "interval 7 days",
    # a loaded sink commits every 200 ms, ~1,500 log entries in 5 minutes, and each load of the table
    # and each commit on a local file system lists them all (T3-13): the log keeps about 5 minutes of
    # them, expired by the rollup once it has read past them (exporters.delta.maintenance.expire_log),
    # never by the sink's own commits; a rollup that falls behind only delays the expiry
    "delta.logRetentionDuration": "interval 5 minutes",
    "delta.enableExpiredLogCleanup": "false",
    # each checkpoint keeps the files a compaction replaced (the rollup compacts a busy shard every
    # few minutes) for as long: 5 minutes, not Delta's week; vacuum still deletes none of those files
    # before maintain's own retention (MIN_RETENTION_HOURS): it runs in full mode, by file age
    "delta.deletedFileRetentionDuration": "interval 5 minutes",
}
"""What the appender sets on the tables it writes (the bronze tables): when it creates one, and on a
table an earlier version created without them, the first time it opens it."""
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


class AppendError(ExporterError):
    """A batch could not be committed after every attempt; nothing of it is visible (unless a commit
    that reported an error landed after the last check: then it is there once)."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


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
        claim: WriterClaim | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """``now_ms``: the clock of the claim's heartbeats (tests fake it)."""
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self.table_uri = table_uri
        self.schema = schema
        self.app_id = f"{app_id}/{secrets.token_hex(8)}"
        """The ``txn`` app id: the writer's name and this appender's incarnation."""
        self.claim = claim
        self._now_ms = now_ms
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
        self._configured = False
        self._last_version = -1
        self._lock = threading.Lock()  # one append at a time: the proof assumes it

    def load(self) -> DeltaTable | None:
        """The table at its latest version, or None if it does not exist yet."""
        if self._commits_since_open >= self.reopen_every:
            self._table = None
        opening = self._table is None
        if opening:
            self._commits_since_open = 0
        self._table = latest(self._table, self.table_uri, self.storage_options)
        if opening and self._table is not None and not self._configured:
            self._configure(self._table)
        return self._table

    def _configure(self, table: DeltaTable) -> None:
        """Set what ``TABLE_CONFIGURATION`` sets on a table that lacks it (one metadata commit, once a
        table); a failure (a compaction committing at the same time, say) is logged, and tried again
        at the next opening."""
        wanted = {key: self.configuration[key] for key in TABLE_CONFIGURATION}
        have = table.metadata().configuration
        missing = {key: value for key, value in wanted.items() if have.get(key) != value}
        try:
            if missing:
                table.alter.set_table_properties(missing)
                log.info("%s: table properties set: %s", self.table_uri, missing)
            self._configured = True
        except Exception as exc:  # storage faults and commit conflicts surface as many types
            log.warning("%s: table properties %s not set: %s", self.table_uri, missing, exc)

    def committed_version(self) -> int:
        """The last ``txn`` version this appender committed, or -1."""
        table = self.load()
        return -1 if table is None else _txn_version(table, self.app_id)

    def transaction_versions(self, app_ids: Iterable[str]) -> dict[str, int]:
        """The table's ``txn`` version of each app id now (-1: none, or no table yet)."""
        with self._lock:
            table = self.load()
            return {app_id: -1 if table is None else _txn_version(table, app_id) for app_id in app_ids}

    def append(self, data: pa.Table, version: int, transactions: Sequence[Transaction] = ()) -> None:
        """Commit ``data`` as batch ``version`` (greater than every earlier one), with the other
        ``transactions`` (``txn`` actions of app ids this appender does not own) in the same commit;
        return once the table holds it exactly once. Raises ``ClaimRefusedError`` at once when another
        process holds the writer id, and AppendError after the last failed attempt.
        """
        if version <= self._last_version:
            raise ValueError(f"batch versions must increase: {version} after {self._last_version}")
        with self._lock:
            self._last_version = version
            self._append(data, version, transactions)

    def release(self) -> None:
        """After the last append: commit the claim's release (one attempt), so that another process
        may take the writer id over at once. Nothing when no claim is held."""
        if self.claim is None or not self.claim.held:
            return
        with self._lock:
            table = self.load()
            if table is None:
                return
            self.claim.check(table, self._now_ms())
            self._commit(self.schema.empty_table(), self.claim.release_transactions(wall_clock_ms()))
            self.claim.held = False

    def _append(self, data: pa.Table, version: int, transactions: Sequence[Transaction]) -> None:
        delay = self.backoff_ms
        last_error: Exception | None = None
        for attempt in range(1, self.attempts + 1):
            try:
                table = self.load()
                if table is not None and _txn_version(table, self.app_id) >= version:
                    if attempt == 1:  # nobody else commits under this app id: a broken invariant
                        raise AppendError(
                            f"{self.table_uri}: {self.app_id} already committed batch {version}"
                        )
                    self._committed()
                    return  # proof: an earlier attempt of this very batch committed
                updated = wall_clock_ms()  # Delta expires txn actions by it: always the real time
                claiming = []
                if self.claim is not None:
                    now = self._now_ms()
                    self.claim.check(table, now)
                    claiming = self.claim.transactions(now, updated)
                self._commit(data, [Transaction(self.app_id, version, updated), *transactions, *claiming])
                self._committed()
                return
            except (ClaimRefusedError, AppendError):
                self._table = None
                raise
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
                self._committed()
                return  # the last attempt committed after all
        except Exception as exc:
            last_error = exc
        raise AppendError(f"{self.table_uri}: batch {version} not committed: {last_error}") from last_error

    def _committed(self) -> None:
        if self.claim is not None:
            self.claim.held = True

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

    def _commit(self, data: pa.Table, transactions: list[Transaction]) -> None:
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
                app_transactions=transactions, max_commit_retries=self.max_commit_retries
            ),
        )
        self._commits_since_open += 1


def latest(table: DeltaTable | None, table_uri: str, storage_options: Mapping[str, str]) -> DeltaTable | None:
    """``table`` updated in place to the latest version, or the table at ``table_uri`` opened when
    ``table`` is None; None when the table does not exist yet."""
    if table is None:
        try:
            return DeltaTable(table_uri, storage_options=dict(storage_options) or None)
        except TableNotFoundError:
            return None
    table.update_incremental()
    return table


def _txn_version(table: DeltaTable, app_id: str) -> int:
    version = table.transaction_version(app_id)
    return -1 if version is None else version


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
