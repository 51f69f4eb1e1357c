"""Rollups: silver ``metric_points`` -> gold rows per time bucket, by client instance and by quota entity.

Pure DataFrame transforms (no I/O). Every gold row holds the same measures, so one ``merge`` rolls
points into 1-minute rows, 1-minute rows into 1-hour rows, and client rows into quota-entity rows:

| measure | sums | gauges | histograms | exponential histograms | summaries |
|---|---|---|---|---|---|
| ``value_sum`` | the increase (delta sums add; cumulative sums become deltas) | sum of the values | | | |
| ``value_count`` | values in ``value_sum`` | values in ``value_sum`` (avg = sum / count) | | | |
| ``value_min`` / ``value_max`` | | smallest / largest value | | | |
| ``value_last`` | last cumulative value | last value | | | |
| ``count`` / ``sum`` | | | increase of count and sum | same | same |
| ``min`` / ``max`` | | | of delta points (as sent) | same | |
| ``bucket_counts`` | | | added bucket by bucket (rows are per ``explicit_bounds``) | | |
| ``scale``, ``zero_count``, ``positive_*``, ``negative_*`` | | | | merged at the smallest scale | |
| ``quantiles`` | | | | | the last ones sent |

Cumulative points become deltas per series (client instance, metric, kind, attributes), in time
order. A point's delta is its increase over the previous point of its series when that point is at
most ``lookback_s`` older and the series did not restart (a different ``start_time``, or a lower value
or count for a monotonic series), and the whole value after a restart. A point with no previous point
within ``lookback_s`` counts whole if its series started (``start_time``) within ``lookback_s`` before
it, else its increase is unknown: it is counted in ``unknown_deltas`` and left out. The rule looks
only at the ``lookback_s`` before a point, so recomputing any bucket gives the same numbers. Exponential
histograms subtract only when the previous point has the same scale and offsets (else unknown).
``points`` counts data points; ``first_time``/``last_time`` bound them. "Last" and "latest" order by
time, ties between series broken by client instance and then ``attributes_key``. A NaN value (what
Kafka's Java client reports as the average of no samples) orders as Spark SQL orders it, above every
number: a ``value_min`` is NaN only when every value was, a ``value_max`` whenever one was; a sum
with a NaN in it is NaN.

Sums and gauges (``NUMBER_KINDS``, all a librdkafka fleet sends) and the other kinds are rolled up on
two paths and united (``client_minutes``, ``client_rollup``, ``entity_rollup``): number rows, whose
histogram measures are null, need only three lags and plain aggregates (``numbers_only``); the
others go through the exponential-bucket window and the bucket-by-bucket sums. Both paths give the
same rows as one general path would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Final, Literal

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

__all__ = [
    "CLIENT_KEYS",
    "DEFAULT_LOOKBACK_S",
    "ENTITY_KEYS",
    "MINUTE_PATTERN",
    "NUMBER_KINDS",
    "PARTITION_OF",
    "PARTITION_PATTERN",
    "SERIES",
    "Width",
    "bucket",
    "client_minutes",
    "client_rollup",
    "entity_rollup",
    "following_minutes",
    "normalize",
    "partition",
    "rollup_schema",
    "unseeded",
]

DEFAULT_LOOKBACK_S: Final = 3600
Width = Literal["1m", "1h"]
_UNIT: Final = {"1m": "minute", "1h": "hour"}
PARTITION_PATTERN: Final = {"1m": "yyyy-MM-dd'T'HH", "1h": "yyyy-MM-dd"}
"""How a bucket is written in its table's partition column (Spark datetime patterns)."""
PARTITION_OF: Final = {"1m": "bucket_hour", "1h": "bucket_date"}
MINUTE_PATTERN: Final = "yyyy-MM-dd'T'HH:mm"
"""A minute's key (Spark datetime pattern), as ``client_minutes`` takes them."""

