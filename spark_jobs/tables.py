"""The tables of the Spark side: where each lives under the data root, and the schemas of those the
jobs write (silver ``metric_points``, ``decode_quarantine``; the gold rollups are in
``spark_jobs.transforms.rollup``), and the names of every table the Spark side reads or writes. The
bronze tables and the config log are the front end's (``exporters.delta.schema`` defines their names
and schemas, imported here); the Spark side names their columns again, and a test keeps the two in
step.

``metric_points`` (silver, partitioned by ``date``, the UTC date of the point's ``time``): one row per
OTLP data point.

| column | type | meaning |
|---|---|---|
| push_id | string | the bronze push the point came from |
| client_instance_id | string | the client instance id as Kafka writes it (bronze's, an opaque string) |
| received_at | timestamp | when the sink accepted the push |
| principal, client_id | string | who pushed |
| client_software_name / _version | string | the client's software |
| quota_entity | string | the quota entity the push counted against (``client-id=c1,user=alice``) |
| resource_attributes | map<string,string> | the resource's attributes |
| scope_name / scope_version | string | the instrumentation scope |
| metric_name / metric_unit / metric_description | string | the metric |
| metric_kind | string | ``sum``, ``gauge``, ``histogram``, ``exponential_histogram``, ``summary`` |
| temporality | string | ``delta``, ``cumulative`` (sums and histograms), else null |
| is_monotonic | bool | sums only |
| attributes | map<string,string> | the point's attributes |
| attributes_key | string | the attributes as canonical JSON (sorted keys): a groupable series key |
| start_time / time | timestamp | the point's start (null when 0) and end time |
| date | string | partition: ``YYYY-MM-DD`` of ``time`` |
| value | double | sum and gauge points (integers widened) |
| count / sum / min / max | bigint / double | histograms, exponential histograms, summaries (when sent) |
| explicit_bounds / bucket_counts | array<double> / array<bigint> | histograms |
| scale, zero_count, zero_threshold | int, bigint, double | exponential histograms |
| positive_offset / positive_bucket_counts | int / array<bigint> | exponential histograms |
| negative_offset / negative_bucket_counts | int / array<bigint> | exponential histograms |
| quantiles | array<struct<quantile double, value double>> | summaries |
| flags | int | OTLP data point flags (1: no recorded value) |

Attribute values are written as strings: strings as they are, booleans ``true``/``false``, integers in
decimal, doubles as Python's ``repr``, bytes in base64, arrays and key-value lists as JSON.

``decode_quarantine`` (partitioned by ``date`` of ``received_at``): one row per bronze push that did
not decode, with the reason, the payload and where it came from; the decode job goes on without it.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

# The bronze tables and the config log are written by the front end and its exporters; the Spark side
# may import ``exporters`` (not ``ingest``), so their names are defined there, once.
from exporters.delta.schema import CONFIG_LOG_TABLE, QUOTA_SAMPLES_TABLE, TELEMETRY_PUSHES_TABLE

__all__ = [
    "ACTIVITY_TABLES",
    "BRONZE_PUSHES",
    "BRONZE_QUOTA_SAMPLES",
    "CONFIG_LOG",
    "METRIC_POINTS",
    "METRIC_POINTS_SCHEMA",
    "QUARANTINE",
    "QUARANTINE_SCHEMA",
    "ROLLUP_CLIENT_1H",
    "ROLLUP_CLIENT_1M",
    "ROLLUP_ENTITY_1H",
    "ROLLUP_ENTITY_1M",
    "ROLLUP_ENTITY_ACTIVITY_1H",
    "ROLLUP_ENTITY_ACTIVITY_1M",
    "ROLLUP_TABLES",
    "table_uri",
]

BRONZE_PUSHES: Final = TELEMETRY_PUSHES_TABLE
"""Sharded: one Delta table per sink replica, ``<root>/telemetry_pushes/<replica>``."""
BRONZE_QUOTA_SAMPLES: Final = QUOTA_SAMPLES_TABLE
"""Sharded like ``telemetry_pushes``."""
CONFIG_LOG: Final = CONFIG_LOG_TABLE
"""The admin API's subscription and quota changes, written by the front end; the Spark side only
reads it (the dashboard's config history)."""
METRIC_POINTS: Final = "metric_points"
QUARANTINE: Final = "decode_quarantine"

ROLLUP_CLIENT_1M: Final = "rollup_client_1m"
ROLLUP_CLIENT_1H: Final = "rollup_client_1h"
ROLLUP_ENTITY_1M: Final = "rollup_entity_1m"
ROLLUP_ENTITY_1H: Final = "rollup_entity_1h"
ROLLUP_ENTITY_ACTIVITY_1M: Final = "rollup_entity_activity_1m"
ROLLUP_ENTITY_ACTIVITY_1H: Final = "rollup_entity_activity_1h"
ROLLUP_TABLES: Final = (ROLLUP_CLIENT_1M, ROLLUP_CLIENT_1H, ROLLUP_ENTITY_1M, ROLLUP_ENTITY_1H)
"""The gold metric rollups (``spark_jobs.jobs.rollup`` documents what each holds)."""
ACTIVITY_TABLES: Final = (ROLLUP_ENTITY_ACTIVITY_1M, ROLLUP_ENTITY_ACTIVITY_1H)
"""The gold activity rollups (pushes, quota samples and quarantined pushes by quota entity)."""
DERIVED_TABLES: Final = (METRIC_POINTS, QUARANTINE, *ROLLUP_TABLES, *ACTIVITY_TABLES)
"""Every table the Spark jobs write (silver, the quarantine, the gold tables)."""

_TS: Final = pa.timestamp("us", tz="UTC")
_MAP: Final = pa.map_(pa.string(), pa.string())

METRIC_POINTS_SCHEMA: Final = pa.schema(
    [
        pa.field("push_id", pa.string(), nullable=False),
        pa.field("client_instance_id", pa.string(), nullable=False),
        pa.field("received_at", _TS, nullable=False),
        pa.field("principal", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("client_software_name", pa.string()),
        pa.field("client_software_version", pa.string()),
        pa.field("quota_entity", pa.string()),
        pa.field("resource_attributes", _MAP),
        pa.field("scope_name", pa.string()),
        pa.field("scope_version", pa.string()),
        pa.field("metric_name", pa.string(), nullable=False),
        pa.field("metric_unit", pa.string()),
        pa.field("metric_description", pa.string()),
        pa.field("metric_kind", pa.string(), nullable=False),
        pa.field("temporality", pa.string()),
        pa.field("is_monotonic", pa.bool_()),
        pa.field("attributes", _MAP),
        pa.field("attributes_key", pa.string(), nullable=False),
        pa.field("start_time", _TS),
        pa.field("time", _TS, nullable=False),
        pa.field("date", pa.string(), nullable=False),
        pa.field("value", pa.float64()),
        pa.field("count", pa.int64()),
        pa.field("sum", pa.float64()),
        pa.field("min", pa.float64()),
        pa.field("max", pa.float64()),
        pa.field("explicit_bounds", pa.list_(pa.float64())),
        pa.field("bucket_counts", pa.list_(pa.int64())),
        pa.field("scale", pa.int32()),
        pa.field("zero_count", pa.int64()),
        pa.field("zero_threshold", pa.float64()),
        pa.field("positive_offset", pa.int32()),
        pa.field("positive_bucket_counts", pa.list_(pa.int64())),
        pa.field("negative_offset", pa.int32()),
        pa.field("negative_bucket_counts", pa.list_(pa.int64())),
        pa.field(
            "quantiles",
            pa.list_(pa.struct([pa.field("quantile", pa.float64()), pa.field("value", pa.float64())])),
        ),
        pa.field("flags", pa.int32()),
    ]
)

QUARANTINE_SCHEMA: Final = pa.schema(
    [
        pa.field("push_id", pa.string(), nullable=False),
        pa.field("date", pa.string(), nullable=False),
        pa.field("received_at", _TS, nullable=False),
        pa.field("client_instance_id", pa.string(), nullable=False),
        pa.field("principal", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("quota_entity", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("payload", pa.binary()),
    ]
)


def table_uri(data_root: str, table: str) -> str:
    """``<data root>/<table>`` (the root may be a local path or an object-store URI)."""
    return f"{data_root.rstrip('/')}/{table}"
