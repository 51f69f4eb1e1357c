"""The tests' independent reference for the gold rollups (``spark_jobs.transforms.rollup``).

Plain Python, written from the rollup module's docstring and not from its Spark code, so tests can
compare the Spark rollups against it. Speed is irrelevant here: everything is computed the obvious
way, straight from silver ``metric_points`` rows given as dicts (timestamps as tz-aware datetimes,
arrays as lists, maps as dicts or lists of ``(key, value)`` pairs, quantiles as dicts with
``quantile`` and ``value``).

- Every point first gets its *contribution*: delta points (and gauges) as sent; a cumulative point
  (``temporality == "cumulative"``, and every summary) becomes its increase over the previous point
  of its series (client instance, metric, kind, attributes) when that point is at most ``lookback_s``
  older, or its whole value after a restart (a different ``start_time``; a lower value for a
  monotonic sum, a lower count for histograms and summaries; different bounds for a histogram). With
  no previous point in reach, a point counts whole if its series started at most ``lookback_s``
  before it, else its increase is unknown. An exponential histogram whose scale, offsets or bucket
  array lengths differ from the previous point's has an unknown increase too.
- The contributions of a bucket are then added up per client row (series and ``explicit_bounds``),
  the 1-hour rows straight from points as well, and per quota-entity row (the client rows' quota
  entity, metric, kind and ``explicit_bounds``), also straight from points.

Choices where the docstring leaves room:

- "Latest" orders by ``time``, then client instance, then ``attributes_key`` (as the rollup does,
  so that a tie between series is broken the same way), then the order given.
- NaN orders above every number (Spark SQL's order), in ``min``/``max`` and ``value_min``/``value_max``.
- Nulls follow SQL: an increase or sum involving a null is null (it is not counted as unknown, and
  it adds nothing), a comparison with a null is false (no restart).
- ``value_last`` is the latest point's value when that point is a gauge or a cumulative sum, and
  null when the latest point is a delta sum (even if an earlier point of the group was cumulative).
- ``quantiles`` are the latest point's (unknown or not); ``min``/``max`` are null for summaries.
- An exponential histogram group with no known point has null ``scale``, ``zero_count``, offsets
  and arrays. ``zero_count`` is subtracted like the bucket counts for cumulative points.
- Histogram bucket arrays that must be added or subtracted but differ in length (invalid OTLP: the
  bounds are equal) raise ``ValueError``.
- An entity row groups whole client rows under the quota entity of the row's latest point; client
  rows with no quota entity make no entity row.
- Output maps (``attributes``) are dicts; rows are sorted by bucket and keys.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from spark_jobs.transforms.rollup import rollup_schema

__all__ = ["client_rows", "entity_rows"]

Width = Literal["1m", "1h"]

_SERIES = ("client_instance_id", "metric_name", "metric_kind", "attributes_key")
_CLIENT_LATEST = (
    "principal",
    "client_id",
    "client_software_name",
    "client_software_version",
    "quota_entity",
    "metric_unit",
    "temporality",
    "is_monotonic",
)
_HISTOGRAM_KINDS = ("histogram", "exponential_histogram")
_KINDS = ("sum", "gauge", "histogram", "exponential_histogram", "summary")


@dataclass(frozen=True)
class _Exp:
    """An exponential histogram's buckets (a point's, or a point's increase)."""

    scale: int
    zero_count: int | None
    positive_offset: int
    positive: list[int]
    negative_offset: int
    negative: list[int]


_Rank = tuple[datetime, str, str, int]
"""(time, client instance, attributes key, input position): the order "latest" refers to."""


@dataclass(frozen=True)
class _Contribution:
    """What one point adds to its rows."""

    point: Mapping[str, Any]
    rank: _Rank
    unknown: bool = False
    value: float | None = None  # into value_sum / value_count
    gauge: float | None = None  # into value_min / value_max
    last: float | None = None  # the value_last candidate
    count: int | None = None
    sum: float | None = None
    min: float | None = None
    max: float | None = None
    bucket_counts: list[int] | None = None
    exp: _Exp | None = None


# ---------------------------------------------------------------------------------------------------
# small helpers


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"timestamps must be tz-aware: {value!r}")
    return value.astimezone(UTC)


def _minus(a: Any, b: Any) -> Any:
    return None if a is None or b is None else a - b


def _less(a: Any, b: Any) -> bool:
    return a is not None and b is not None and a < b


def _bounds(point: Mapping[str, Any]) -> tuple[float, ...] | None:
    bounds = point.get("explicit_bounds")
    return None if bounds is None else tuple(bounds)