SERIES: Final = ("client_instance_id", "metric_name", "metric_kind", "attributes_key")
CLIENT_KEYS: Final = (*SERIES, "explicit_bounds")
"""A client row: one series (and one set of histogram bounds) in one bucket."""
ENTITY_KEYS: Final = ("quota_entity", "metric_name", "metric_kind", "explicit_bounds")
CLIENT_LATEST: Final = (
    "principal",
    "client_id",
    "client_software_name",
    "client_software_version",
    "quota_entity",
    "metric_unit",
    "temporality",
    "is_monotonic",
    "attributes",
)
"""Descriptive columns of a client row: their latest values in the bucket."""
ENTITY_LATEST: Final = ("metric_unit",)

_TS: Final = pa.timestamp("us", tz="UTC")
_LONGS: Final = pa.list_(pa.int64())
_MEASURES: Final = [
    pa.field("points", pa.int64(), nullable=False),
    pa.field("first_time", _TS),
    pa.field("last_time", _TS),
    pa.field("value_sum", pa.float64()),
    pa.field("value_count", pa.int64()),
    pa.field("value_min", pa.float64()),
    pa.field("value_max", pa.float64()),
    pa.field("value_last", pa.float64()),
    pa.field("unknown_deltas", pa.int64()),
    pa.field("count", pa.int64()),
    pa.field("sum", pa.float64()),
    pa.field("min", pa.float64()),
    pa.field("max", pa.float64()),
    pa.field("bucket_counts", _LONGS),
    pa.field("scale", pa.int32()),
    pa.field("zero_count", pa.int64()),
    pa.field("positive_offset", pa.int32()),
    pa.field("positive_bucket_counts", _LONGS),
    pa.field("negative_offset", pa.int32()),
    pa.field("negative_bucket_counts", _LONGS),
    pa.field(
        "quantiles",
        pa.list_(pa.struct([pa.field("quantile", pa.float64()), pa.field("value", pa.float64())])),
    ),
]
_PREVIOUS: Final = (
    "time",
    "start_time",
    "value",
    "count",
    "sum",
    "explicit_bounds",
    "bucket_counts",
    "scale",
    "positive_offset",
    "negative_offset",
    "positive_bucket_counts",
    "negative_bucket_counts",
    "zero_count",
)
"""Columns of a series' previous point, for cumulative deltas."""
NUMBER_KINDS: Final = ("sum", "gauge")
"""The metric kinds whose rows are rolled up with plain aggregates (``merge``'s ``numbers_only``)."""
HISTOGRAM_MEASURES: Final = (
    "count",
    "sum",
    "min",
    "max",
    "bucket_counts",
    "scale",
    "zero_count",
    "positive_offset",
    "positive_bucket_counts",
    "negative_offset",
    "negative_bucket_counts",
    "quantiles",
)
"""The measures only histograms and summaries have (null on a sum or gauge row)."""
_SPARK_TYPES: Final = {
    "explicit_bounds": "array<double>",
    "count": "bigint",
    "sum": "double",
    "min": "double",
    "max": "double",
    "bucket_counts": "array<bigint>",
    "scale": "int",
    "zero_count": "bigint",
    "positive_offset": "int",
    "positive_bucket_counts": "array<bigint>",
    "negative_offset": "int",
    "negative_bucket_counts": "array<bigint>",
    "quantiles": "array<struct<quantile:double,value:double>>",
}
_SUMMED: Final = ("points", "value_sum", "value_count", "unknown_deltas", "count", "sum", "zero_count")
_CLIENT_FIELDS: Final = [
    pa.field("client_instance_id", pa.string(), nullable=False),
    pa.field("principal", pa.string()),
    pa.field("client_id", pa.string()),
    pa.field("client_software_name", pa.string()),
    pa.field("client_software_version", pa.string()),
    pa.field("quota_entity", pa.string()),
    pa.field("metric_name", pa.string(), nullable=False),
    pa.field("metric_kind", pa.string(), nullable=False),
    pa.field("metric_unit", pa.string()),
    pa.field("temporality", pa.string()),
    pa.field("is_monotonic", pa.bool_()),
    pa.field("attributes", pa.map_(pa.string(), pa.string())),
    pa.field("attributes_key", pa.string(), nullable=False),
    pa.field("explicit_bounds", pa.list_(pa.float64())),
]
_ENTITY_FIELDS: Final = [
    pa.field("quota_entity", pa.string(), nullable=False),
    pa.field("metric_name", pa.string(), nullable=False),
    pa.field("metric_kind", pa.string(), nullable=False),
    pa.field("metric_unit", pa.string()),
    pa.field("explicit_bounds", pa.list_(pa.float64())),
    pa.field("clients", pa.int64(), nullable=False),
]


