"""Table maintenance for the bronze tables (``telemetry-sink maintain``), and its retention floor.

- compaction (``OPTIMIZE``): rewrites the many small files group commit produces into fewer large
  ones, per partition;
- ``VACUUM``: deletes files no longer referenced by the table (those compaction replaced, and those
  of commits that failed) once they are older than the retention period;
- a checkpoint of the resulting version, so readers do not replay the whole log.

Vacuum runs in full mode (it also deletes files that no commit ever referenced), so it cannot tell a
failed commit's files from those of a commit in flight: a writer's parquet files are unreferenced
between their write and their commit. The retention is what keeps them, hence a floor,
``MIN_RETENTION_HOURS``, below which ``maintain`` refuses to run (``RetentionTooShortError``), and
delta-rs's own check (``enforce_retention_duration``) is always on. There is no override: the space a
shorter retention would free is not worth acknowledged data. With a retention at or above the floor,
all of it is safe while the sink and the rollups write: compaction and vacuum commit through Delta's
conflict checks, appends never conflict with them, and no file younger than the floor is deleted.

The log of a bronze table is expired by its reader, not its writer (``expire_log``): its commits are
how the rollup finds what landed since it last read (``spark_jobs.lake``), so the sink's commits leave
the log alone (``delta.enableExpiredLogCleanup`` false, ``exporters.delta.appender``) and the rollup
deletes the entries older than ``delta.logRetentionDuration`` only once it has read past them. The
log then holds a few minutes of commits, whatever the table's age, and a rollup that was stopped for
a day finds every commit since it stopped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import pyarrow.fs as pafs
from deltalake import DeltaTable

from exporters.delta.object_store import arrow_filesystem
from exporters.errors import ExporterError

__all__ = [
    "DEFAULT_RETENTION_HOURS",
    "EXPIRY_MARGIN",
    "LOG_RETENTION_DEFAULT",
    "MIN_RETENTION_HOURS",
    "MaintenanceReport",
    "RetentionTooShortError",
    "check_retention",
    "commit_time",
    "expire_log",
    "log_file_time",
    "log_retention",
    "maintain",
    "may_expire_log",
]

MIN_RETENTION_HOURS: Final = 168
"""The shortest vacuum retention: files younger than this are never deleted. What writers need:

- a sink commit, including its retries (``commit_attempts`` 5, backoff 100 ms doubling to 2 s: about
  1.5 s of waiting plus five attempts' storage I/O; no attempt has a timeout, so hung storage can hold
  one for as long as it hangs);
- the Spark jobs' delta-rs bridge (``spark_jobs.lake``), whose part files are written by a whole
  Spark write, then moved into the table (a rename keeps their modification time) and committed: as
  old as the longest rollup write at their commit, hours on a catch-up;
- a margin for clock skew between the writers and the storage, and for rollups reading versions a
  compaction replaced.

A day would cover the writers; 168 hours (a week) is delta-rs's and Delta's default
(``delta.deletedFileRetentionDuration``), which delta-rs enforces anyway while its check is on, so it
is the floor."""

DEFAULT_RETENTION_HOURS: Final = MIN_RETENTION_HOURS


class RetentionTooShortError(ExporterError, ValueError):
    """A vacuum retention under ``MIN_RETENTION_HOURS``: it would delete files of commits in flight."""


def check_retention(retention_hours: int) -> int:
    """``retention_hours`` if vacuum may use it; RetentionTooShortError otherwise."""
    if retention_hours < MIN_RETENTION_HOURS:
        raise RetentionTooShortError(
            f"retention of {retention_hours} hours refused: the minimum is {MIN_RETENTION_HOURS} "
            "(vacuum deletes unreferenced files older than the retention, and a commit in flight has "
            "written files that are not referenced yet: a shorter retention loses acknowledged data)"
        )
    return retention_hours


@dataclass(frozen=True, slots=True)
class MaintenanceReport:
    table_uri: str
    version_before: int
    version_after: int
    files_removed_by_compaction: int
    files_added_by_compaction: int
    checkpoint_version: int | None
    files_vacuumed: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def maintain(
    table_uri: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    compact: bool = True,
    checkpoint: bool = True,
    vacuum: bool = True,
    retention_hours: int = DEFAULT_RETENTION_HOURS,
    target_file_size: int | None = None,
) -> MaintenanceReport:
    """Compact, checkpoint and vacuum one table; report what was done.

    Raises RetentionTooShortError, before touching the table, for a retention under the floor."""
    check_retention(retention_hours)
    table = DeltaTable(table_uri, storage_options=dict(storage_options) if storage_options else None)
    before = table.version()
    removed = added = 0
    if compact:
        metrics = table.optimize.compact(target_size=target_file_size)
        removed, added = int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0))
    vacuumed = 0
    if vacuum:
        deleted = table.vacuum(
            retention_hours=retention_hours,
            dry_run=False,
            enforce_retention_duration=True,  # never off: it is the last guard of files in flight
            full=True,  # also files no commit ever referenced (those of failed commits)
        )
        vacuumed = len(deleted)
    checkpoint_version = None
    if checkpoint:  # last, so it covers the compaction and vacuum commits too
        table.create_checkpoint()
        checkpoint_version = table.version()
    return MaintenanceReport(table_uri, before, table.version(), removed, added, checkpoint_version, vacuumed)


LOG_RETENTION_DEFAULT: Final = timedelta(days=30)
"""Delta's ``delta.logRetentionDuration`` when a table does not set it."""
EXPIRY_MARGIN: Final = timedelta(minutes=2)
"""How much younger than the log retention the oldest commit a reader has not read must be for its log
to be expired: the expiry computes its own cutoff a little later than the check, and the store's
clock that stamps the entries may be a little off the reader's."""
_INTERVAL: Final = re.compile(
    r"^\s*(?:interval\s+)?(\d+)\s+(second|minute|hour|day|week)s?\s*$", re.IGNORECASE
)


