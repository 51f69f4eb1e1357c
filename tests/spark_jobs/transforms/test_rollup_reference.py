"""``tests.support.rollup_reference``: the pure-Python rollup reference, checked on hand-computed cases
(one per rule of ``spark_jobs.transforms.rollup``'s docstring). No Spark."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from spark_jobs.transforms.rollup import rollup_schema
from tests.support.rollup_reference import client_rows, entity_rows

T0 = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
ALICE = "client-id=app,user=alice"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def point(seconds: float, **columns: Any) -> dict[str, Any]:
    """A ``metric_points`` row at ``T0 + seconds``: a delta sum of client ``c1`` unless told otherwise."""
    row: dict[str, Any] = {
        "push_id": "p",
        "client_instance_id": "c1",
        "received_at": at(seconds),
        "principal": "User:alice",
        "client_id": "app",
        "client_software_name": "librdkafka",
        "client_software_version": "2.6.0",
        "quota_entity": ALICE,
        "resource_attributes": {},
        "scope_name": None,
        "scope_version": None,
        "metric_name": "m",
        "metric_unit": "1",
        "metric_description": None,
        "metric_kind": "sum",
        "temporality": "delta",
        "is_monotonic": True,
        "attributes": {},
        "attributes_key": "{}",
        "start_time": None,
        "time": at(seconds),
        "date": "2026-01-05",
        "value": None,
        "count": None,
        "sum": None,
        "min": None,
        "max": None,
        "explicit_bounds": None,
        "bucket_counts": None,
        "scale": None,
        "zero_count": None,
        "zero_threshold": None,
        "positive_offset": None,
        "positive_bucket_counts": None,
        "negative_offset": None,
        "negative_bucket_counts": None,
        "quantiles": None,
        "flags": 0,
    }
    unknown = set(columns) - set(row)
    assert not unknown, unknown
    row.update(columns)
    return row


def cumulative_sum(
    seconds: float, value: float, start: float | None = -30.0, **columns: Any
) -> dict[str, Any]:
    return point(
        seconds,
        temporality="cumulative",
        value=value,
        start_time=None if start is None else at(start),
        **columns,
    )


def only(rows: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(rows) == 1, rows
    return rows[0]


def by_bucket(rows: list[dict[str, Any]]) -> dict[datetime, dict[str, Any]]:
    return {row["bucket_start"]: row for row in rows}


# ---------------------------------------------------------------------------------------------------
# shape


@pytest.mark.parametrize("width", ["1m", "1h"])
def test_rows_have_exactly_the_rollup_schema_columns_in_order(width: Any) -> None:
    points = [point(5, value=1.0)]
    assert list(only(client_rows(points, width))) == rollup_schema("client", width).names
    assert list(only(entity_rows(points, width))) == rollup_schema("entity", width).names


def test_client_row_keys_latest_columns_and_minute_partition() -> None:
    points = [
        point(5, value=1.0, client_software_version="2.5.0", attributes=[("topic", "t")], attributes_key="k"),
        point(
            50, value=1.0, client_software_version="2.6.0", attributes=[("topic", "t")], attributes_key="k"
        ),
    ]
    row = only(client_rows(points, "1m"))
    assert row["bucket_start"] == T0
    assert row["bucket_hour"] == "2026-01-05T10"
    assert (row["client_instance_id"], row["metric_name"], row["metric_kind"], row["attributes_key"]) == (
        "c1",
        "m",
        "sum",
        "k",
    )
    assert row["client_software_version"] == "2.6.0"  # the latest point's
    assert row["attributes"] == {"topic": "t"}  # a list of pairs in, a dict out
    assert row["explicit_bounds"] is None
    assert row["quota_entity"] == ALICE


# ---------------------------------------------------------------------------------------------------
# sums


def test_delta_sum_points_add_up() -> None:
    row = only(client_rows([point(40, value=3.0), point(10, value=2.0)], "1m"))
    assert row["points"] == 2
    assert (row["first_time"], row["last_time"]) == (at(10), at(40))
    assert (row["value_sum"], row["value_count"]) == (5.0, 2)
    assert row["value_last"] is None  # delta sums have no last value
    assert row["unknown_deltas"] == 0
    assert (row["value_min"], row["value_max"], row["count"], row["bucket_counts"], row["scale"]) == (
        None,
        None,
        None,
        None,
        None,
    )


def test_cumulative_sum_becomes_deltas_and_a_restart_counts_whole() -> None:
    points = [
        cumulative_sum(0, 10.0),  # fresh series (started 30 s before): whole, 10
        cumulative_sum(30, 15.0),  # +5
        cumulative_sum(60, 4.0),  # lower value of a monotonic sum: restart, whole 4
        cumulative_sum(90, 20.0, start=60),  # a different start_time: restart, whole 20 (not +16)
    ]
    rows = by_bucket(client_rows(points, "1m"))
    assert (rows[at(0)]["value_sum"], rows[at(0)]["value_count"], rows[at(0)]["value_last"]) == (
        15.0,
        2,
        15.0,
    )
    assert (rows[at(60)]["value_sum"], rows[at(60)]["value_count"], rows[at(60)]["value_last"]) == (
        24.0,
        2,
        20.0,
    )
    assert rows[at(0)]["unknown_deltas"] == rows[at(60)]["unknown_deltas"] == 0


def test_non_monotonic_cumulative_sum_may_decrease_without_a_restart() -> None:
    points = [cumulative_sum(0, 10.0, is_monotonic=False), cumulative_sum(30, 4.0, is_monotonic=False)]
    row = only(client_rows(points, "1m"))
    assert (row["value_sum"], row["value_last"]) == (10.0 - 6.0, 4.0)


def test_cumulative_point_after_a_gap_longer_than_lookback_is_unknown() -> None:
    old = -86_400.0  # the series started a day ago: no point counts whole without a previous point
    points = [
        cumulative_sum(0, 100.0, start=old),  # no previous point, old start: unknown
        cumulative_sum(30, 110.0, start=old),  # +10
        cumulative_sum(30 + 3601, 200.0, start=old),  # previous 3601 s older: unknown
    ]
    rows = by_bucket(client_rows(points, "1m"))
    first, late = rows[at(0)], rows[at(3600)]
    assert (first["points"], first["unknown_deltas"], first["value_sum"], first["value_count"]) == (
        2,
        1,
        10.0,
        1,
    )
    assert first["value_last"] == 110.0
    assert (late["points"], late["unknown_deltas"], late["value_sum"], late["value_count"]) == (1, 1, None, 0)
    assert late["value_last"] == 200.0  # unknown points still give the last value
    assert late["first_time"] == late["last_time"] == at(3631)


def test_previous_point_exactly_lookback_older_still_counts() -> None:
    old = -86_400.0
    points = [cumulative_sum(0, 1.0, start=old), cumulative_sum(60, 3.0, start=old)]
    rows = by_bucket(client_rows(points, "1m", lookback_s=60))
    assert (rows[at(60)]["value_sum"], rows[at(60)]["unknown_deltas"]) == (2.0, 0)
    rows = by_bucket(client_rows(points, "1m", lookback_s=59))
    assert (rows[at(60)]["value_sum"], rows[at(60)]["unknown_deltas"]) == (None, 1)


def test_fresh_series_with_recent_start_time_counts_whole() -> None:
    points = [cumulative_sum(0, 7.0, start=-600)]
    assert only(client_rows(points, "1m"))["value_sum"] == 7.0  # started 10 min before: within 1 h
    late = only(client_rows(points, "1m", lookback_s=300))  # ... but not within 5 min
    assert (late["value_sum"], late["unknown_deltas"], late["value_last"]) == (None, 1, 7.0)
    no_start = only(client_rows([cumulative_sum(0, 7.0, start=None)], "1m"))
    assert (no_start["value_sum"], no_start["unknown_deltas"]) == (None, 1)


def test_previous_point_may_lie_in_an_earlier_bucket() -> None:
    points = [cumulative_sum(50, 10.0), cumulative_sum(70, 12.5)]
    rows = by_bucket(client_rows(points, "1m"))
    assert (rows[at(0)]["value_sum"], rows[at(60)]["value_sum"]) == (10.0, 2.5)


def test_series_are_separate_by_attributes() -> None:
    points = [
        cumulative_sum(0, 10.0, attributes_key="a"),
        cumulative_sum(10, 50.0, attributes_key="b"),
        cumulative_sum(20, 11.0, attributes_key="a"),
    ]
    rows = {row["attributes_key"]: row for row in client_rows(points, "1m")}
    assert (rows["a"]["value_sum"], rows["b"]["value_sum"]) == (11.0, 50.0)


# ---------------------------------------------------------------------------------------------------
# gauges


def test_gauge_last_min_max_and_average() -> None:
    points = [
        point(40, metric_kind="gauge", temporality=None, value=1.0),
        point(0, metric_kind="gauge", temporality=None, value=3.0),
        point(20, metric_kind="gauge", temporality=None, value=5.0),
    ]
    row = only(client_rows(points, "1m"))
    assert (row["value_sum"], row["value_count"]) == (9.0, 3)  # avg 3
    assert (row["value_min"], row["value_max"], row["value_last"]) == (1.0, 5.0, 1.0)
    assert (row["unknown_deltas"], row["count"], row["quantiles"]) == (0, None, None)


# ---------------------------------------------------------------------------------------------------
# histograms


def histogram(seconds: float, bounds: list[float], counts: list[int], **columns: Any) -> dict[str, Any]:
    return point(
        seconds,
        metric_kind="histogram",
        is_monotonic=None,
        explicit_bounds=bounds,
        bucket_counts=counts,
        count=sum(counts),
        **columns,
    )


def test_delta_histograms_add_bucket_by_bucket_with_separate_rows_per_bounds() -> None:
    points = [
        histogram(0, [1.0, 2.0], [1, 2, 3], sum=10.0, min=0.5, max=4.0),
        histogram(10, [1.0, 2.0], [0, 1, 1], sum=3.0, min=1.5, max=2.5),
        histogram(20, [5.0], [4, 0], sum=8.0, min=1.0, max=2.0),
    ]
    rows = {tuple(row["explicit_bounds"]): row for row in client_rows(points, "1m")}
    assert set(rows) == {(1.0, 2.0), (5.0,)}
    both = rows[(1.0, 2.0)]
    assert (both["points"], both["count"], both["sum"], both["bucket_counts"]) == (2, 8, 13.0, [1, 3, 4])
    assert (both["min"], both["max"]) == (0.5, 4.0)
    assert (both["value_sum"], both["value_count"], both["value_last"]) == (None, 0, None)
    other = rows[(5.0,)]
    assert (other["points"], other["count"], other["sum"], other["bucket_counts"]) == (1, 4, 8.0, [4, 0])


def test_cumulative_histogram_becomes_increases_without_min_max() -> None:
    start = at(-30)
    points = [
        histogram(
            0, [1.0, 2.0], [1, 1, 0], sum=3.0, min=0.1, max=1.5, temporality="cumulative", start_time=start
        ),
        histogram(
            30, [1.0, 2.0], [2, 3, 1], sum=10.0, min=0.1, max=2.5, temporality="cumulative", start_time=start
        ),
    ]
    row = only(client_rows(points, "1m"))
    # whole [1, 1, 0] (fresh) + increase [1, 2, 1]
    assert (row["count"], row["sum"], row["bucket_counts"]) == (6, 10.0, [2, 3, 1])
    assert (row["min"], row["max"], row["unknown_deltas"]) == (None, None, 0)


def test_cumulative_histogram_with_changed_bounds_or_lower_count_counts_whole() -> None:
    start = at(-30)
    points = [
        histogram(0, [1.0], [1, 1], sum=2.0, temporality="cumulative", start_time=start),
        histogram(10, [1.0, 2.0], [1, 1, 1], sum=4.0, temporality="cumulative", start_time=start),  # bounds
        histogram(
            20, [1.0, 2.0], [0, 1, 1], sum=3.0, temporality="cumulative", start_time=start
        ),  # count 2 < 3
    ]
    rows = {tuple(row["explicit_bounds"]): row for row in client_rows(points, "1m")}
    assert (rows[(1.0,)]["count"], rows[(1.0,)]["bucket_counts"]) == (2, [1, 1])
    # whole [1, 1, 1] + whole [0, 1, 1]
    assert (rows[(1.0, 2.0)]["count"], rows[(1.0, 2.0)]["sum"], rows[(1.0, 2.0)]["bucket_counts"]) == (
        5,
        7.0,
        [1, 2, 2],
    )


def test_histogram_row_with_only_unknown_points_has_null_measures() -> None:
    points = [histogram(0, [1.0], [1, 1], sum=2.0, temporality="cumulative", start_time=at(-86_400))]
    row = only(client_rows(points, "1m"))
    assert (row["points"], row["unknown_deltas"], row["count"], row["sum"], row["bucket_counts"]) == (
        1,
        1,
        None,
        None,
        None,
    )


# ---------------------------------------------------------------------------------------------------
# exponential histograms


def exponential(
    seconds: float,
    scale: int,
    positive: tuple[int, list[int]],
    negative: tuple[int, list[int]],
    zero_count: int,
    **columns: Any,
) -> dict[str, Any]:
    return point(
        seconds,
        metric_kind="exponential_histogram",
        is_monotonic=None,
        scale=scale,
        zero_count=zero_count,
        zero_threshold=0.0,
        positive_offset=positive[0],
        positive_bucket_counts=positive[1],
        negative_offset=negative[0],
        negative_bucket_counts=negative[1],
        count=zero_count + sum(positive[1]) + sum(negative[1]),
        **columns,
    )


# scale 3: positive indexes -3..0, negative indexes 5, 6
SCALE_3 = exponential(0, 3, (-3, [1, 2, 3, 4]), (5, [1, 1]), 1, sum=1.0, min=-3.0, max=9.0)
# scale 2: positive index 2, no negative buckets
SCALE_2 = exponential(30, 2, (2, [5]), (0, []), 2, sum=2.0, min=-1.0, max=12.0)


def test_exponential_histograms_merge_at_the_smallest_scale() -> None:
    row = only(client_rows([SCALE_3, SCALE_2], "1m"))
    assert row["scale"] == 2
    # scale 3 -> 2 halves indexes, rounding down: -3 -> -2, -2 -> -1, -1 -> -1, 0 -> 0;
    # so -2: 1, -1: 2 + 3, 0: 4, then index 2: 5 from the scale-2 point, index 1 empty
    assert (row["positive_offset"], row["positive_bucket_counts"]) == (-2, [1, 5, 4, 0, 5])
    # 5 -> 2, 6 -> 3; the scale-2 point has none
    assert (row["negative_offset"], row["negative_bucket_counts"]) == (2, [1, 1])
    assert (row["zero_count"], row["count"], row["sum"]) == (3, 13 + 7, 3.0)
    assert (row["min"], row["max"], row["bucket_counts"]) == (-3.0, 12.0, None)


def test_exponential_histograms_with_no_buckets_merge_to_offset_zero_and_empty_arrays() -> None:
    points = [exponential(0, 1, (4, []), (-2, []), 3), exponential(10, 0, (7, []), (1, []), 1)]
    row = only(client_rows(points, "1m"))
    assert (row["scale"], row["zero_count"], row["count"]) == (0, 4, 4)
    assert (row["positive_offset"], row["positive_bucket_counts"]) == (0, [])
    assert (row["negative_offset"], row["negative_bucket_counts"]) == (0, [])


def test_cumulative_exponential_histogram_subtracts_only_with_the_same_scale_and_offsets() -> None:
    start = at(-30)
    points = [
        exponential(
            0, 1, (0, [1, 1]), (0, []), 0, temporality="cumulative", start_time=start
        ),  # fresh: whole
        exponential(
            10, 1, (0, [2, 3]), (0, []), 1, temporality="cumulative", start_time=start
        ),  # +[1, 2], +1
        exponential(
            20, 0, (0, [6]), (0, []), 1, temporality="cumulative", start_time=start
        ),  # rescaled: unknown
        exponential(30, 0, (0, [7]), (0, []), 2, temporality="cumulative", start_time=start),  # +[1], +1
    ]
    row = only(client_rows(points, "1m"))
    assert (row["points"], row["unknown_deltas"]) == (4, 1)
    # at scale 0: whole [1, 1] -> index 0: 2; increase [1, 2] -> index 0: 3; increase [1] at scale 0
    assert (row["scale"], row["positive_offset"], row["positive_bucket_counts"]) == (0, 0, [6])
    assert (row["count"], row["zero_count"]) == (2 + 4 + 2, 0 + 1 + 1)
    assert (row["negative_offset"], row["negative_bucket_counts"]) == (0, [])
    assert (row["min"], row["max"]) == (None, None)


def test_cumulative_exponential_histogram_with_a_shifted_offset_is_unknown() -> None:
    start = at(-30)
    points = [
        exponential(0, 1, (0, [1, 1]), (0, []), 0, temporality="cumulative", start_time=start),
        exponential(10, 1, (-1, [1, 1, 1]), (0, []), 0, temporality="cumulative", start_time=start),
    ]
    row = only(client_rows(points, "1m"))
    assert (row["unknown_deltas"], row["count"], row["positive_offset"], row["positive_bucket_counts"]) == (
        1,
        2,
        0,
        [1, 1],
    )


def test_exponential_histogram_row_with_only_unknown_points_has_null_buckets() -> None:
    points = [exponential(0, 1, (0, [1]), (0, [1]), 0, temporality="cumulative", start_time=at(-86_400))]
    row = only(client_rows(points, "1m"))
    assert (row["points"], row["unknown_deltas"]) == (1, 1)
    nulls = ("count", "sum", "scale", "zero_count", "positive_offset", "positive_bucket_counts")
    assert all(row[name] is None for name in (*nulls, "negative_offset", "negative_bucket_counts"))


# ---------------------------------------------------------------------------------------------------
# summaries


def quantiles(median: float) -> list[dict[str, float]]:
    return [{"quantile": 0.5, "value": median}, {"quantile": 0.99, "value": median * 2}]


def summary(seconds: float, count: int, total: float, median: float, start: float = -30.0) -> dict[str, Any]:
    return point(
        seconds,
        metric_kind="summary",
        temporality=None,  # summaries are cumulative whatever their temporality says
        is_monotonic=None,
        count=count,
        sum=total,
        quantiles=quantiles(median),
        start_time=at(start),
    )


def test_summary_counts_increase_and_keeps_the_last_quantiles() -> None:
    points = [
        summary(0, 10, 100.0, 1.0),  # fresh: whole
        summary(30, 15, 160.0, 2.0),  # +5, +60
        summary(60, 3, 20.0, 3.0),  # lower count: restart, whole
        summary(70, 5, 30.0, 4.0),  # +2, +10
    ]
    rows = by_bucket(client_rows(points, "1m"))
    assert (rows[at(0)]["count"], rows[at(0)]["sum"], rows[at(0)]["quantiles"]) == (15, 160.0, quantiles(2.0))
    assert (rows[at(60)]["count"], rows[at(60)]["sum"], rows[at(60)]["quantiles"]) == (
        5,
        30.0,
        quantiles(4.0),
    )
    assert all(row["min"] is None and row["max"] is None for row in rows.values())


def test_summary_quantiles_come_from_the_latest_point_even_when_unknown() -> None:
    points = [summary(0, 10, 100.0, 1.0), summary(30 + 3601, 15, 160.0, 2.0, start=-86_400)]
    late = by_bucket(client_rows(points, "1m"))[at(3600)]
    assert (late["unknown_deltas"], late["count"], late["quantiles"]) == (1, None, quantiles(2.0))


# ---------------------------------------------------------------------------------------------------
# 1-hour rows


def test_hour_rows_come_straight_from_points() -> None:
    points = [
        cumulative_sum(0, 10.0),  # whole 10
        cumulative_sum(1200, 15.0),  # +5
        cumulative_sum(3599, 20.0),  # +5
        cumulative_sum(3900, 22.0),  # +2, next hour
        point(100, metric_kind="gauge", temporality=None, value=4.0, metric_name="g"),
        point(3000, metric_kind="gauge", temporality=None, value=2.0, metric_name="g"),
    ]
    rows = {(row["metric_name"], row["bucket_start"]): row for row in client_rows(points, "1h")}
    ten, eleven, gauge = rows[("m", T0)], rows[("m", at(3600))], rows[("g", T0)]
    assert set(rows) == {("m", T0), ("m", at(3600)), ("g", T0)}
    assert (ten["points"], ten["value_sum"], ten["value_count"], ten["value_last"]) == (3, 20.0, 3, 20.0)
    assert (ten["first_time"], ten["last_time"]) == (at(0), at(3599))
    assert (eleven["points"], eleven["value_sum"], eleven["value_last"]) == (1, 2.0, 22.0)
    assert (gauge["value_sum"], gauge["value_count"], gauge["value_min"], gauge["value_max"]) == (
        6.0,
        2,
        2.0,
        4.0,
    )
    assert gauge["value_last"] == 2.0
    assert ten["bucket_date"] == eleven["bucket_date"] == "2026-01-05"
    assert "bucket_hour" not in ten


def test_hour_rows_add_up_the_minute_rows() -> None:
    points = [cumulative_sum(s, float(s * s)) for s in range(0, 3600, 170)]
    points += [SCALE_3, SCALE_2, exponential(400, 1, (-5, [1, 0, 2]), (-1, [3]), 0)]
    minutes = client_rows(points, "1m")
    hour = {row["metric_kind"]: row for row in client_rows(points, "1h")}
    sums = [row for row in minutes if row["metric_kind"] == "sum"]
    assert hour["sum"]["value_sum"] == sum(row["value_sum"] for row in sums)
    assert hour["sum"]["points"] == sum(row["points"] for row in sums) == len(range(0, 3600, 170))
    exp = hour["exponential_histogram"]
    # scale 1 is the smallest: scale 3 index -3..0 -> -1, -1, -1, 0; scale 2 index 2 -> 1; scale 1 as is
    assert exp["scale"] == 1
    assert (exp["positive_offset"], exp["positive_bucket_counts"]) == (-5, [1, 0, 2, 0, 6, 4, 5])
    # negative: scale 3 indexes 5, 6 -> 1, 1; scale 1 index -1
    assert (exp["negative_offset"], exp["negative_bucket_counts"]) == (-1, [3, 0, 2])


# ---------------------------------------------------------------------------------------------------
# entity rows


def test_entity_rows_merge_the_clients_of_a_quota_entity() -> None:
    bob = "client-id=app,user=bob"
    points = [
        cumulative_sum(0, 10.0, client_instance_id="c1"),  # whole 10
        cumulative_sum(50, 14.0, client_instance_id="c1", metric_unit="By"),  # +4, the latest point
        cumulative_sum(10, 5.0, client_instance_id="c2"),  # whole 5
        cumulative_sum(40, 99.0, client_instance_id="c2", attributes_key="x", start=-86_400),  # unknown
        cumulative_sum(30, 1.0, client_instance_id="c3", quota_entity=bob),
    ]
    rows = {row["quota_entity"]: row for row in entity_rows(points, "1m")}
    assert set(rows) == {ALICE, bob}
    alice = rows[ALICE]
    assert (alice["bucket_start"], alice["metric_name"], alice["metric_kind"]) == (T0, "m", "sum")
    assert (alice["clients"], alice["points"], alice["unknown_deltas"]) == (2, 4, 1)
    assert (alice["value_sum"], alice["value_count"]) == (19.0, 3)
    assert (alice["value_last"], alice["metric_unit"]) == (14.0, "By")  # the latest point's
    assert (alice["first_time"], alice["last_time"]) == (at(0), at(50))
    assert alice["bucket_hour"] == "2026-01-05T10"
    assert (rows[bob]["clients"], rows[bob]["value_sum"]) == (1, 1.0)


def test_entity_rows_merge_exponential_histograms_of_two_clients_at_the_smallest_scale() -> None:
    points = [SCALE_3, {**SCALE_2, "client_instance_id": "c2"}]
    row = only(entity_rows(points, "1h"))
    assert (row["clients"], row["scale"], row["zero_count"], row["count"]) == (2, 2, 3, 20)
    assert (row["positive_offset"], row["positive_bucket_counts"]) == (-2, [1, 5, 4, 0, 5])
    assert (row["negative_offset"], row["negative_bucket_counts"]) == (2, [1, 1])
    assert (row["min"], row["max"], row["bucket_date"]) == (-3.0, 12.0, "2026-01-05")


def test_entity_rows_are_per_bounds_and_follow_each_client_rows_latest_quota_entity() -> None:
    bob = "client-id=app,user=bob"
    points = [
        histogram(0, [1.0], [1, 0], client_instance_id="c1", sum=0.5),
        histogram(10, [1.0], [0, 2], client_instance_id="c2", sum=4.0),
        histogram(20, [2.0], [3, 0], client_instance_id="c2", sum=3.0),
        # c3 moves from bob to alice within the minute: its whole row goes to alice
        histogram(5, [1.0], [1, 1], client_instance_id="c3", sum=2.0, quota_entity=bob),
        histogram(15, [1.0], [1, 0], client_instance_id="c3", sum=0.5),
        # no quota entity: no entity row
        histogram(25, [1.0], [5, 5], client_instance_id="c4", sum=9.0, quota_entity=None),
    ]
    rows = {(row["quota_entity"], tuple(row["explicit_bounds"])): row for row in entity_rows(points, "1m")}
    assert set(rows) == {(ALICE, (1.0,)), (ALICE, (2.0,))}
    one = rows[(ALICE, (1.0,))]
    assert (one["clients"], one["points"], one["count"], one["sum"], one["bucket_counts"]) == (
        3,
        4,
        6,
        7.0,
        [3, 3],
    )
    two = rows[(ALICE, (2.0,))]
    assert (two["clients"], two["count"], two["bucket_counts"]) == (1, 3, [3, 0])