def rollup_schema(by: Literal["client", "entity"], width: Width) -> pa.Schema:
    """The gold table's schema: bucket, keys, measures, and the partition column (``bucket_hour``
    ``YYYY-MM-DDTHH`` for 1-minute rows, ``bucket_date`` ``YYYY-MM-DD`` for 1-hour rows)."""
    keys = _CLIENT_FIELDS if by == "client" else _ENTITY_FIELDS
    return pa.schema(
        [
            pa.field("bucket_start", _TS, nullable=False),
            *keys,
            *_MEASURES,
            pa.field(PARTITION_OF[width], pa.string(), nullable=False),
        ]
    )


# -- points -> one-point rows -----------------------------------------------------------------------


def normalize(
    points: DataFrame, lookback_s: int = DEFAULT_LOOKBACK_S, *, numbers_only: bool = False
) -> DataFrame:
    """Silver points -> rows in the measures' shape, one per point, cumulative points as deltas.

    ``points`` should reach ``lookback_s`` before the first bucket wanted: earlier points are only the
    previous points of later ones (filter them out after). ``numbers_only``: ``points`` are sums and
    gauges only (``NUMBER_KINDS``), so the window carries only what their deltas read (same rows, with
    the histogram measures null, as they are for such points anyway)."""
    if numbers_only:
        return _normalize_numbers(points, lookback_s, None)
    series = Window.partitionBy(*SERIES).orderBy("time")
    kind = F.col("metric_kind")
    cumulative = (F.col("temporality") == "cumulative") | (kind == "summary")
    prev = {name: F.lag(name).over(series) for name in _PREVIOUS}
    within = F.col("time") - F.expr(f"INTERVAL {int(lookback_s)} SECONDS")
    has_prev = prev["time"].isNotNull() & (prev["time"] >= within)
    started_within = F.col("start_time").isNotNull() & (F.col("start_time") >= within)
    restarted = (
        F.col("start_time").isNotNull()
        & prev["start_time"].isNotNull()
        & (F.col("start_time") != prev["start_time"])
    )
    count_drop = F.col("count") < prev["count"]
    hist_reset = restarted | count_drop
    same_layout = (
        (F.col("scale") == prev["scale"])
        & (F.col("positive_offset") == prev["positive_offset"])
        & (F.col("negative_offset") == prev["negative_offset"])
        & (F.size("positive_bucket_counts") == F.size(prev["positive_bucket_counts"]))
        & (F.size("negative_bucket_counts") == F.size(prev["negative_bucket_counts"]))
    )
    bounds_changed = ~F.coalesce(F.col("explicit_bounds") == prev["explicit_bounds"], F.lit(True))
    whole = (has_prev & (hist_reset | bounds_changed)) | (~has_prev & started_within)
    sum_delta, _ = _sum_delta(lookback_s)
    exp_ok = kind != "exponential_histogram"
    hist_increase = has_prev & ~hist_reset & ~bounds_changed & (exp_ok | same_layout)
    hist_known = ~cumulative | whole | hist_increase

    def hist(column: str) -> Column:
        return F.when(~cumulative | whole, F.col(column)).when(hist_increase, F.col(column) - prev[column])

    def hist_array(column: str) -> Column:
        increase = F.zip_with(column, prev[column], lambda a, b: a - b)
        return F.when(~cumulative | whole, F.col(column)).when(hist_increase, increase)

    is_sum = kind == "sum"
    is_exp = kind == "exponential_histogram"
    has_counts = kind.isin("histogram", "exponential_histogram", "summary")
    known = F.when(is_sum, sum_delta.isNotNull()).when(has_counts, hist_known).otherwise(F.lit(True))
    return points.select(
        *(F.col(c) for c in ("time", *SERIES, *CLIENT_LATEST, "explicit_bounds")),
        *_point_measures(sum_delta, cumulative, known),
        F.when(has_counts, hist("count")).alias("count"),
        F.when(has_counts, hist("sum")).alias("sum"),
        F.when(~cumulative, F.col("min")).alias("min"),
        F.when(~cumulative, F.col("max")).alias("max"),
        F.when(kind == "histogram", hist_array("bucket_counts")).alias("bucket_counts"),
        F.when(is_exp & hist_known, F.col("scale")).alias("scale"),
        F.when(is_exp, hist("zero_count")).alias("zero_count"),
        F.when(is_exp & hist_known, F.col("positive_offset")).alias("positive_offset"),
        F.when(is_exp, hist_array("positive_bucket_counts")).alias("positive_bucket_counts"),
        F.when(is_exp & hist_known, F.col("negative_offset")).alias("negative_offset"),
        F.when(is_exp, hist_array("negative_bucket_counts")).alias("negative_bucket_counts"),
        F.when(kind == "summary", F.col("quantiles")).alias("quantiles"),
    )


