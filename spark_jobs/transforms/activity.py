"""What each quota entity did per time bucket, besides its clients' metrics: pushes landed and their
bytes, pushes quarantined, the quota engine's sensors and the requests answered by error code.

Rows of ``rollup_entity_activity_1m`` / ``_1h``, one per (bucket, quota entity, group, metric):

- ``telemetry_pushes`` / ``pushes``, ``payload_bytes``, ``terminating``: from bronze
  ``telemetry_pushes``, a sample per landed push (1, its bytes, 1 if its client was closing);
- ``decode_quarantine`` / ``pushes``: a sample per push that did not decode (1);
- a quota type (``Produce``, ``Request``, ...) / a sensor (``byte-rate``, ``throttle-time``,
  ``request-time``, ...): from bronze ``quota_samples``, a sample per snapshot of the sensor;
- ``Requests`` / ``<rpc>/<Kafka error code>``: from ``quota_samples``, the answers since the
  previous snapshot.

Measures: ``samples``, ``value_sum`` (pushes, bytes and answers add up; a sensor's average is
``value_sum / samples``), ``value_min``, ``value_max``, ``value_last`` (at ``last_time``).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

from spark_jobs.tables import BRONZE_PUSHES, QUARANTINE
from spark_jobs.transforms.rollup import PARTITION_OF, Width, bucket, partition

__all__ = ["activity_rollup", "activity_schema", "push_activity", "quarantine_activity", "sample_activity"]

_TS: Final = pa.timestamp("us", tz="UTC")
_KEYS: Final = ("quota_entity", "group", "metric")


def activity_schema(width: Width) -> pa.Schema:
    return pa.schema(
        [
            pa.field("bucket_start", _TS, nullable=False),
            pa.field("quota_entity", pa.string(), nullable=False),
            pa.field("group", pa.string(), nullable=False),
            pa.field("metric", pa.string(), nullable=False),
            pa.field("samples", pa.int64(), nullable=False),
            pa.field("value_sum", pa.float64()),
            pa.field("value_min", pa.float64()),
            pa.field("value_max", pa.float64()),
            pa.field("value_last", pa.float64()),
            pa.field("last_time", _TS),
            pa.field(PARTITION_OF[width], pa.string(), nullable=False),
        ]
    )


def _samples(frame: DataFrame, time: Column, group: str, metrics: dict[str, Column]) -> DataFrame:
    """One sample row per (row, metric): ``time, quota_entity, group, metric, value``."""
    pairs = F.explode(F.map_from_arrays(F.array(*map(F.lit, metrics)), F.array(*metrics.values())))
    return frame.select(
        time.alias("time"), "quota_entity", F.lit(group).alias("group"), pairs.alias("metric", "value")
    )


def push_activity(pushes: DataFrame) -> DataFrame:
    """Bronze push rows -> samples."""
    return _samples(
        pushes,
        F.col("received_at"),
        BRONZE_PUSHES,
        {
            "pushes": F.lit(1.0),
            "payload_bytes": F.col("payload_bytes").cast("double"),
            "terminating": F.col("terminating").cast("double"),
        },
    )


def quarantine_activity(quarantined: DataFrame) -> DataFrame:
    return _samples(quarantined, F.col("received_at"), QUARANTINE, {"pushes": F.lit(1.0)})


def sample_activity(samples: DataFrame) -> DataFrame:
    """Bronze ``quota_samples`` rows -> samples (their ``entity`` is the quota entity)."""
    return samples.select(
        F.col("sampled_at").alias("time"),
        F.col("entity").alias("quota_entity"),
        "group",
        "metric",
        F.col("value").cast("double").alias("value"),
    )


def activity_rollup(rows: DataFrame, width: Width, *, from_samples: bool) -> DataFrame:
    """Samples (``from_samples``) or activity rows of a smaller width -> activity rows of ``width``."""
    if from_samples:
        rows = rows.select(
            "quota_entity",
            "group",
            "metric",
            F.col("time").alias("bucket_start"),
            F.lit(1).cast("long").alias("samples"),
            F.col("value").alias("value_sum"),
            F.col("value").alias("value_min"),
            F.col("value").alias("value_max"),
            F.col("value").alias("value_last"),
            F.col("time").alias("last_time"),
        )
    order = F.struct("last_time", "value_last")
    merged = (
        rows.withColumn("bucket_start", bucket("bucket_start", width))
        .groupBy("bucket_start", *_KEYS)
        .agg(
            F.sum("samples").alias("samples"),
            F.sum("value_sum").alias("value_sum"),
            F.min("value_min").alias("value_min"),
            F.max("value_max").alias("value_max"),
            F.max_by("value_last", order).alias("value_last"),
            F.max("last_time").alias("last_time"),
        )
    )
    merged = merged.withColumn(PARTITION_OF[width], partition(width))
    return merged.select(*activity_schema(width).names)
