"""The decode job: bronze ``telemetry_pushes`` (every replica's shard) -> silver ``metric_points``,
and the pushes that do not decode -> ``decode_quarantine``.

Incremental and exactly once, per bronze shard: the job remembers how far it got in each shard as the
``txn`` of app id ``telemetry-sink-decode/<shard>`` in each target table (the bronze version it
decoded up to). A run reads only the rows each shard's commits added since (``DeltaLake.read_added``),
decodes the shards' new rows together (``transforms.decode_jvm``: in Spark's JVM, and in
``mapInArrow`` what that decoder leaves to ``transforms.decode``) and commits the points, then decodes
again only the pushes that gave no point (those quarantined, and empty ones) and commits the
quarantined ones; a small batch (``ONE_PASS_PUSHES``, an incremental run's) is decoded once and kept
for both commits. Each commit carries every shard's new version as its batch (one ``txn`` per shard,
in one commit on the bridge; on the connector, which commits one ``txn`` at a time, a batch and its
commits per shard). A re-run, or a run after a crash between the two commits, writes nothing twice: a
table that already has the batch skips it, and a shard whose two tables disagree is brought level on
its own first.
"""

from __future__ import annotations

import functools
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
    """The bronze versions one run decoded of one shard."""

    shard: str
    from_version: int
    to_version: int


@dataclass
class DecodeReport:
    shards: list[ShardReport] = field(default_factory=list)
    points: int = 0
    """The points the run wrote to silver (of every shard: they are decoded together)."""
    quarantined: int = 0
    """The pushes it quarantined."""


def decode(bronze: DataFrame, *, jvm: bool = True) -> DataFrame:
    """Bronze push rows -> decoded rows (points, and one row per quarantined push): in Spark's JVM
    where its decoder answers for a push and its jar is there, in Python otherwise
    (``transforms.decode_jvm``); ``jvm=False``: all in Python."""
    return decoded(bronze, jvm=jvm and register(bronze.sparkSession, FUNCTIONS))


def _app_id(shard: str) -> str:
    """The ``txn`` app id under which silver and the quarantine follow a bronze shard."""
    return f"{DECODE_APP}/{shard.rstrip('/').rsplit('/', 1)[-1]}"


@dataclass(frozen=True)
class _Range:
    """Bronze versions ``after + 1 .. until`` of one shard, to be decoded as one batch."""

    shard: str
    after: int
    until: int


def run_decode(
    lake: DeltaLake, data_root: str, *, progress: Callable[[str], None] = lambda _: None
) -> DecodeReport:
    """Decode what every bronze shard gained since the last run: the shards together, one commit to
    each table carrying every shard's batch (``DeltaLake.per_commit``: one shard a commit on the
    connector)."""
    silver = table_uri(data_root, METRIC_POINTS)
    quarantine = table_uri(data_root, QUARANTINE)
    run = _DecodeRun(lake, silver, quarantine, progress)
    level: list[_Range] = []
    for shard in lake.shards(table_uri(data_root, BRONZE_PUSHES)):
        latest = lake.version(shard)
        app_id = _app_id(shard)
        done = {silver: lake.txn_version(silver, app_id), quarantine: lake.txn_version(quarantine, app_id)}
        if latest is None or min(done.values()) >= latest:
            continue
        behind, ahead = min(done.values()), max(done.values())
        if behind < ahead:  # a crash between the two commits left one table behind: bring it level first
            run.decode([_Range(shard, behind, ahead)], [uri for uri, v in done.items() if v == behind])
        if ahead < latest:
            level.append(_Range(shard, ahead, latest))
    for ranges in lake.per_commit(level):
        run.decode(ranges, [silver, quarantine])
    return run.report


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


@dataclass
class _DecodeRun:
    """One run of the decode job: where it writes, and what it did."""

    lake: DeltaLake
    silver: str
    quarantine: str
    progress: Callable[[str], None]
    report: DecodeReport = field(default_factory=DecodeReport)

    def decode(self, ranges: list[_Range], targets: list[str]) -> None:
        """Decode these shards' ranges as one batch into the ``targets`` (silver, the quarantine
        or both), one commit each carrying every range's ``txn``."""
        lake, silver, quarantine, report = self.lake, self.silver, self.quarantine, self.report
        for r in ranges:
            self.progress(f"decode {r.shard}: bronze versions {r.after + 1}..{r.until}")
            report.shards.append(ShardReport(r.shard, r.after + 1, r.until))
        parts = [frame for r in ranges if (frame := lake.read_added(r.shard, r.after, r.until)) is not None]
        if not parts:
            return
        bronze = functools.reduce(DataFrame.unionByName, parts)
        txns = {_app_id(r.shard): r.until for r in ranges}
        counts = [lake.added_rows(r.shard, r.after, r.until) for r in ranges]
        pushes = None if None in counts else sum(c for c in counts if c is not None)
        points = quarantined = 0
        suspects = bronze
        if set(targets) == {silver, quarantine} and pushes is not None and pushes <= ONE_PASS_PUSHES:
            rows = decode(bronze).persist(StorageLevel.MEMORY_AND_DISK)
            try:
                points = _written(lake, silver, _commit(lake, _points(rows), silver, txns, silver=True))
                # counted in the cached rows: a batch with nothing to quarantine (the usual one) is a
                # commit of its txns alone, not a Spark write
                failed = _quarantined(rows)
                [[quarantined]] = failed.select(F.count("reason")).collect()
                _commit(lake, failed if quarantined else None, quarantine, txns, silver=False)
            finally:
                rows.unpersist()
            targets = []
        if silver in targets:
            # one pass decodes and writes the points (no cache: caching cost more than the decode)...
            span = _commit(lake, _points(decode(bronze)), silver, txns, silver=True)
            points = _written(lake, silver, span)
            written = None if span is None else lake.read_added(silver, *span)
            if written is not None:  # ...and only the pushes that gave no point are decoded again
                suspects = bronze.join(written.select("push_id").distinct(), "push_id", "left_anti")
        if quarantine in targets:
            span = _commit(lake, _quarantined(decode(suspects)), quarantine, txns, silver=False)
            quarantined = _written(lake, quarantine, span)
        report.points += points
        report.quarantined += quarantined
        if quarantined:
            shards = ", ".join(r.shard for r in ranges)
            log.warning("%s: %d pushes quarantined (see %s)", shards, quarantined, quarantine)


def _points(rows: DataFrame) -> DataFrame:
    """Decoded rows -> silver rows (the points)."""
    return rows.where(F.col("quarantine_reason").isNull()).select(*METRIC_POINTS_SCHEMA.names)


def _quarantined(rows: DataFrame) -> DataFrame:
    """Decoded rows -> quarantine rows (one per push that did not decode)."""
    failed = rows.where(F.col("quarantine_reason").isNotNull())
    return failed.withColumnRenamed("quarantine_reason", "reason").select(*QUARANTINE_SCHEMA.names)


def _commit(
    lake: DeltaLake, rows: DataFrame | None, uri: str, txns: dict[str, int], *, silver: bool
) -> tuple[int, int] | None:
    """Commit ``rows`` (None: none) to silver (clustered by time) or to the quarantine as the
    batches ``txns`` (app id -> bronze version); the versions before and after the commit, None if
    the table had them already."""
    before = lake.version(uri)
    if not lake.write(
        rows,
        uri,
        schema=METRIC_POINTS_SCHEMA if silver else QUARANTINE_SCHEMA,
        partition_by=["date"],
        txns=txns,
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