def log_retention(configuration: Mapping[str, str | None]) -> timedelta | None:
    """A table's ``delta.logRetentionDuration`` (``interval 1 hours``, Delta's form); None when it is
    not one this module reads (then its log is never expired here)."""
    text = configuration.get("delta.logRetentionDuration")
    if text is None:
        return LOG_RETENTION_DEFAULT
    match = _INTERVAL.match(text)
    if match is None:
        return None
    return timedelta(**{f"{match.group(2).lower()}s": int(match.group(1))})


def may_expire_log(first_unread_at: datetime | None, retention: timedelta, now: datetime) -> bool:
    """Whether a table's log may be expired for a reader whose oldest unread commit was written at
    ``first_unread_at`` (None: it has read every commit).

    Expiry deletes the entries older than the retention, but keeps the newest of them loadable (and the
    checkpoint it needs): so the version a reader read through stays loadable, and every commit after it
    stays in the log, as long as the oldest commit it has not read is younger than the retention."""
    return first_unread_at is None or first_unread_at > now - retention + EXPIRY_MARGIN


def commit_time(uri: str, version: int, storage_options: Mapping[str, str] | None = None) -> datetime | None:
    """When ``version`` of the table was committed: its log entry's modification time in the store (one
    metadata request, whatever the table's age), or None once the log no longer holds it."""
    return log_file_time(uri, f"{version:020d}.json", storage_options)


def log_file_time(uri: str, name: str, storage_options: Mapping[str, str] | None = None) -> datetime | None:
    """When the file ``name`` of the table's ``_delta_log`` was written: its modification time in the
    store (one metadata request), or None if there is no such file."""
    fs, root = arrow_filesystem(uri, storage_options)
    info = fs.get_file_info(f"{root.rstrip('/')}/_delta_log/{name}")
    if info.type != pafs.FileType.File or info.mtime is None:
        return None
    mtime: datetime = info.mtime
    return mtime if mtime.tzinfo else mtime.replace(tzinfo=UTC)


def expire_log(
    table_uri: str, read_through: int, *, storage_options: Mapping[str, str] | None = None
) -> bool:
    """Delete the table's log entries older than its ``delta.logRetentionDuration`` (delta-rs's
    cleanup: they are before its latest checkpoint), if a reader that has read versions up to
    ``read_through`` keeps every commit it has not read (``may_expire_log``); whether it did. The
    wall clock decides, as it does in delta-rs's cleanup."""
    options = dict(storage_options) if storage_options else None
    table = DeltaTable(table_uri, storage_options=options)
    retention = log_retention(table.metadata().configuration)
    if retention is None:
        return False
    first_unread = None
    if read_through < table.version():
        first_unread = commit_time(table_uri, read_through + 1, storage_options)
        if first_unread is None:  # gone already: nothing is safe to delete on this reader's behalf
            return False
    if not may_expire_log(first_unread, retention, datetime.now(UTC)):
        return False
    table.cleanup_metadata()
    return True