def _sum_delta(lookback_s: int, order: Sequence[str] = ("time",)) -> tuple[Column, Column]:
    """(a sum point's value as counted, whether it is cumulative): the delta rule of the module
    docstring, over the window of its series in time ``order``; shared by both paths so they count
    alike. Which cumulative points count whole: a restart, or a fresh series; the others as an
    increase."""
    series = Window.partitionBy(*SERIES).orderBy(*order)
    cumulative = F.col("temporality") == "cumulative"
    prev_time, prev_start, prev_value = (F.lag(c).over(series) for c in ("time", "start_time", "value"))
    within = F.col("time") - F.expr(f"INTERVAL {int(lookback_s)} SECONDS")
    has_prev = prev_time.isNotNull() & (prev_time >= within)
    started_within = F.col("start_time").isNotNull() & (F.col("start_time") >= within)
    restarted = F.col("start_time").isNotNull() & prev_start.isNotNull() & (F.col("start_time") != prev_start)
    monotonic_drop = F.coalesce(F.col("is_monotonic"), F.lit(False)) & (F.col("value") < prev_value)
    whole = (has_prev & (restarted | monotonic_drop)) | (~has_prev & started_within)
    delta = (
        F.when(~cumulative, F.col("value"))
        .when(whole, F.col("value"))
        .when(has_prev, F.col("value") - prev_value)
    )
    return delta, cumulative


def _point_measures(sum_delta: Column, cumulative: Column, known: Column) -> list[Column]:
    """The measures every one-point row has, both paths alike: the point itself, and a sum's or a
    gauge's value (``sum_delta``: a sum point as counted; ``known``: whether its increase is)."""
    kind = F.col("metric_kind")
    is_sum, is_gauge = kind == "sum", kind == "gauge"
    return [
        F.lit(1).cast("long").alias("points"),
        F.col("time").alias("first_time"),
        F.col("time").alias("last_time"),
        F.when(is_sum, sum_delta).when(is_gauge, F.col("value")).alias("value_sum"),
        F.when(is_sum & sum_delta.isNotNull(), 1)
        .when(is_gauge & F.col("value").isNotNull(), 1)
        .otherwise(0)
        .cast("long")
        .alias("value_count"),
        F.when(is_gauge, F.col("value")).alias("value_min"),
        F.when(is_gauge, F.col("value")).alias("value_max"),
        F.when(is_gauge | (is_sum & cumulative), F.col("value")).alias("value_last"),
        F.when(known, 0).otherwise(1).cast("long").alias("unknown_deltas"),
    ]


def _normalize_numbers(points: DataFrame, lookback_s: int, width: Width | None) -> DataFrame:
    """``normalize`` for sums and gauges: three lags instead of thirteen. With a ``width``, the rows
    also carry their ``bucket_start``, computed before the window, which orders each series by it
    and then by time (the same order), so that ``_merge_numbers`` needs no sort of its own."""
    order: tuple[str, ...] = ("time",)
    carried: tuple[str, ...] = ()
    if width is not None:
        points = points.withColumn("bucket_start", bucket("time", width))
        order = carried = ("bucket_start", "time")
    is_sum = F.col("metric_kind") == "sum"
    sum_delta, cumulative = _sum_delta(lookback_s, order)
    known = F.when(is_sum, sum_delta.isNotNull()).otherwise(F.lit(True))
    nulls = [F.lit(None).cast(_SPARK_TYPES[c]).alias(c) for c in HISTOGRAM_MEASURES]
    return points.select(
        *(F.col(c) for c in dict.fromkeys((*carried, "time", *SERIES, *CLIENT_LATEST, "explicit_bounds"))),
        *_point_measures(sum_delta, cumulative, known),
        *nulls,
    )


