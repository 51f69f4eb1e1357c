"""The decode job: bronze ``telemetry_pushes`` (every replica's shard) -> silver ``metric_points``,
and the pushes that do not decode -> ``decode_quarantine``.

Incremental and exactly once, per bronze shard: the job remembers how far it got in each shard as the
``txn`` of app id ``telemetry-sink-decode/<shard>`` in each target table (the bronze version it
decoded up to). A run reads only the rows the shard's commits added since (``DeltaLake.read_added``),
decodes them (``transforms.decode_jvm``: in Spark's JVM, and in ``mapInArrow`` what that decoder leaves
to ``transforms.decode``) and commits the points, then decodes again only
the pushes that gave no point (those quarantined, and empty ones) and commits the quarantined ones; a
small batch (``ONE_PASS_PUSHES``, an incremental run's) is decoded once and kept for both commits.
Both commits carry the shard's new version as their batch. A re-run, or a run after a crash between the two
commits, writes nothing twice: a table that already has the batch skips it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from spark_jobs.jvm import register
from spark_jobs.lake import DeltaLake
from spark_jobs.tables import (
    BRONZE_PUSHES,
    METRIC_POINTS,
    METRIC_POINTS_SCHEMA,
    QUARANTINE,
    QUARANTINE_SCHEMA,
    table_uri,
)
from spark_jobs.transforms.decode_jvm import FUNCTIONS, decoded

__all__ = ["DECODE_APP", "DecodeReport", "ShardReport", "decoded_through", "lag_s", "run_decode"]

log = logging.getLogger(__name__)

SILVER_FILE_ROWS: Final = 100_000
"""Silver is written sorted by ``time`` in files of at most this many rows, so that a file holds a few
minutes of a big fleet's points even after a catch-up, and the rollup of a new minute skips the others
(``DeltaLake.read(within=...)``)."""
ONE_PASS_PUSHES: Final = 20_000
"""A batch of at most this many pushes (a minute of a 10,000-client fleet) is decoded once and kept in
memory for both commits; a larger one is decoded straight into silver, and only the pushes that gave
no point are decoded again for the quarantine (keeping a catch-up's rows cost more than decoding)."""
DECODE_APP = "telemetry-sink-decode"
"""``txn`` app id prefix: ``telemetry-sink-decode/<shard name>``."""


@dataclass
class ShardReport:
    """What one run did with one bronze shard."""

    shard: str
    from_version: int
    to_version: int
    points: int = 0
    quarantined: int = 0


@dataclass
class DecodeReport:
    shards: list[ShardReport] = field(default_factory=list)

    @property
    def points(self) -> int:
        return sum(s.points for s in self.shards)

    @property
    def quarantined(self) -> int:
        return sum(s.quarantined for s in self.shards)


def decode(bronze: DataFrame, *, jvm: bool = True) -> DataFrame:
    """Bronze push rows -> decoded rows (points, and one row per quarantined push): in Spark's JVM
    where its decoder answers for a push and its jar is there, in Python otherwise
    (``transforms.decode_jvm``); ``jvm=False``: all in Python."""
    return decoded(bronze, jvm=jvm and register(bronze.sparkSession, FUNCTIONS))


def _app_id(shard: str) -> str:
    """The ``txn`` app id under which silver and the quarantine follow a bronze shard."""
    return f"{DECODE_APP}/{shard.rstrip('/').rsplit('/', 1)[-1]}"


def run_decode(
    lake: DeltaLake, data_root: str, *, progress: Callable[[str], None] = lambda _: None
) -> DecodeReport:
    """Decode what every bronze shard gained since the last run."""
    silver = table_uri(data_root, METRIC_POINTS)
    quarantine = table_uri(data_root, QUARANTINE)
    report = DecodeReport()
    for shard in lake.shards(table_uri(data_root, BRONZE_PUSHES)):
        latest = lake.version(shard)
        app_id = _app_id(shard)
        done = {silver: lake.txn_version(silver, app_id), quarantine: lake.txn_version(quarantine, app_id)}
        if latest is None or min(done.values()) >= latest:
            continue
        # a crash between the two commits leaves one table behind: bring it level first
        levels = sorted(set(done.values()))
        steps = [(levels[0], levels[-1])] if len(levels) > 1 else []
        steps.append((levels[-1], latest))
        for after, until in steps:
            if until <= after:
                continue
            progress(f"decode {shard}: bronze versions {after + 1}..{until}")
            targets = [uri for uri, version in done.items() if version <= after]
            shard_report = _decode_range(
                lake,
                shard,
                after,
                until,
                targets=targets,
                silver=silver,
                quarantine=quarantine,
                app_id=app_id,
            )
            report.shards.append(shard_report)
            for uri in targets:
                done[uri] = until
    return report


def decoded_through(lake: DeltaLake, data_root: str, shard: str) -> int:
    """The bronze shard's version up to which both silver and the quarantine hold its pushes (-1:
    none)."""
    app_id = _app_id(shard)
    return min(
        lake.txn_version(table_uri(data_root, METRIC_POINTS), app_id),
        lake.txn_version(table_uri(data_root, QUARANTINE), app_id),
    )


def lag_s(lake: DeltaLake, data_root: str) -> float | None:
    """How far behind the newest landed push silver is, in seconds (and so every gold table, at the
    end of a rollup run): per bronze shard, the commit time of its latest version less that of the
    newest version decoded (its first when none is), the largest of them; 0 when every shard is
    decoded through its latest; None when a commit time is no longer in a shard's log. One metadata
    request a shard and version, whatever the tables' age."""
    lag = 0.0
    for shard in lake.shards(table_uri(data_root, BRONZE_PUSHES)):
        latest = lake.version(shard)
        done = decoded_through(lake, data_root, shard)
        if latest is None or done >= latest:
            continue
        newest, decoded = lake.commit_time(shard, latest), lake.commit_time(shard, max(done, 0))
        if newest is None or decoded is None:
            return None
        lag = max(lag, (newest - decoded).total_seconds())
    return lag


def _decode_range(
    lake: DeltaLake,
    shard: str,
    after: int,
    until: int,
    *,
    targets: list[str],
    silver: str,
    quarantine: str,
    app_id: str,
) -> ShardReport:
    report = ShardReport(shard, after + 1, until)
    bronze = lake.read_added(shard, after, until)
    if bronze is None:
        return report
    suspects = bronze
    pushes = lake.added_rows(shard, after, until)
    if set(targets) == {silver, quarantine} and pushes is not None and pushes <= ONE_PASS_PUSHES:
        rows = decode(bronze).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            report.points = _written(
                lake, silver, _commit(lake, _points(rows), silver, app_id, until, silver=True)
            )
            # counted in the cached rows: a batch with nothing to quarantine (the usual one) is a
            # commit of its txn alone, not a Spark write
            failed = _quarantined(rows)
            [[report.quarantined]] = failed.select(F.count("reason")).collect()
            _commit(lake, failed if report.quarantined else None, quarantine, app_id, until, silver=False)
        finally:
            rows.unpersist()
        targets = []
    if silver in targets:
        # one pass decodes and writes the points (no cache: caching cost more than the decode)...
        span = _commit(lake, _points(decode(bronze)), silver, app_id, until, silver=True)
        report.points = _written(lake, silver, span)
        written = None if span is None else lake.read_added(silver, *span)
        if written is not None:  # ...and only the pushes that gave no point are decoded again
            suspects = bronze.join(written.select("push_id").distinct(), "push_id", "left_anti")
    if quarantine in targets:
        span = _commit(lake, _quarantined(decode(suspects)), quarantine, app_id, until, silver=False)
        report.quarantined = _written(lake, quarantine, span)
    if report.quarantined:
        log.warning("%s: %d pushes quarantined (see %s)", shard, report.quarantined, quarantine)
    return report


def _points(rows: DataFrame) -> DataFrame:
    """Decoded rows -> silver rows (the points)."""
    return rows.where(F.col("quarantine_reason").isNull()).select(*METRIC_POINTS_SCHEMA.names)


def _quarantined(rows: DataFrame) -> DataFrame:
    """Decoded rows -> quarantine rows (one per push that did not decode)."""
    failed = rows.where(F.col("quarantine_reason").isNotNull())
    return failed.withColumnRenamed("quarantine_reason", "reason").select(*QUARANTINE_SCHEMA.names)


def _commit(
    lake: DeltaLake, rows: DataFrame | None, uri: str, app_id: str, until: int, *, silver: bool
) -> tuple[int, int] | None:
    """Commit ``rows`` (None: none) to silver (clustered by time) or to the quarantine as batch
    ``until`` of ``app_id``; the versions before and after the commit, None if the table had the
    batch already."""
    before = lake.version(uri)
    if not lake.write(
        rows,
        uri,
        schema=METRIC_POINTS_SCHEMA if silver else QUARANTINE_SCHEMA,
        partition_by=["date"],
        app_id=app_id,
        version=until,
        clustered=("time", SILVER_FILE_ROWS) if silver else None,
    ):
        return None
    return -1 if before is None else before, lake.version(uri) or 0


def _written(lake: DeltaLake, uri: str, span: tuple[int, int] | None) -> int:
    """How many rows the commits of ``span`` added: from the Delta log, else read back."""
    if span is None:
        return 0
    counted = lake.added_rows(uri, *span)
    if counted is None:
        added = lake.read_added(uri, *span)
        counted = 0 if added is None else added.count()
    return counted
