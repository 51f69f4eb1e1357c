"""``spark_jobs.transforms.rollup`` on a real local Spark: the 1-minute client rows of some minutes only
(``client_minutes``, as the job recomputes them) equal the pure-Python reference's rows of those minutes
computed from every point, whatever runs the minutes make."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from spark_jobs.tables import METRIC_POINTS_SCHEMA
from spark_jobs.transforms.rollup import CLIENT_KEYS, SERIES, client_minutes, following_minutes, unseeded
from tests.spark_jobs.transforms.test_rollup_reference import at, cumulative_sum, histogram, point
from tests.support.rollup_reference import client_rows

pytestmark = pytest.mark.spark

LOOKBACK_S = 600


def series_points() -> list[dict[str, Any]]:
    """Five series over 30 minutes: every minute with a restart, every 5 minutes (absent from some
    runs), a gauge every 30 s, a cumulative histogram every 2 minutes, and one that stops for longer
    than the lookback and comes back."""
    points = []
    total = 0.0
    for minute in range(30):
        total = total + 5 if minute != 12 else 1.0  # a restart: lower value, new start time
        start = -30.0 if minute < 12 else 12 * 60 - 1
        points.append(cumulative_sum(minute * 60 + 10, total, start=start, attributes_key='{"s":"a"}'))
    points += [cumulative_sum(m * 60 + 20, m * 2.0, attributes_key='{"s":"b"}') for m in range(0, 30, 5)]
    points += [
        point(h * 30 + 5, metric_kind="gauge", temporality=None, value=float(h % 7)) for h in range(60)
    ]
    points += [
        histogram(m * 60 + 30, [1.0, 10.0], [m + 1, 1, 0], temporality="cumulative") for m in range(0, 30, 2)
    ]
    # back after 18 minutes, over the lookback: the first point back is unknown
    points += [cumulative_sum(m * 60 + 40, m * 3.0, attributes_key='{"s":"e"}') for m in (0, 1, 2, 20, 21)]
    return points


def same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, float) and isinstance(actual, float):
        return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(expected, list) and isinstance(actual, list):
        return len(actual) == len(expected) and all(same(a, e) for a, e in zip(actual, expected, strict=True))
    return bool(actual == expected)


def key(row: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(str(row[k]) for k in ("bucket_start", *CLIENT_KEYS))


@pytest.mark.parametrize(
    "minutes",
    [
        [3, 4],  # one run
        [0, 1, 2, 3],  # from the first point on
        [7, 13, 14, 21, 22, 23],  # runs whose previous points lie in an earlier run, or before it
        [5, 10, 15, 20, 25],  # one-minute runs, on series b's points
        list(range(30)),  # everything
    ],
)
def test_client_minutes_of_some_minutes_are_the_rows_computed_from_every_point(
    spark: SparkSession, minutes: list[int]
) -> None:
    assert_minutes_match_the_reference(spark, series_points(), minutes)


def test_client_minutes_of_numbers_only_match_the_reference_without_the_histogram_path(
    spark: SparkSession,
) -> None:
    points = [p for p in series_points() if p["metric_kind"] in ("sum", "gauge")]
    assert_minutes_match_the_reference(spark, points, [7, 13, 14, 21, 22, 23], numbers_only=True)


def assert_minutes_match_the_reference(
    spark: SparkSession, points: list[dict[str, Any]], minutes: list[int], *, numbers_only: bool = False
) -> None:
    keys = [at(m * 60).strftime("%Y-%m-%dT%H:%M") for m in minutes]
    frame = spark.createDataFrame(pa.Table.from_pylist(points, METRIC_POINTS_SCHEMA))
    rolled = client_minutes(frame, keys, LOOKBACK_S, numbers_only=numbers_only)
    actual = {key(r): r for r in rolled.toArrow().to_pylist()}
    wanted = {at(m * 60) for m in minutes}
    expected = {key(r): r for r in client_rows(points, "1m", LOOKBACK_S) if r["bucket_start"] in wanted}
    assert actual.keys() == expected.keys()
    for k, row in expected.items():
        got = actual[k]
        if got["attributes"] is not None:
            got["attributes"] = dict(got["attributes"])
        wrong = {c: (got[c], v) for c, v in row.items() if c != "attributes" and not same(got[c], v)}
        assert not wrong, f"{k}: {wrong}"


def test_unseeded_names_the_series_without_a_point_within_the_window_before_their_run(
    spark: SparkSession,
) -> None:
    """Series a pushes every minute, b every 5 minutes, e is away from minute 3 to 19; nothing comes
    before minute 0 (every series is new there)."""
    points = series_points()
    frame = spark.createDataFrame(pa.Table.from_pylist(points, METRIC_POINTS_SCHEMA))

    def missing(minutes: list[int], window_s: int) -> set[tuple[str, str]]:
        keys = [at(m * 60).strftime("%Y-%m-%dT%H:%M") for m in minutes]
        rows = unseeded(frame, keys, window_s).collect()
        return {(r.metric_kind, r.attributes_key) for r in rows}

    assert missing([20, 21], 120) == {("sum", '{"s":"b"}'), ("sum", '{"s":"e"}')}
    assert missing([20, 21], 600) == {("sum", '{"s":"e"}')}  # b pushed at 15:20
    assert missing([20, 21], 1200) == set()  # e's last point (2:40) is within 20 minutes
    assert missing([1, 2], 600) == set()
    assert missing([0], 600) == {
        ("sum", '{"s":"a"}'),
        ("sum", '{"s":"b"}'),
        ("gauge", "{}"),
        ("histogram", "{}"),
        ("sum", '{"s":"e"}'),
    }


@pytest.mark.parametrize(
    "minutes", [[3, 4], [7, 13, 14, 21, 22, 23], [5, 10, 15, 20, 25], [2], [29], list(range(30))]
)
def test_following_minutes_are_the_minutes_of_each_kept_points_next_point_within_the_lookback(
    spark: SparkSession, minutes: list[int]
) -> None:
    points = series_points()
    keys = [at(m * 60).strftime("%Y-%m-%dT%H:%M") for m in minutes]
    series: dict[tuple[Any, ...], list[datetime]] = {}
    for p in points:
        series.setdefault(tuple(p[k] for k in SERIES), []).append(p["time"])
    expected = set()
    for times in series.values():
        times.sort()
        for this, after in pairwise(times):
            inside = this.strftime("%Y-%m-%dT%H:%M") in keys
            if inside and after - this <= timedelta(seconds=LOOKBACK_S):
                expected.add(after.strftime("%Y-%m-%dT%H:%M"))
    frame = spark.createDataFrame(pa.Table.from_pylist(points, METRIC_POINTS_SCHEMA))
    found = {r.minute for r in following_minutes(frame, keys, LOOKBACK_S).collect()}
    assert found == expected - set(keys)
