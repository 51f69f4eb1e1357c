"""The decode job: bronze ``telemetry_pushes`` (every replica's shard) -> silver ``metric_points``,
and the pushes that do not decode -> ``decode_quarantine``.

Incremental and exactly once, per bronze shard: the job remembers how far it got in each shard as the
``txn`` of app id ``telemetry-sink-decode/<shard>`` in each target table (the bronze version it
decoded up to). A run reads only the rows the shard's commits added since (``DeltaLake.read_added``),
decodes them (``transforms.decode_jvm``: in Spark's JVM, and in ``mapInArrow`` what that decoder leaves
to ``transforms.decode``) and commits the points, then decodes again only
the pushes that gave no point (those quarantined, and empty ones) and commits the quarantined ones;
both commits carry the shard's new version as their batch. A re-run, or a run after a crash between the two
commits, writes nothing twice: a table that already has the batch skips it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

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

__all__ = ["DECODE_APP", "DecodeReport", "ShardReport", "run_decode"]

log = logging.getLogger(__name__)

SILVER_FILE_ROWS: Final = 100_000
"""Silver is written sorted by ``time`` in files of at most this many rows, so that a file holds a few
minutes of a big fleet's points even after a catch-up, and the rollup of a new minute skips the others
(``DeltaLake.read(within=...)``)."""
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


def run_decode(
    lake: DeltaLake, data_root: str, *, progress: Callable[[str], None] = lambda _: None
) -> DecodeReport:
    """Decode what every bronze shard gained since the last run."""
    silver = table_uri(data_root, METRIC_POINTS)
    quarantine = table_uri(data_root, QUARANTINE)
    report = DecodeReport()
    for shard in lake.shards(table_uri(data_root, BRONZE_PUSHES)):
        latest = lake.version(shard)
        app_id = f"{DECODE_APP}/{shard.rstrip('/').rsplit('/', 1)[-1]}"
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
    failed = F.col("quarantine_reason").isNotNull()
    suspects = bronze
    if silver in targets:
        # one pass decodes and writes the points (no cache: caching cost more than the decode)...
        before = lake.version(silver)
        points = decode(bronze).where(~failed).select(*METRIC_POINTS_SCHEMA.names)
        lake.write(
            points,
            silver,
            schema=METRIC_POINTS_SCHEMA,
            partition_by=["date"],
            app_id=app_id,
            version=until,
            clustered=("time", SILVER_FILE_ROWS),
        )
        after_write = (-1 if before is None else before, lake.version(silver) or 0)
        written = lake.read_added(silver, *after_write)
        if written is not None:
            counted = lake.added_rows(silver, *after_write)  # from the Delta log, else the footers
            report.points = written.count() if counted is None else counted
            # ...and only the pushes that gave no point (quarantined, or empty) are decoded again
            suspects = bronze.join(written.select("push_id").distinct(), "push_id", "left_anti")
    if quarantine in targets:
        bad = decode(suspects).where(failed).withColumnRenamed("quarantine_reason", "reason")
        bad = bad.select(*QUARANTINE_SCHEMA.names)
        before = lake.version(quarantine)
        if lake.write(
            bad, quarantine, schema=QUARANTINE_SCHEMA, partition_by=["date"], app_id=app_id, version=until
        ):  # counted from the Delta log, else read back
            after_write = (-1 if before is None else before, lake.version(quarantine) or 0)
            counted = lake.added_rows(quarantine, *after_write)
            if counted is None:
                added = lake.read_added(quarantine, *after_write)
                counted = 0 if added is None else added.count()
            report.quarantined = counted
    if report.quarantined:
        log.warning("%s: %d pushes quarantined (see %s)", shard, report.quarantined, quarantine)
    return report
