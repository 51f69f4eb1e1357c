"""The rollup job: silver ``metric_points`` -> the four gold tables, incrementally and exactly once.

| table | one row per | partitioned by | computed from |
|---|---|---|---|
| ``rollup_client_1m`` | minute, client instance, metric, attributes | ``bucket_hour`` | ``metric_points`` |
| ``rollup_client_1h`` | hour, client instance, metric, attributes | ``bucket_date`` | ``rollup_client_1m`` |
| ``rollup_entity_1m`` | minute, quota entity, metric | ``bucket_hour`` | ``rollup_client_1m`` |
| ``rollup_entity_1h`` | hour, quota entity, metric | ``bucket_date`` | ``rollup_client_1h`` |

Each gold table remembers the version of its source it has caught up with, as the ``txn`` of app id
``telemetry-sink-rollup/<table>``. A run reads only what the source's commits added since that
version, works out which partitions those rows touch, recomputes those partitions whole from the
source's snapshot and replaces them in one commit carrying the source's version. So late data
recomputes only its buckets (for the 1-minute client rows, also the hours within ``lookback_s`` after
it, whose cumulative deltas may start from the late point), a re-run commits nothing, and a run that
dies between two tables leaves each table consistent: the next run catches each up from its own
version. ``since`` recomputes every partition from that time on as well (after a change of
``lookback_s``, say).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Literal

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from spark_jobs.jobs.decode import DecodeReport, run_decode
from spark_jobs.lake import DeltaLake, PartitionFilter
from spark_jobs.tables import METRIC_POINTS, table_uri
from spark_jobs.transforms.rollup import (
    DEFAULT_LOOKBACK_S,
    PARTITION_OF,
    Width,
    client_rollup,
    entity_rollup,
    normalize,
    rollup_schema,
)

__all__ = ["ROLLUP_APP", "ROLLUP_TABLES", "RollupReport", "TableReport", "run_rollup"]

log = logging.getLogger(__name__)

ROLLUP_APP: Final = "telemetry-sink-rollup"
ROLLUP_TABLES: Final = ("rollup_client_1m", "rollup_client_1h", "rollup_entity_1m", "rollup_entity_1h")
_HOUR: Final = "yyyy-MM-dd'T'HH"


@dataclass
class TableReport:
    """What one run did to one gold table."""

    table: str
    source_version: int
    partitions: list[str]


@dataclass
class RollupReport:
    decode: DecodeReport = field(default_factory=DecodeReport)
    tables: list[TableReport] = field(default_factory=list)


def _hour_text(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H")


def _hours_before(hour: str, lookback_s: int) -> list[str]:
    """``hour`` and the hours within ``lookback_s`` before it."""
    start = datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=UTC)
    return [_hour_text(start - timedelta(hours=k)) for k in range(math.ceil(lookback_s / 3600) + 1)]


def _distinct(frame: DataFrame, column: str) -> list[str]:
    return sorted(row[0] for row in frame.select(column).distinct().collect() if row[0] is not None)


@dataclass(frozen=True)
class _Step:
    """How one gold table follows its source."""

    table: str
    source: str
    by: Literal["client", "entity"]
    width: Width
    touched: Callable[[DataFrame], list[str]]
    """The target partitions that rows added to the source change."""
    compute: Callable[[DataFrame, list[str]], DataFrame]
    """(the source's rows for those partitions, the partitions) -> the partitions' new rows."""
    source_partitions: Callable[[list[str]], PartitionFilter | None]
    """Which source partitions to read for those target partitions."""


def _refresh(
    lake: DeltaLake, data_root: str, step: _Step, forced: Sequence[str], progress: Callable[[str], None]
) -> TableReport | None:
    """Recompute and replace the partitions of ``step.table`` that its source changed since the
    version it caught up with (and the ``forced`` ones)."""
    target = table_uri(data_root, step.table)
    source = table_uri(data_root, step.source)
    app_id = f"{ROLLUP_APP}/{step.table}"
    latest = lake.version(source)
    if latest is None:
        return None
    done = lake.txn_version(target, app_id)
    partitions = set(forced)
    if latest > done:
        added = lake.read_added(source, done, latest)
        if added is not None:
            partitions.update(step.touched(added))
    if not partitions:
        return None
    chosen = sorted(partitions)
    progress(f"{step.table}: recomputing {len(chosen)} partitions ({chosen[0]} .. {chosen[-1]})")
    rows = lake.read(source, latest, partitions=step.source_partitions(chosen))
    if rows is None:
        return None
    if latest <= done:  # only a forced recompute: replacing is idempotent, the watermark stays
        app_id, version = f"{app_id}/since", int(time.time() * 1000)
    else:
        version = latest
    column = PARTITION_OF[step.width]
    lake.write(
        step.compute(rows, chosen),
        target,
        schema=rollup_schema(step.by, step.width),
        partition_by=[column],
        app_id=app_id,
        version=version,
        replace=[{column: p} for p in chosen],
    )
    return TableReport(step.table, latest, chosen)


def run_rollup(
    lake: DeltaLake,
    data_root: str,
    *,
    lookback_s: int = DEFAULT_LOOKBACK_S,
    since: datetime | None = None,
    decode: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> RollupReport:
    """Decode what bronze gained, then bring the four gold tables up to date."""
    report = RollupReport()
    if decode:
        report.decode = run_decode(lake, data_root, progress=progress)
    lookback = F.expr(f"INTERVAL {int(lookback_s)} SECONDS")

    def hours_of_points(added: DataFrame) -> list[str]:
        # a point changes its own hour, and the deltas of its series up to lookback_s later
        hours = F.sequence(
            F.date_trunc("hour", "time"),
            F.date_trunc("hour", F.col("time") + lookback),
            F.expr("INTERVAL 1 HOUR"),
        )
        exploded = added.select(F.explode(hours).alias("hour"))
        return _distinct(exploded.select(F.date_format("hour", _HOUR).alias("h")), "h")

    def forced_partitions(pattern: str) -> list[str]:
        """Every partition with silver points from ``since`` on."""
        if since is None:
            return []
        points = lake.read(table_uri(data_root, METRIC_POINTS))
        if points is None:
            return []
        recent = points.where(F.col("time") >= F.lit(since.astimezone(UTC)))
        return _distinct(recent.select(F.date_format("time", pattern).alias("p")), "p")

    def client_minutes(points: DataFrame, hours: list[str]) -> DataFrame:
        rows = normalize(points, lookback_s).where(F.date_format("time", _HOUR).isin(hours))
        return client_rollup(rows, "1m", time_column="time")

    def silver_partitions(hours: list[str]) -> tuple[str, list[str]]:
        wanted = {h for hour in hours for h in _hours_before(hour, lookback_s)}
        return "date", sorted({h[:10] for h in wanted})

    def dates_of(added: DataFrame) -> list[str]:
        return sorted({hour[:10] for hour in _distinct(added, "bucket_hour")})

    steps = [
        _Step(
            "rollup_client_1m",
            METRIC_POINTS,
            "client",
            "1m",
            hours_of_points,
            client_minutes,
            silver_partitions,
        ),
        _Step(
            "rollup_client_1h",
            "rollup_client_1m",
            "client",
            "1h",
            dates_of,
            lambda rows, _: client_rollup(rows, "1h"),
            lambda dates: ("bucket_hour", [f"{d}T{h:02d}" for d in dates for h in range(24)]),
        ),
        _Step(
            "rollup_entity_1m",
            "rollup_client_1m",
            "entity",
            "1m",
            lambda added: _distinct(added, "bucket_hour"),
            lambda rows, _: entity_rollup(rows, "1m"),
            lambda hours: ("bucket_hour", hours),
        ),
        _Step(
            "rollup_entity_1h",
            "rollup_client_1h",
            "entity",
            "1h",
            lambda added: _distinct(added, "bucket_date"),
            lambda rows, _: entity_rollup(rows, "1h"),
            lambda dates: ("bucket_date", dates),
        ),
    ]
    forced = {"1m": forced_partitions("yyyy-MM-dd'T'HH"), "1h": forced_partitions("yyyy-MM-dd")}
    for step in steps:
        done = _refresh(lake, data_root, step, forced[step.width], progress)
        if done is not None:
            report.tables.append(done)
    return report
