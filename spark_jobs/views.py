"""Spark SQL views of every table, under the ``telemetry`` namespace.

``register_views(lake, data_root)`` makes each table a view ``telemetry.<table>``: the bronze tables
(``telemetry_pushes`` and ``quota_samples``, every replica's shard together), silver
``metric_points`` and ``decode_quarantine``, the gold rollups, and the admin API's ``config_log``. A
view is a snapshot of its table as of the call (a committed Delta version, never part of a commit):
call it again after a rollup run to see the new data. Tables that do not exist yet are left out; the
names of the views made are returned. ``table_versions`` says which version of each table (of each
shard) there is now, so that a long-running reader (``telemetry-sink sql-server``) makes again only
the views whose tables changed (``register_views(..., only=...)``).

The 1-hour tables hold closed hours only (``spark_jobs.jobs.rollup``): their views add the hours
after the newest one written, merged from their 1-minute rows as the rollup would merge them
(``OPEN_HOURS``), so a reader sees the hour in progress too, as of the 1-minute table's version.

The views are Spark's global temporary views, whose database the session names ``telemetry``
(``spark.sql.globalTempDatabase``, set by ``session.spark_session``), so the same SQL works on the
delta-rs bridge and with the Delta Spark connector. ``EXAMPLE_QUERIES`` are the queries
``docs/spark.md`` shows (the tests run each of them).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from spark_jobs.lake import DeltaLake
from spark_jobs.tables import (
    ACTIVITY_TABLES,
    BRONZE_PUSHES,
    BRONZE_QUOTA_SAMPLES,
    CONFIG_LOG,
    METRIC_POINTS,
    QUARANTINE,
    ROLLUP_CLIENT_1H,
    ROLLUP_CLIENT_1M,
    ROLLUP_ENTITY_1H,
    ROLLUP_ENTITY_ACTIVITY_1H,
    ROLLUP_ENTITY_ACTIVITY_1M,
    ROLLUP_TABLES,
    table_uri,
)
from spark_jobs.transforms.activity import activity_rollup
from spark_jobs.transforms.rollup import PARTITION_OF, client_rollup, entity_rollup

__all__ = [
    "EXAMPLE_QUERIES",
    "NAMESPACE",
    "OPEN_HOURS",
    "TableVersions",
    "register_views",
    "table_versions",
]

NAMESPACE: Final = "telemetry"
SHARDED: Final = (BRONZE_PUSHES, BRONZE_QUOTA_SAMPLES)
TABLES: Final = (METRIC_POINTS, QUARANTINE, *ROLLUP_TABLES, *ACTIVITY_TABLES, CONFIG_LOG)

OPEN_HOURS: Final = {
    ROLLUP_CLIENT_1H: ROLLUP_CLIENT_1M,
    ROLLUP_ENTITY_1H: ROLLUP_CLIENT_1M,
    ROLLUP_ENTITY_ACTIVITY_1H: ROLLUP_ENTITY_ACTIVITY_1M,
}
"""The 1-hour tables (closed hours only) and the 1-minute table their open hours are merged from."""
_FAR: Final = datetime(9999, 1, 1, tzinfo=UTC)

TableVersions = dict[str, tuple[tuple[str, int], ...]]
"""For each table that exists, its Delta tables (one per shard of a bronze table) and their versions."""

EXAMPLE_QUERIES: Final = {
    "top clients by a Kafka client metric": """
SELECT client_instance_id, client_id, principal, SUM(value_sum) AS connections_created
FROM telemetry.rollup_client_1h
WHERE metric_name = 'org.apache.kafka.producer.connection.creation.total'
  AND bucket_start >= TIMESTAMP '2026-11-21 00:00:00'
GROUP BY client_instance_id, client_id, principal
ORDER BY connections_created DESC
LIMIT 10
""",
    "slowest clients by request latency": """
SELECT client_instance_id, client_id, MAX(value_max) AS worst_ms,
       SUM(value_sum) / SUM(value_count) AS average_ms
FROM telemetry.rollup_client_1h
WHERE metric_name LIKE 'org.apache.kafka.%.node.request.latency.avg'
GROUP BY client_instance_id, client_id
ORDER BY average_ms DESC
LIMIT 10
""",
    "most throttled quota entities": """
SELECT quota_entity, `group` AS quota_type,
       MAX(value_max) AS worst_throttle_ms, SUM(value_sum) / SUM(samples) AS average_throttle_ms
