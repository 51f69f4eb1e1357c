"""Which OTLP data points the OTLP receivers refuse one by one (``partial_success``).

An OTLP export is not all or nothing: points that break the OTLP metrics data model are dropped, the
rest land, and the answer is an ``ExportMetricsServiceResponse`` whose ``partial_success`` says how
many points were rejected and why (the OTLP specification's partial success). What lands is the
filtered ``MetricsData``, so the stored bytes are always valid; an export with nothing to drop lands
byte for byte as sent. KIP-714 pushes are not filtered: Kafka answers a push as a whole.

| refused | when (the OTLP data model, ``metrics.proto``) |
|---|---|
| a metric and all its points | its name is empty |
| a metric (no points to count) | no data: none of gauge, sum, histogram, exponential histogram, summary |
| a metric and all its points | a sum or (exponential) histogram with UNSPECIFIED temporality |
| a point | ``time_unix_nano`` is 0 (it is required) |
| a number point | neither ``as_int`` nor ``as_double``, and not flagged NO_RECORDED_VALUE |
| a histogram point | ``bucket_counts`` neither empty nor ``len(explicit_bounds) + 1`` long; |
| | bounds not strictly increasing; ``count`` not the sum of ``bucket_counts`` |
| an exponential histogram point | ``count`` is not ``zero_count`` + every positive and negative bucket |
| a summary point | a quantile outside [0, 1] |

A metric left with no points after its points were refused is dropped too. ``drop_invalid_points``
mutates the message and returns what it refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any, Final, NamedTuple

from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    DataPointFlags,
    ExponentialHistogramDataPoint,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    SummaryDataPoint,
)

__all__ = ["Rejected", "drop_invalid_points", "point_problem"]

_MAX_PROBLEMS_LISTED: Final = 5
_TEMPORAL: Final = frozenset({"sum", "histogram", "exponential_histogram"})


class Rejected(NamedTuple):
    """What ``drop_invalid_points`` refused: a count of points, and why (empty: nothing refused)."""

    points: int = 0
    problems: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.problems)

    @property
    def message(self) -> str:
        """The ``partial_success.error_message``: the distinct problems, the commonest first."""
        counted = Counter(self.problems).most_common()
        listed = [f"{problem} (x{n})" if n > 1 else problem for problem, n in counted[:_MAX_PROBLEMS_LISTED]]
        if len(counted) > _MAX_PROBLEMS_LISTED:
            listed.append(f"and {len(counted) - _MAX_PROBLEMS_LISTED} more kinds of problem")
        return f"{self.points} data points rejected: " + "; ".join(listed)


def _number_problem(point: NumberDataPoint) -> str | None:
    no_value = point.WhichOneof("value") is None
    if no_value and not point.flags & DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK:
        return "a number point has no value"
    return None


def _histogram_problem(point: HistogramDataPoint) -> str | None:
    buckets, bounds = point.bucket_counts, point.explicit_bounds
    if buckets and len(buckets) != len(bounds) + 1:
        return f"a histogram point has {len(buckets)} bucket_counts for {len(bounds)} explicit_bounds"
    if any(not lower < upper for lower, upper in pairwise(bounds)):
        return "a histogram point's explicit_bounds are not strictly increasing"
    if buckets and sum(buckets) != point.count:
        return f"a histogram point's count {point.count} is not the sum of its bucket_counts"
    return None


def _exponential_problem(point: ExponentialHistogramDataPoint) -> str | None:
    total = point.zero_count + sum(point.positive.bucket_counts) + sum(point.negative.bucket_counts)
    if total != point.count:
        return f"an exponential histogram point's count {point.count} is not the sum of its buckets ({total})"
    return None


def _summary_problem(point: SummaryDataPoint) -> str | None:
    if any(not 0.0 <= q.quantile <= 1.0 for q in point.quantile_values):
        return "a summary point has a quantile outside [0, 1]"
    return None


_CHECKS: Final[dict[str, Callable[[Any], str | None]]] = {
    "gauge": _number_problem,
    "sum": _number_problem,
    "histogram": _histogram_problem,
    "exponential_histogram": _exponential_problem,
    "summary": _summary_problem,
}


def point_problem(kind: str, point: Any) -> str | None:
    """Why one data point of a ``kind`` metric (the ``data`` field's name) is refused, or None."""
    if point.time_unix_nano == 0:
        return "a point has no time_unix_nano"
    return _CHECKS[kind](point)


def _metric_problem(metric: Metric, kind: str | None) -> str | None:
    if not metric.name:
        return "a metric has no name"
    if kind is None:
        return f"metric {metric.name!r} has no data"
    if kind in _TEMPORAL:
        temporality = getattr(metric, kind).aggregation_temporality
        if temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_UNSPECIFIED:
            return f"metric {metric.name!r} has no aggregation_temporality"
    return None


def _drop_points(metric: Metric, kind: str, problems: list[str]) -> int:
    """Remove the invalid points of one metric; how many were removed."""
    points: Sequence[Any] = getattr(metric, kind).data_points
    refused = []
    for index, point in enumerate(points):
        problem = point_problem(kind, point)
        if problem is not None:
            refused.append(index)
            problems.append(f"metric {metric.name!r}: {problem}")
    for index in reversed(refused):
        del points[index]  # type: ignore[attr-defined]
    return len(refused)


def drop_invalid_points(data: MetricsData) -> Rejected:
    """Remove every refused metric and point from ``data`` (in place); what was refused."""
    problems: list[str] = []
    points = 0
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            refused = []
            for index, metric in enumerate(scope.metrics):
                kind = metric.WhichOneof("data")
                had = len(getattr(metric, kind).data_points) if kind else 0
                problem = _metric_problem(metric, kind)
                if problem is not None or kind is None:
                    points += had
                    problems += [problem or ""] * max(had, 1)
                    refused.append(index)
                    continue
                dropped = _drop_points(metric, kind, problems)
                points += dropped
                if had and dropped == had:
                    refused.append(index)
            for index in reversed(refused):
                del scope.metrics[index]
    return Rejected(points, tuple(problems))
