"""Which OTLP points are refused one by one, and that what is kept is the valid rest."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    DataPointFlags,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    Sum,
    Summary,
    SummaryDataPoint,
)

from ingest.push.otlp_points import drop_invalid_points, point_problem
from tests.support.paths import REPO

T = 1_700_000_000_000_000_000
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
NO_VALUE = DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK
Buckets = ExponentialHistogramDataPoint.Buckets
Quantile = SummaryDataPoint.ValueAtQuantile


def histogram(counts: list[int], bounds: list[float], count: int) -> HistogramDataPoint:
    return HistogramDataPoint(time_unix_nano=T, bucket_counts=counts, explicit_bounds=bounds, count=count)


@pytest.mark.parametrize(
    ("kind", "point", "problem"),
    [
        ("gauge", NumberDataPoint(time_unix_nano=T, as_int=3), None),
        ("gauge", NumberDataPoint(time_unix_nano=0, as_int=3), "no time_unix_nano"),
        ("sum", NumberDataPoint(time_unix_nano=T), "no value"),
        ("sum", NumberDataPoint(time_unix_nano=T, flags=NO_VALUE), None),  # a staleness marker
        ("histogram", histogram([1, 2, 3], [1.0, 2.0], 6), None),
        ("histogram", histogram([], [], 9), None),  # count and sum only
        ("histogram", histogram([1, 2, 3], [1.0, 2.0, 3.0], 6), "3 bucket_counts for 3 explicit_bounds"),
        ("histogram", histogram([1, 2, 3], [2.0, 1.0], 6), "not strictly increasing"),
        ("histogram", histogram([1, 2, 3], [1.0, float("nan")], 6), "not strictly increasing"),
        ("histogram", histogram([1, 2, 3], [1.0, 2.0], 7), "count 7 is not the sum"),
        (
            "exponential_histogram",
            ExponentialHistogramDataPoint(
                time_unix_nano=T, count=6, zero_count=1, positive=Buckets(bucket_counts=[2, 3])
            ),
            None,
        ),
        (
            "exponential_histogram",
            ExponentialHistogramDataPoint(time_unix_nano=T, count=6, negative=Buckets(bucket_counts=[2])),
            "count 6 is not the sum of its buckets (2)",
        ),
        ("summary", SummaryDataPoint(time_unix_nano=T, quantile_values=[Quantile(quantile=0.99)]), None),
        (
            "summary",
            SummaryDataPoint(time_unix_nano=T, quantile_values=[Quantile(quantile=1.5)]),
            "quantile outside [0, 1]",
        ),
    ],
)
def test_the_data_model_rule_each_point_is_checked_against(
    kind: str, point: Any, problem: str | None
) -> None:
    found = point_problem(kind, point)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


def scoped(*metrics: Metric) -> MetricsData:
    data = MetricsData()
    data.resource_metrics.add().scope_metrics.add().metrics.extend(metrics)
    return data


def good_gauge(name: str = "ok", points: int = 1) -> Metric:
    return Metric(
        name=name,
        gauge=Gauge(data_points=[NumberDataPoint(time_unix_nano=T, as_int=i) for i in range(points)]),
    )


def test_valid_data_is_left_alone() -> None:
    data = scoped(good_gauge(points=3))
    before = data.SerializeToString()
    assert not drop_invalid_points(data)
    assert data.SerializeToString() == before


def test_bad_points_go_good_points_of_the_same_metric_stay() -> None:
    bad, good = histogram([1], [1.0], 1), histogram([1, 0], [1.0], 1)
    metric = Metric(
        name="h", histogram=Histogram(data_points=[bad, good, bad], aggregation_temporality=CUMULATIVE)
    )
    data = scoped(metric, good_gauge())
    rejected = drop_invalid_points(data)
    assert rejected.points == 2
    problem = "metric 'h': a histogram point has 1 bucket_counts for 1 explicit_bounds"
    assert rejected.message == f"2 data points rejected: {problem} (x2)"
    [h, g] = data.resource_metrics[0].scope_metrics[0].metrics
    assert list(h.histogram.data_points) == [good]
    assert g.name == "ok"


def test_whole_metrics_are_refused_for_a_missing_name_data_or_temporality() -> None:
    data = scoped(
        good_gauge(name="", points=2),
        Metric(name="empty"),
        Metric(name="s", sum=Sum(data_points=[NumberDataPoint(time_unix_nano=T, as_int=1)])),
        Metric(name="all-bad", summary=Summary(data_points=[SummaryDataPoint(time_unix_nano=0)])),
        good_gauge(),
    )
    rejected = drop_invalid_points(data)
    assert rejected.points == 4  # 2 nameless + 1 without temporality + 1 bad summary; "empty" has none
    assert "metric 'empty' has no data" in rejected.message
    assert "metric 's' has no aggregation_temporality" in rejected.message
    assert [m.name for m in data.resource_metrics[0].scope_metrics[0].metrics] == ["ok"]


def test_the_message_lists_the_commonest_problems_and_counts_the_rest() -> None:
    bad = histogram([1], [1.0], 1)
    repeated = Metric(
        name="h", histogram=Histogram(data_points=[bad] * 3, aggregation_temporality=CUMULATIVE)
    )
    rejected = drop_invalid_points(scoped(*[Metric(name=f"m{i}") for i in range(6)], repeated))
    assert rejected.points == 3  # the dataless metrics are dropped but have no points to count
    listed = rejected.message.split("; ")
    assert listed[0] == (
        "3 data points rejected: metric 'h': a histogram point has 1 bucket_counts for 1 explicit_bounds (x3)"
    )
    assert listed[1:5] == [f"metric 'm{i}' has no data" for i in range(4)]
    assert listed[5] == "and 2 more kinds of problem"


def _work(metrics: int, points: int) -> dict[str, int]:
    """What filtering costs, counted in a child process (``tests.ingest.push.otlp_points_work``)."""
    child = subprocess.run(
        [sys.executable, "-m", "tests.ingest.push.otlp_points_work", str(metrics), str(points)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    work: dict[str, int] = json.loads(child.stdout)
    return work


@pytest.mark.parametrize(
    "sizes", [((4, 2_000), (4, 4_000)), ((1_000, 2), (2_000, 2))], ids=["points", "metrics"]
)
def test_F1_filtering_alternating_valid_and_invalid_entries_costs_linear_work(
    sizes: tuple[tuple[int, int], tuple[int, int]],
) -> None:
    """Twice the points (or metrics), every other one refused: twice the work, not four times as
    the element-by-element deletion did; every point checked exactly once, and the right ones kept."""
    small, large = (_work(metrics, points) for metrics, points in sizes)
    for work, (metrics, points) in zip((small, large), sizes, strict=True):
        total = metrics * points
        assert work["checks"] == total // 2  # the points of the nameless metrics are refused unchecked
        assert work["kept"] == total // 4
        assert work["rejected"] == total - total // 4
        assert work["moves"] == 0
        assert work["copies"] <= total
    assert 1.9 <= large["copies"] / small["copies"] <= 2.1


def test_the_problems_kept_are_bounded_whatever_the_points_refused() -> None:
    """Each histogram point below has its own problem text: at most 100 kinds are kept and counted,
    and the message says that there were more."""
    bad = [histogram([1] * n, [], n) for n in range(2, 302)]
    metric = Metric(name="h", histogram=Histogram(data_points=bad, aggregation_temporality=CUMULATIVE))
    rejected = drop_invalid_points(scoped(metric, good_gauge()))
    assert rejected.points == 300
    assert len(rejected.problems) == 100
    assert rejected.more_kinds
    assert rejected.problems[0] == (
        "metric 'h': a histogram point has 2 bucket_counts for 0 explicit_bounds",
        1,
    )
    assert rejected.message.endswith("; and more than 95 more kinds of problem")
    assert rejected.message.count(";") == 5