# -- rows -> merged rows ----------------------------------------------------------------------------


def bucket(time_column: str, width: Width) -> Column:
    """The start of the bucket of ``width`` holding each row's ``time_column``."""
    return F.date_trunc(_UNIT[width], F.col(time_column))


def partition(width: Width) -> Column:
    """The partition column of a table of ``width`` buckets, from ``bucket_start``."""
    pattern = PARTITION_PATTERN[width]
    return F.date_format("bucket_start", pattern).alias(PARTITION_OF[width])


def _element_sum(column: str) -> Column:
    """Bucket-by-bucket sum of the group's arrays (all the same length: rows are per bounds)."""
    arrays = F.filter(F.collect_list(column), lambda a: a.isNotNull())
    first = F.element_at(arrays, 1)
    return F.when(
        F.size(arrays) > 0,
        F.aggregate(
            arrays,
            F.array_repeat(F.lit(0).cast("long"), F.size(first)),
            lambda acc, a: F.zip_with(acc, a, lambda x, y: x + y),
        ),
    )


def _floor_shift(index: Column, shift: Column) -> Column:
    """``index >> shift`` (floor division by ``2 ** shift``, right for negative indexes too)."""
    return F.floor(index / F.pow(F.lit(2.0), shift)).cast("int")


def _downscaled(offset: str, counts: str, shift: Column) -> tuple[Column, Column]:
    """(offset, counts) of exponential buckets at ``shift`` scales lower: index ``i`` -> ``i >> shift``."""
    n = F.size(counts)
    new_offset = _floor_shift(F.col(offset), shift)
    last = _floor_shift(F.col(offset) + n - 1, shift)

    def bucket(k: Column) -> Column:
        return F.aggregate(
            F.sequence(F.lit(0), n - 1),
            F.lit(0).cast("long"),
            lambda acc, i: (
                acc + F.when(_floor_shift(F.col(offset) + i, shift) == k, F.col(counts)[i]).otherwise(0)
            ),
        )

    new_counts = F.when(n > 0, F.transform(F.sequence(new_offset, last), bucket))
    return new_offset, new_counts.otherwise(F.array().cast("array<bigint>"))


def _combined(offset: str, counts: str) -> tuple[Column, Column]:
    """Aggregate: (offset, counts) adding up the group's (already common-scale) buckets."""
    entries = F.filter(
        F.collect_list(F.struct(F.col(offset).alias("o"), F.col(counts).alias("c"))),
        lambda e: F.size(e["c"]) > 0,
    )
    low = F.array_min(F.transform(entries, lambda e: e["o"]))
    high = F.array_max(F.transform(entries, lambda e: e["o"] + F.size(e["c"]) - 1))
    summed = F.transform(
        F.sequence(low, high),
        lambda k: F.aggregate(
            entries,
            F.lit(0).cast("long"),
            lambda acc, e: (
                acc + F.when((k >= e["o"]) & (k < e["o"] + F.size(e["c"])), e["c"][k - e["o"]]).otherwise(0)
            ),
        ),
    )
    empty = F.array().cast("array<bigint>")
    return F.when(F.size(entries) > 0, low).otherwise(0), F.when(F.size(entries) > 0, summed).otherwise(empty)


