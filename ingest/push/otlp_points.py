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
mutates the message and returns what it refused, in time linear in the message: each point is
checked once, and a repeated field that loses any element is rebuilt once from the elements kept
(never an element deleted at a time, which moves the rest of the array each time). The problems are
counted by kind, at most 100 distinct kinds (the first found; the points of any further kind count
in ``points`` but not by kind), so the answer's size does not grow with the points refused.
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
_MAX_PROBLEM_KINDS: Final = 100
_TEMPORAL: Final = frozenset({"sum", "histogram", "exponential_histogram"})


class Rejected(NamedTuple):
    """What ``drop_invalid_points`` refused: a count of points, and why, by kind of problem with its
    count, the commonest first (empty: nothing refused); ``more_kinds`` tells that kinds found after
    the first 100 were not kept."""

    points: int = 0
    problems: tuple[tuple[str, int], ...] = ()
    more_kinds: bool = False

    def __bool__(self) -> bool:
        return bool(self.problems)

    @property
    def message(self) -> str:
        """The ``partial_success.error_message``: the distinct problems, the commonest first."""
        listed = [
            f"{problem} (x{n})" if n > 1 else problem for problem, n in self.problems[:_MAX_PROBLEMS_LISTED]
        ]
        unlisted = len(self.problems) - _MAX_PROBLEMS_LISTED
        if self.more_kinds:
            listed.append(f"and more than {unlisted} more kinds of problem")
        elif unlisted > 0:
            listed.append(f"and {unlisted} more kinds of problem")
        return f"{self.points} data points rejected: " + "; ".join(listed)


class _Problems:
    """The problems found so far, counted by kind (at most ``_MAX_PROBLEM_KINDS`` kinds)."""

    __slots__ = ("counts", "more_kinds", "points")

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.more_kinds = False
        self.points = 0

    def add(self, problem: str, points: int) -> None:
        """``points`` refused for ``problem`` (a metric refused without points counts once by kind)."""
        self.points += points
        if problem in self.counts or len(self.counts) < _MAX_PROBLEM_KINDS:
            self.counts[problem] += max(points, 1)
        else:
            self.more_kinds = True

    def rejected(self) -> Rejected:
        return Rejected(self.points, tuple(self.counts.most_common()), self.more_kinds)


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


def _keep(parent: Any, field: str, kept: list[Any]) -> None:
    """Replace the repeated message ``field`` of ``parent`` by ``kept`` (some of its elements, in
    order): one pass, however many were dropped."""
    parent.ClearField(field)
    getattr(parent, field).extend(kept)


def _drop_points(metric: Metric, kind: str, problems: _Problems) -> int:
    """Remove the invalid points of one metric; how many were removed."""
    data = getattr(metric, kind)
    points: Sequence[Any] = data.data_points
    kept = []
    found: Counter[str] = Counter()
    for point in points:
        problem = point_problem(kind, point)
        if problem is None:
            kept.append(point)
        else:
            found[problem] += 1
    if found:
        _keep(data, "data_points", kept)
        for problem, n in found.items():
            problems.add(f"metric {metric.name!r}: {problem}", n)
    return found.total()


def drop_invalid_points(data: MetricsData) -> Rejected:
    """Remove every refused metric and point from ``data`` (in place); what was refused."""
    problems = _Problems()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            kept = []
            for metric in scope.metrics:
                kind = metric.WhichOneof("data")
                had = len(getattr(metric, kind).data_points) if kind else 0
                problem = _metric_problem(metric, kind)
                if problem is not None or kind is None:
                    problems.add(problem or "", had)
                elif not had or _drop_points(metric, kind, problems) < had:
                    kept.append(metric)
            if len(kept) < len(scope.metrics):
                _keep(scope, "metrics", kept)
    return problems.rejected()
