"""Table maintenance for the bronze tables (``telemetry-sink maintain``).

- compaction (``OPTIMIZE``): rewrites the many small files group commit produces into fewer large
  ones, per partition;
- ``VACUUM``: deletes files no longer referenced by the table (those compaction replaced, and those
  of commits that failed) once they are older than the retention period (default 168 hours, Delta's
  default; shorter retention can break readers of older versions);
- a checkpoint of the resulting version, so readers do not replay the whole log.

All of it is safe while the sink writes, as long as the retention is longer than a commit can take
(vacuum deletes unreferenced files older than the retention, and a commit in flight has written
files that are not referenced yet): compaction and vacuum commit through Delta's conflict checks,
and appends never conflict with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from deltalake import DeltaTable

__all__ = ["DEFAULT_RETENTION_HOURS", "MaintenanceReport", "maintain"]

DEFAULT_RETENTION_HOURS: Final = 168


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
    """Compact, checkpoint and vacuum one table; report what was done."""
    if retention_hours < 0:
        raise ValueError("retention_hours must not be negative")
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
            enforce_retention_duration=retention_hours >= DEFAULT_RETENTION_HOURS,
            full=True,  # also files no commit ever referenced (those of failed commits)
        )
        vacuumed = len(deleted)
    checkpoint_version = None
    if checkpoint:  # last, so it covers the compaction and vacuum commits too
        table.create_checkpoint()
        checkpoint_version = table.version()
    return MaintenanceReport(table_uri, before, table.version(), removed, added, checkpoint_version, vacuumed)