def merge(
    rows: DataFrame,
    keys: Sequence[str],
    latest: Sequence[str],
    width: Width,
    *,
    time_column: str = "bucket_start",
    extra: Sequence[Column] = (),
    numbers_only: bool = False,
) -> DataFrame:
    """Rows in the measures' shape -> one row per (bucket of ``width``, ``keys``); ``latest``
    columns take their value from the group's last row, ``extra`` aggregates are added.
    ``numbers_only``: every row is a sum or a gauge, whose histogram measures are null, so plain
    aggregates do (no exponential-bucket window, no ``collect_list``); the rows come out the same."""
    if numbers_only:
        return _merge_numbers(rows, keys, latest, width, time_column=time_column, extra=extra)
    rows = rows.withColumn("bucket_start", bucket(time_column, width))
    group = ["bucket_start", *keys]
    # exponential buckets: bring every row of a group to the group's smallest scale first
    exp = F.col("metric_kind") == "exponential_histogram"
    target = F.min("scale").over(Window.partitionBy(*group))
    rows = rows.withColumn("_shift", F.when(exp, F.col("scale") - target))
    for side in ("positive", "negative"):  # (new names: an aggregate may not read an output's name)
        offset, counts = _downscaled(f"{side}_offset", f"{side}_bucket_counts", F.col("_shift"))
        rows = rows.withColumn(f"_{side}_offset", F.when(exp, offset)).withColumn(
            f"_{side}_counts", F.when(exp, counts)
        )
    rows = rows.withColumn("_scale", F.when(exp, target))
    positive_offset, positive_counts = _combined("_positive_offset", "_positive_counts")
    negative_offset, negative_counts = _combined("_negative_offset", "_negative_counts")
    is_exp = F.max(exp.cast("int")) == 1
    # "latest": by time, ties between series broken by client instance and attributes
    order = F.struct("last_time", "client_instance_id", "attributes_key")
    merged = rows.groupBy(*group).agg(
        *(F.max_by(F.col(c), order).alias(c) for c in latest),
        *(F.sum(c).alias(c) for c in _SUMMED if c not in ("value_sum", "sum")),
        F.sum("value_sum").alias("value_sum"),
        F.sum("sum").alias("sum"),
        F.min("first_time").alias("first_time"),
        F.max("last_time").alias("last_time"),
        F.min("value_min").alias("value_min"),
        F.max("value_max").alias("value_max"),
        F.max_by("value_last", order).alias("value_last"),
        F.min("min").alias("min"),
        F.max("max").alias("max"),
        _element_sum("bucket_counts").alias("bucket_counts"),
        F.min("_scale").alias("scale"),
        F.when(is_exp, positive_offset).alias("positive_offset"),
        F.when(is_exp, positive_counts).alias("positive_bucket_counts"),
        F.when(is_exp, negative_offset).alias("negative_offset"),
        F.when(is_exp, negative_counts).alias("negative_bucket_counts"),
        F.max_by("quantiles", F.when(F.col("quantiles").isNotNull(), order)).alias("quantiles"),
        *extra,
    )
    return merged.withColumn(PARTITION_OF[width], partition(width))


def _merge_numbers(
    rows: DataFrame,
    keys: Sequence[str],
    latest: Sequence[str],
    width: Width,
    *,
    time_column: str | None,
    extra: Sequence[Column],
) -> DataFrame:
    if time_column is not None:  # None: the rows carry their bucket already (``_normalize_numbers``)
        rows = rows.withColumn("bucket_start", bucket(time_column, width))
    # within one series the tie-breakers of "latest" are the same on every row: time alone orders
    series_rows = {"client_instance_id", "attributes_key"} <= set(keys)
    order = (
        F.col("last_time") if series_rows else F.struct("last_time", "client_instance_id", "attributes_key")
    )
    # a number row has no bounds: grouping by the others, series first and bucket last, reuses the
    # order of the window that normalized them (no sort)
    group = [*(k for k in keys if k != "explicit_bounds"), "bucket_start"]
    merged = rows.groupBy(*group).agg(
        *(F.max_by(F.col(c), order).alias(c) for c in latest),
        *(F.sum(c).alias(c) for c in ("points", "value_sum", "value_count", "unknown_deltas")),
        F.min("first_time").alias("first_time"),
        F.max("last_time").alias("last_time"),
        F.min("value_min").alias("value_min"),
        F.max("value_max").alias("value_max"),
        F.max_by("value_last", order).alias("value_last"),
        *extra,
    )
    nulls = [F.lit(None).cast(_SPARK_TYPES[c]).alias(c) for c in ("explicit_bounds", *HISTOGRAM_MEASURES)]
    return merged.select("*", *nulls).withColumn(PARTITION_OF[width], partition(width))