def _counts_minus(a: Sequence[int] | None, b: Sequence[int] | None) -> list[int] | None:
    if a is None or b is None:
        return None
    if len(a) != len(b):
        raise ValueError(f"bucket arrays of different lengths: {list(a)} and {list(b)}")
    return [x - y for x, y in zip(a, b, strict=True)]


def _map(value: Any) -> dict[str, Any] | None:
    return None if value is None else dict(value)  # a dict, or a list of (key, value) pairs


def _quantiles(value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    return [{"quantile": q["quantile"], "value": q["value"]} for q in value]


def _total(values: Iterable[Any]) -> Any:
    """The sum of the non-null values, null when there are none."""
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _ordered_as_spark(value: Any) -> tuple[bool, Any]:
    """Spark SQL's order of numbers: NaN above every number."""
    return (isinstance(value, float) and math.isnan(value), value)


def _smallest(values: Iterable[Any]) -> Any:
    present = [v for v in values if v is not None]
    return min(present, key=_ordered_as_spark) if present else None


def _largest(values: Iterable[Any]) -> Any:
    present = [v for v in values if v is not None]
    return max(present, key=_ordered_as_spark) if present else None


def _bucket(time: datetime, width: Width) -> datetime:
    start = _utc(time).replace(second=0, microsecond=0)
    return start.replace(minute=0) if width == "1h" else start


def _partition(bucket_start: datetime, width: Width) -> tuple[str, str]:
    if width == "1m":
        return "bucket_hour", bucket_start.strftime("%Y-%m-%dT%H")
    return "bucket_date", bucket_start.strftime("%Y-%m-%d")


# ---------------------------------------------------------------------------------------------------
# per point: the contribution


def _exp_of(point: Mapping[str, Any]) -> _Exp:
    return _Exp(
        scale=point["scale"],
        zero_count=point.get("zero_count"),
        positive_offset=point.get("positive_offset") or 0,
        positive=list(point.get("positive_bucket_counts") or []),
        negative_offset=point.get("negative_offset") or 0,
        negative=list(point.get("negative_bucket_counts") or []),
    )


def _start_changed(point: Mapping[str, Any], previous: Mapping[str, Any]) -> bool:
    start, previous_start = point.get("start_time"), previous.get("start_time")
    return start is not None and previous_start is not None and _utc(start) != _utc(previous_start)


def _fresh(point: Mapping[str, Any], lookback: timedelta) -> bool:
    """The series started (``start_time``) at most ``lookback`` before the point."""
    start = point.get("start_time")
    return start is not None and _utc(start) >= _utc(point["time"]) - lookback


def _sum_delta(
    point: Mapping[str, Any], previous: Mapping[str, Any] | None, lookback: timedelta
) -> tuple[bool, float | None]:
    """(unknown, increase) of a cumulative sum point."""
    value = point.get("value")
    if previous is None:
        return (False, value) if _fresh(point, lookback) else (True, None)
    restarted = _start_changed(point, previous) or (
        bool(point.get("is_monotonic")) and _less(value, previous.get("value"))
    )
    return False, value if restarted else _minus(value, previous.get("value"))


def _histogram_state(
    point: Mapping[str, Any], previous: Mapping[str, Any] | None, lookback: timedelta
) -> Literal["whole", "increase", "unknown"]:
    """How a cumulative histogram, exponential histogram or summary point counts."""
    if previous is None:
        return "whole" if _fresh(point, lookback) else "unknown"
    if _start_changed(point, previous) or _less(point.get("count"), previous.get("count")):
        return "whole"
    if point["metric_kind"] == "histogram" and _bounds(point) != _bounds(previous):
        return "whole"
    if point["metric_kind"] == "exponential_histogram":
        mine, theirs = _exp_of(point), _exp_of(previous)
        same_shape = (
            mine.scale == theirs.scale
            and mine.positive_offset == theirs.positive_offset
            and mine.negative_offset == theirs.negative_offset
            and len(mine.positive) == len(theirs.positive)
            and len(mine.negative) == len(theirs.negative)
        )
        if not same_shape:
            return "unknown"
    return "increase"


def _contribution(
    point: Mapping[str, Any],
    rank: _Rank,
    previous: Mapping[str, Any] | None,
    lookback: timedelta,
) -> _Contribution:
    kind = point["metric_kind"]
    if kind not in _KINDS:
        raise ValueError(f"unknown metric_kind {kind!r}")
    cumulative = point.get("temporality") == "cumulative" or kind == "summary"
    if kind == "gauge":
        value = point.get("value")
        return _Contribution(point, rank, value=value, gauge=value, last=value)
    if kind == "sum":
        if not cumulative:
            return _Contribution(point, rank, value=point.get("value"))
        unknown, delta = _sum_delta(point, previous, lookback)
        return _Contribution(point, rank, unknown=unknown, value=delta, last=point.get("value"))

    # histogram, exponential_histogram, summary
    is_exp = kind == "exponential_histogram"
    if not cumulative:
        return _Contribution(
            point,
            rank,
            count=point.get("count"),
            sum=point.get("sum"),
            min=point.get("min"),
            max=point.get("max"),
            bucket_counts=list(point["bucket_counts"]) if point.get("bucket_counts") is not None else None,
            exp=_exp_of(point) if is_exp else None,
        )
    state = _histogram_state(point, previous, lookback)
    if state == "unknown":
        return _Contribution(point, rank, unknown=True)
    if state == "whole":
        return _Contribution(
            point,
            rank,
            count=point.get("count"),
            sum=point.get("sum"),
            bucket_counts=list(point["bucket_counts"]) if point.get("bucket_counts") is not None else None,
            exp=_exp_of(point) if is_exp else None,
        )
    assert previous is not None  # "increase" needs a previous point
    exp = None
    if is_exp:
        mine, theirs = _exp_of(point), _exp_of(previous)
        exp = _Exp(
            scale=mine.scale,
            zero_count=_minus(mine.zero_count, theirs.zero_count),
            positive_offset=mine.positive_offset,
            positive=_counts_minus(mine.positive, theirs.positive) or [],
            negative_offset=mine.negative_offset,
            negative=_counts_minus(mine.negative, theirs.negative) or [],
        )
    return _Contribution(
        point,
        rank,
        count=_minus(point.get("count"), previous.get("count")),
        sum=_minus(point.get("sum"), previous.get("sum")),
        bucket_counts=(
            _counts_minus(point["bucket_counts"], previous.get("bucket_counts"))
            if kind == "histogram" and point.get("bucket_counts") is not None
            else None
        ),
        exp=exp,
    )


def _contributions(points: Iterable[Mapping[str, Any]], lookback_s: int) -> list[_Contribution]:
    lookback = timedelta(seconds=lookback_s)
    series: dict[tuple[Any, ...], list[tuple[_Rank, Mapping[str, Any]]]]
    series = defaultdict(list)
    for position, point in enumerate(points):
        rank = (_utc(point["time"]), point["client_instance_id"], point["attributes_key"], position)
        series[tuple(point[k] for k in _SERIES)].append((rank, point))
    out = []
    for members in series.values():
        members.sort(key=lambda member: member[0])
        for i, (rank, point) in enumerate(members):
            previous = None
            if i > 0:
                previous_rank, previous_point = members[i - 1]
                if previous_rank[0] >= rank[0] - lookback:
                    previous = previous_point
            out.append(_contribution(point, rank, previous, lookback))
    return out


# ---------------------------------------------------------------------------------------------------
# per group: the measures


def _merge_side(parts: list[tuple[int, int, list[int]]], target: int) -> tuple[int, list[int]]:
    """(offset, dense counts) of bucket arrays given as (scale, offset, counts), at scale ``target``."""
    totals: dict[int, int] = defaultdict(int)
    for scale, offset, counts in parts:
        for j, n in enumerate(counts):
            totals[(offset + j) >> (scale - target)] += n  # >> floors, negative indexes too
    if not totals:
        return 0, []
    low, high = min(totals), max(totals)
    return low, [totals.get(i, 0) for i in range(low, high + 1)]


def _merge_exp(exps: list[_Exp]) -> dict[str, Any]:
    if not exps:
        return dict.fromkeys(
            (
                "scale",
                "zero_count",
                "positive_offset",
                "positive_bucket_counts",
                "negative_offset",
                "negative_bucket_counts",
            )
        )
    target = min(e.scale for e in exps)
    positive_offset, positive = _merge_side([(e.scale, e.positive_offset, e.positive) for e in exps], target)
    negative_offset, negative = _merge_side([(e.scale, e.negative_offset, e.negative) for e in exps], target)
    return {
        "scale": target,
        "zero_count": _total(e.zero_count for e in exps),
        "positive_offset": positive_offset,
        "positive_bucket_counts": positive,
        "negative_offset": negative_offset,
        "negative_bucket_counts": negative,
    }


def _add_counts(arrays: list[list[int]]) -> list[int] | None:
    if not arrays:
        return None
    if len({len(a) for a in arrays}) != 1:
        raise ValueError(f"bucket arrays of different lengths: {arrays}")
    return [sum(column) for column in zip(*arrays, strict=True)]


def _measures(group: list[_Contribution]) -> dict[str, Any]:
    known = [c for c in group if not c.unknown]
    latest = max(group, key=lambda c: c.rank)
    times = [c.rank[0] for c in group]
    values = [c.value for c in known if c.value is not None]
    kind = latest.point["metric_kind"]
    return {
        "points": len(group),
        "first_time": min(times),
        "last_time": max(times),
        "value_sum": sum(values) if values else None,
        "value_count": len(values),
        "value_min": _smallest(c.gauge for c in known),
        "value_max": _largest(c.gauge for c in known),
        "value_last": latest.last,
        "unknown_deltas": len(group) - len(known),
        "count": _total(c.count for c in known),
        "sum": _total(c.sum for c in known),
        "min": _smallest(c.min for c in known),
        "max": _largest(c.max for c in known),
        "bucket_counts": _add_counts([c.bucket_counts for c in known if c.bucket_counts is not None]),
        **_merge_exp([c.exp for c in known if c.exp is not None]),
        "quantiles": _quantiles(latest.point.get("quantiles")) if kind == "summary" else None,
    }


def _grouped(
    contributions: Iterable[_Contribution], key: Callable[[_Contribution], tuple[Any, ...]]
) -> dict[tuple[Any, ...], list[_Contribution]]:
    groups: dict[tuple[Any, ...], list[_Contribution]] = defaultdict(list)
    for c in contributions:
        groups[key(c)].append(c)
    return groups


def _sort_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Nulls (e.g. no ``explicit_bounds``) first, so mixed keys still sort."""
    return tuple((v is not None, v) for v in key)


def _client_groups(
    points: Iterable[Mapping[str, Any]], width: Width, lookback_s: int
) -> dict[tuple[Any, ...], list[_Contribution]]:
    """Contributions by (bucket_start, *series, explicit_bounds)."""
    return _grouped(
        _contributions(points, lookback_s),
        lambda c: (_bucket(c.rank[0], width), *(c.point[k] for k in _SERIES), _bounds(c.point)),
    )


def _ordered(row: dict[str, Any], by: Literal["client", "entity"], width: Width) -> dict[str, Any]:
    names = rollup_schema(by, width).names
    if set(names) != set(row):
        raise AssertionError(f"columns {sorted(row)} are not {sorted(names)}")
    return {name: row[name] for name in names}


# ---------------------------------------------------------------------------------------------------
# the API


def client_rows(
    points: Iterable[Mapping[str, Any]], width: Literal["1m", "1h"], lookback_s: int = 3600
) -> list[dict[str, Any]]:
    """Gold rows by client instance (columns of ``rollup_schema("client", width)``) from points."""
    rows = []
    groups = _client_groups(points, width, lookback_s)
    for key in sorted(groups, key=_sort_key):
        group = groups[key]
        bucket_start, *series, bounds = key
        latest = max(group, key=lambda c: c.rank).point
        partition, partition_value = _partition(bucket_start, width)
        row = {
            "bucket_start": bucket_start,
            **dict(zip(_SERIES, series, strict=True)),
            "explicit_bounds": None if bounds is None else list(bounds),
            **{k: latest.get(k) for k in _CLIENT_LATEST},
            "attributes": _map(latest.get("attributes")),
            **_measures(group),
            partition: partition_value,
        }
        rows.append(_ordered(row, "client", width))
    return rows


def entity_rows(
    points: Iterable[Mapping[str, Any]], width: Literal["1m", "1h"], lookback_s: int = 3600
) -> list[dict[str, Any]]:
    """Gold rows by quota entity (columns of ``rollup_schema("entity", width)``) from points: all the
    contributions of the entity's client rows in the bucket, merged."""
    entity_groups: dict[tuple[Any, ...], list[_Contribution]] = defaultdict(list)
    for key, group in _client_groups(points, width, lookback_s).items():
        quota_entity = max(group, key=lambda c: c.rank).point.get("quota_entity")
        if quota_entity is None:
            continue
        bucket_start, _client, metric_name, metric_kind, _attributes, bounds = key
        entity_groups[(bucket_start, quota_entity, metric_name, metric_kind, bounds)].extend(group)
    rows = []
    for key in sorted(entity_groups, key=_sort_key):
        group = entity_groups[key]
        bucket_start, quota_entity, metric_name, metric_kind, bounds = key
        partition, partition_value = _partition(bucket_start, width)
        row = {
            "bucket_start": bucket_start,
            "quota_entity": quota_entity,
            "metric_name": metric_name,
            "metric_kind": metric_kind,
            "metric_unit": max(group, key=lambda c: c.rank).point.get("metric_unit"),
            "explicit_bounds": None if bounds is None else list(bounds),
            "clients": len({c.point["client_instance_id"] for c in group}),
            **_measures(group),
            partition: partition_value,
        }
        rows.append(_ordered(row, "entity", width))
    return rows