FROM telemetry.rollup_entity_activity_1h
WHERE metric = 'throttle-time'
GROUP BY quota_entity, `group`
ORDER BY worst_throttle_ms DESC
LIMIT 10
""",
    "push errors by code": """
SELECT quota_entity, split(metric, '/')[0] AS rpc, CAST(split(metric, '/')[1] AS INT) AS error_code,
       SUM(value_sum) AS requests
FROM telemetry.rollup_entity_activity_1h
WHERE `group` = 'Requests' AND split(metric, '/')[1] <> '0'
GROUP BY quota_entity, rpc, error_code
ORDER BY requests DESC
""",
    "pushes and bytes by quota entity per hour": """
SELECT bucket_start, quota_entity,
       SUM(IF(metric = 'pushes', value_sum, 0)) AS pushes,
       SUM(IF(metric = 'payload_bytes', value_sum, 0)) AS payload_bytes
FROM telemetry.rollup_entity_activity_1h
WHERE `group` = 'telemetry_pushes'
GROUP BY bucket_start, quota_entity
ORDER BY bucket_start, quota_entity
""",
    "quarantined pushes and why": """
SELECT date, quota_entity, reason, COUNT(*) AS pushes
FROM telemetry.decode_quarantine
GROUP BY date, quota_entity, reason
ORDER BY pushes DESC
""",
}


def table_versions(lake: DeltaLake, data_root: str) -> TableVersions:
    """The version of every table (of every shard) that exists now (reads the Delta logs only)."""
    found: TableVersions = {}
    for name in (*SHARDED, *TABLES):
        uris = lake.shards(table_uri(data_root, name)) if name in SHARDED else [table_uri(data_root, name)]
        versions = tuple((uri, version) for uri in uris if (version := lake.version(uri)) is not None)
        if versions:
            found[name] = versions
    return found


def register_views(lake: DeltaLake, data_root: str, only: TableVersions | None = None) -> list[str]:
    """Make every existing table a view ``telemetry.<table>`` (only the tables of ``only``, at its
    versions, when given); the names made."""
    made = []
    frames: dict[str, DataFrame] = {}
    for name in SHARDED:
        if only is not None and name not in only:
            continue
        shards = (
            [lake.read(uri, version) for uri, version in only[name]]
            if only is not None
            else [lake.read(uri) for uri in lake.shards(table_uri(data_root, name))]
        )
        present = [frame for frame in shards if frame is not None]
        if present:
            frames[name] = functools.reduce(DataFrame.unionByName, present)
    for name in TABLES:
        if only is not None and name not in only:
            continue
        version = only[name][0][1] if only is not None else None
        frame = lake.read(table_uri(data_root, name), version)
        if frame is not None:
            frames[name] = frame
    for name, source in OPEN_HOURS.items():
        if only is not None and name not in only and source not in only:
            continue
        opened = _open_hours(lake, data_root, name, _version(only, name), _version(only, source))
        if opened is None:
            continue
        held = frames.get(name) if only is None or name in only else lake.read(table_uri(data_root, name))
        frames[name] = opened if held is None else held.unionByName(opened)
    for name, frame in frames.items():
        frame.createOrReplaceGlobalTempView(name)
        made.append(f"{NAMESPACE}.{name}")
    return made


def _version(only: TableVersions | None, name: str) -> int | None:
    """The version of ``name`` in ``only`` (its first shard's), or None for the latest."""
    return only[name][0][1] if only is not None and name in only else None


def _open_hours(
    lake: DeltaLake, data_root: str, table: str, version: int | None, source_version: int | None
) -> DataFrame | None:
    """The rows ``table`` (a 1-hour table, at ``version``) would hold for the hours after its newest,
    merged from the rows of its 1-minute source (at ``source_version``, from the files whose
    statistics may hold those hours); None when there is no source."""
    span = lake.span(table_uri(data_root, table), "bucket_start", version)
    start = None if span is None else span[1].replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    within = None if start is None else ("bucket_start", start, _FAR)
    minutes = lake.read(table_uri(data_root, OPEN_HOURS[table]), source_version, within=within)
    if minutes is None:
        return None
    if start is not None:
        minutes = minutes.where(F.col("bucket_start") >= F.lit(start))
    minutes = minutes.drop(PARTITION_OF["1m"])
    if table == ROLLUP_ENTITY_ACTIVITY_1H:
        return activity_rollup(minutes, "1h", from_samples=False)
    hours = client_rollup(minutes, "1h")
    return hours if table == ROLLUP_CLIENT_1H else entity_rollup(hours, "1h")