def _by_kind(
    rows: DataFrame,
    rolled: Callable[[DataFrame, bool], DataFrame],
    names: Sequence[str],
    numbers_only: bool = False,
) -> DataFrame:
    """``rolled`` over the sums and gauges (numbers only) and over the other rows, united: a
    librdkafka fleet sends only numbers, which then never meet the histogram machinery.
    ``numbers_only``: the caller knows ``rows`` hold nothing else (no plan for the others at all)."""
    is_number = F.col("metric_kind").isin(*NUMBER_KINDS)
    numbers = rolled(rows.where(is_number), True).select(*names)
    if numbers_only:
        return numbers
    others = rolled(rows.where(~is_number), False).select(*names)
    return numbers.unionByName(others)


def client_rollup(
    rows: DataFrame, width: Width, time_column: str = "bucket_start", *, numbers_only: bool = False
) -> DataFrame:
    """Normalized points (``time_column="time"``) or client rows of a smaller width -> client rows.
    ``numbers_only``: ``rows`` are sums and gauges only (no plan for the other path)."""
    return _by_kind(
        rows,
        lambda part, numbers: merge(
            part, CLIENT_KEYS, CLIENT_LATEST, width, time_column=time_column, numbers_only=numbers
        ),
        rollup_schema("client", width).names,
        numbers_only,
    )


def _with_previous(points: DataFrame, keep: Column, run: Column) -> DataFrame:
    """The points ``keep`` selects, and the previous point of each of their series that their deltas
    start from. ``run``: for a point not kept, the next run of kept time after it (any value that tells
    the runs apart; null after the last run). Per series and run, the last point before the run is
    added. ``normalize`` gives the kept points the same rows over these as over all ``points``: every
    kept point's previous point is among them (it is kept, or the last point before its run, or the
    last before an earlier run holding no point of its series), and they are all real points of their
    series, so none comes between a kept point and its previous one. What this saves: the window sorts
    the kept points and one more per series, not every point of the lookback."""
    others = points.where(~keep).withColumn("_run", run).where(F.col("_run").isNotNull())
    last = others.groupBy(*SERIES, "_run").agg(F.max("time").alias("time")).drop("_run")
    return points.where(keep).unionByName(others.drop("_run").join(last, [*SERIES, "time"], "left_semi"))


def _run_starts(minutes: Sequence[str]) -> list[str]:
    """The first minute of each run of consecutive ``minutes`` (sorted keys)."""
    times = [datetime.strptime(m, "%Y-%m-%dT%H:%M") for m in minutes]
    return [m for i, m in enumerate(minutes) if i == 0 or times[i] - times[i - 1] != timedelta(minutes=1)]


def _runs(minute: Column, minutes: Sequence[str]) -> Column:
    """For a point outside ``minutes`` (sorted keys), the first minute of the next run of consecutive
    ``minutes`` after it; null after the last run. Text, not timestamps: a timestamp literal is
    compiled into Spark's generated code, which then changes from run to run."""
    starts = _run_starts(minutes)
    run = F.when(minute < starts[0], starts[0])
    for start in starts[1:]:
        run = run.when(minute < start, start)
    return run


def _own_run(minute: Column, minutes: Sequence[str]) -> Column:
    """For a point, the first minute of the last run of consecutive ``minutes`` (sorted keys) that
    starts at or before its minute (the run it is in, or the run it comes after); null before the
    first run."""
    starts = _run_starts(minutes)
    run = F.when(minute >= starts[-1], starts[-1])
    for start in reversed(starts[:-1]):
        run = run.when(minute >= start, start)
    return run


