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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from deltalake import DeltaTable

from exporters.errors import ExporterError

__all__ = [
    "DEFAULT_RETENTION_HOURS",
    "MIN_RETENTION_HOURS",
    "MaintenanceReport",
    "RetentionTooShortError",
    "check_retention",
    "maintain",
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
