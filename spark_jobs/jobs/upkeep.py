"""The rollup's upkeep of the bronze shards it reads (compaction at the pace the sinks write them)
and of the logs of the tables it writes.

A sink replica under load commits a file to its bronze shard every 200 ms, about 18,000 an hour. Left
to the daily ``telemetry-sink maintain``, a shard holds hundreds of thousands of files by the end of a
day, and each snapshot load, question to its log and read of its rows grows with them. So each rollup
run ends by compacting every bronze shard (``telemetry_pushes``, ``quota_samples``) that holds
``COMPACT_AT_FILES`` files or more under ``COMPACT_TARGET_BYTES``: a shard then holds at most about
that many data files at any hour, at the cost of rewriting what landed since its last compaction (and
the one partly filled file of the day it joins). Vacuum stays with ``telemetry-sink maintain`` and its
retention.

Then the run expires the compacted shard's log (``exporters.expire_log``): the entries older than the
shard's ``delta.logRetentionDuration`` (5 minutes, set by the sink), once every watermark the rollup
keeps in the shard (the decode's, the activity table's) is past them. With the checkpoint's tombstones
kept as long (``delta.deletedFileRetentionDuration``), what each load of a busy shard reads stays a few
minutes' worth of commits, whatever the shard's age.

The tables the rollup writes (silver, the quarantine, the gold tables) get about one commit a minute
each, ~1,440 log entries a day, and each load of one lists them all. They keep a day of log
(``spark_jobs.lake.TABLE_CONFIGURATION``; Delta's default is 30 days, which at day 30 made each of a
run's few dozen loads list ~43,000 entries), expired by the run at its end (``expire_logs``) behind
what every table that follows the table has read of it, as the bronze logs are: a table whose follower
is behind (a run that died between the two) keeps every commit the follower has not read. Entries go
only behind a table's latest checkpoint (delta-rs writes one every 100 commits), so a run expires the
logs of the tables checkpointed while it ran (``checkpointed_since``: one metadata request a table),
and a log holds a day of entries and at most a few hundred more.

The compaction is ``exporters.maintain`` without the vacuum: delta-rs's OPTIMIZE, which commits beside
the sinks' appends without conflicting with them, and a checkpoint of the version it wrote. Its commit
changes no data: the decode reads past it (``spark_jobs.lake``: the files a rewrite replaced are read
where they are). A compaction that fails (storage, or another ``maintain`` compacting the same files)
leaves the shard as it was; it is reported and tried again by the next run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from exporters import expire_log, list_shards, maintain
from exporters.delta.maintenance import EXPIRY_MARGIN, log_file_time
from exporters.delta.schema import BRONZE_TABLES

__all__ = [
    "COMPACT_AT_FILES",
    "COMPACT_TARGET_BYTES",
    "Compaction",
    "checkpointed_since",
    "compact_bronze",
    "expire_logs",
    "small_files",
]

log = logging.getLogger(__name__)

COMPACT_AT_FILES: Final = 1_000
"""How many small files a bronze shard gathers before a run compacts it: about three minutes of a sink
replica committing every 200 ms, so a run a minute compacts a busy shard every few runs and a quiet one
(a small fleet's few commits a minute) every few hours."""
COMPACT_TARGET_BYTES: Final = 128 * 1024 * 1024
"""The size compaction writes files up to; a file under it counts as small."""


@dataclass(frozen=True)
class Compaction:
    """What one run's compaction did to one bronze shard (``error`` if it failed)."""

    shard: str
    small_files: int
    files_removed: int = 0
    files_added: int = 0
    version: int | None = None
    log_expired: bool = False
    """Whether its log's expired entries were deleted (not while a watermark of the rollup's is behind
    them)."""
    error: str | None = None


def small_files(uri: str, storage_options: Mapping[str, str] | None = None) -> int:
    """How many of the table's files are under ``COMPACT_TARGET_BYTES`` (its log's add actions, in
    Arrow: no Python object per file)."""
    table = DeltaTable(uri, storage_options=dict(storage_options) if storage_options else None)
    sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes")
    return int(pc.sum(pc.less(sizes, COMPACT_TARGET_BYTES)).as_py() or 0)


def compact_bronze(
    data_root: str,
    *,
    storage_options: Mapping[str, str] | None = None,
    at_files: int = COMPACT_AT_FILES,
    read_through: Callable[[str, str], int] | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Compaction]:
    """Compact (and checkpoint) each bronze shard under ``data_root`` that holds ``at_files`` small
    files or more, then expire its log behind ``read_through(table, shard)``, the version up to which
    every reader of the shard has read (None: leave the logs alone); what was done to each, in shard
    order."""
    done = []
    for table in BRONZE_TABLES:
        for shard in list_shards(data_root, table, storage_options):
            count = 0
            try:  # the run's tables are written: a shard it cannot read or compact is only reported
                count = small_files(shard, storage_options)
                if count < at_files:
                    continue
                progress(f"{shard}: compacting {count} small files")
                report = maintain(
                    shard,
                    storage_options=storage_options,
                    compact=True,
                    checkpoint=True,
                    vacuum=False,
                    target_file_size=COMPACT_TARGET_BYTES,
                )
            except Exception as exc:  # storage faults surface as many types (OSError, DeltaError, ...)
                log.warning("compaction of %s failed: %s", shard, exc)
                done.append(Compaction(shard, count, error=(str(exc) or repr(exc)).splitlines()[0]))
                continue
            expired = False
            if read_through is not None:
                try:
                    expired = expire_log(shard, read_through(table, shard), storage_options=storage_options)
                except Exception as exc:  # as above: the next compaction tries again
                    log.warning("expiring the log of %s failed: %s", shard, exc)
            done.append(
                Compaction(
                    shard,
                    count,
                    report.files_removed_by_compaction,
                    report.files_added_by_compaction,
                    report.version_after,
                    expired,
                )
            )
    return done


def expire_logs(
    read_through: Mapping[str, int],
    *,
    storage_options: Mapping[str, str] | None = None,
) -> list[str]:
    """Expire the log of each table of ``read_through`` (its URI -> the version up to which every
    table that follows it has read it) behind that version (``exporters.expire_log``); the tables
    whose log was expired. A table that cannot be read or expired is only logged: the next run tries
    again."""
    expired = []
    for uri, version in read_through.items():
        try:
            if expire_log(uri, version, storage_options=storage_options):
                expired.append(uri)
        except Exception as exc:  # storage faults surface as many types (OSError, DeltaError, ...)
            log.warning("expiring the log of %s failed: %s", uri, exc)
    return expired


def checkpointed_since(
    uris: Sequence[str], since: datetime, *, storage_options: Mapping[str, str] | None = None
) -> list[str]:
    """The tables among ``uris`` whose latest checkpoint was written at ``since`` or later (less
    ``EXPIRY_MARGIN``: the store's clock may be a little off ours), by the modification time of their
    ``_delta_log/_last_checkpoint``: one metadata request a table, whatever its age. A table whose
    checkpoint cannot be read is only logged, as in ``expire_logs``."""
    cutoff = since - EXPIRY_MARGIN
    fresh = []
    for uri in uris:
        try:
            written = log_file_time(uri, "_last_checkpoint", storage_options)
        except Exception as exc:  # as in expire_logs: the next run asks again
            log.warning("the checkpoint of %s could not be read: %s", uri, exc)
            continue
        if written is not None and written >= cutoff:
            fresh.append(uri)
    return fresh