def following_minutes(points: DataFrame, minutes: Sequence[str], lookback_s: int) -> DataFrame:
    """The minutes (column ``minute``) outside ``minutes`` whose rows change when the points of
    ``minutes`` (sorted keys) change: per series and run of consecutive minutes, the minute of the
    first point after the run if it comes within ``lookback_s`` of the series' last point in the run
    (its delta starts from that point). A point's next point inside a run is in ``minutes`` already.
    Two aggregates per series, no window: ``points`` should hold the points from the first minute
    on, to ``lookback_s`` past the last."""
    minute = F.date_format("time", MINUTE_PATTERN)
    keep = minute.isin(list(minutes))
    time = F.col("time")
    ends = (
        points.select(*SERIES, "time", keep.alias("_kept"), _own_run(minute, minutes).alias("_run"))
        .where(F.col("_run").isNotNull())
        .groupBy(*SERIES, "_run")
        .agg(
            F.max(F.when(F.col("_kept"), time)).alias("_last_in"),
            F.min(F.when(~F.col("_kept"), time)).alias("_first_after"),
        )
    )
    within = F.col("_first_after") <= F.col("_last_in") + F.expr(f"INTERVAL {int(lookback_s)} SECONDS")
    return ends.where(within).select(F.date_format("_first_after", MINUTE_PATTERN).alias("minute"))


def unseeded(points: DataFrame, minutes: Sequence[str], window_s: int) -> DataFrame:
    """The (series, run) pairs of the points in ``minutes`` (sorted keys) whose series has no point
    among ``points`` within ``window_s`` before its run of consecutive minutes: the previous point of
    their deltas may lie further back (or nowhere). When there is none, ``points`` holding the
    ``minutes`` and the ``window_s`` before each run give ``client_minutes`` the same rows as the
    whole lookback would (the previous points of a run's kept points are the last before it)."""
    minute = F.date_format("time", MINUTE_PATTERN)
    keep = minute.isin(list(minutes))
    kept = points.where(keep).select(*SERIES, _own_run(minute, minutes).alias("_run"))
    since = F.to_timestamp("_run", MINUTE_PATTERN) - F.expr(f"INTERVAL {int(window_s)} SECONDS")
    before = (
        points.where(~keep)
        .select(*SERIES, "time", _runs(minute, minutes).alias("_run"))
        .where(F.col("_run").isNotNull() & (F.col("time") >= since))
    )
    return kept.join(before.select(*SERIES, "_run"), [*SERIES, "_run"], "left_anti")


def client_minutes(
    points: DataFrame,
    minutes: Sequence[str],
    lookback_s: int = DEFAULT_LOOKBACK_S,
    *,
    numbers_only: bool = False,
) -> DataFrame:
    """Silver points -> the 1-minute client rows of ``minutes`` (sorted ``YYYY-MM-DDTHH:MM`` keys, UTC).
    ``points`` must hold the points within ``lookback_s`` before them, which only give their deltas a
    start: of those, only the last one of each series before each run of consecutive minutes is
    normalized (``_with_previous``). Numbers and the rest each normalized and merged on their own path;
    ``numbers_only``: ``points`` are sums and gauges only (``NUMBER_KINDS``), so there is no other path."""
    minute = F.date_format("time", MINUTE_PATTERN)
    keep = minute.isin(list(minutes))
    points = _with_previous(points, keep, _runs(minute, minutes))
    return _by_kind(
        points,
        lambda part, numbers: (
            _merge_numbers(
                _normalize_numbers(part, lookback_s, "1m").where(keep),
                CLIENT_KEYS,
                CLIENT_LATEST,
                "1m",
                time_column=None,
                extra=(),
            )
            if numbers
            else merge(
                normalize(part, lookback_s).where(keep), CLIENT_KEYS, CLIENT_LATEST, "1m", time_column="time"
            )
        ),
        rollup_schema("client", "1m").names,
        numbers_only,
    )


def entity_rollup(client_rows: DataFrame, width: Width, *, numbers_only: bool = False) -> DataFrame:
    """Client rows of ``width`` -> quota-entity rows of the same width (every client and attribute
    set of the entity together; ``clients`` counts the client instances). ``numbers_only``: the
    rows are sums and gauges only."""
    return _by_kind(
        client_rows,
        lambda part, numbers: merge(
            part,
            ENTITY_KEYS,
            ENTITY_LATEST,
            width,
            extra=[F.count_distinct("client_instance_id").alias("clients")],
            numbers_only=numbers,
        ),
        rollup_schema("entity", width).names,
        numbers_only,
    )
