"""The dashboard's named queries over a fixed dataset: the page carries exactly what the ``.sql`` files
answer in Spark SQL, and the answers are right (checked against the landed pushes and samples)."""

from __future__ import annotations

import json
import re
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from pyspark.sql import SparkSession

from spark_jobs.dashboards import Window, build_page
from spark_jobs.dashboards.queries import (
    QUERY_NAMES,
    create_window_views,
    query_text,
    run_queries,
    set_variables,
)
from spark_jobs.lake import DeltaLake
from spark_jobs.transforms.rollup import rollup_schema
from spark_jobs.views import register_views
from subscriptions import kafka_uuid_string
from tests.spark_jobs.dashboards.conftest import HOSTILE, SNAPSHOTS, Dataset
from tests.support.dashboard_page import page_data, records
from tests.support.fleet import START_MS

pytestmark = pytest.mark.spark
LATENCY = "org.apache.kafka.producer.node.request.latency.avg"


@pytest.fixture(scope="module")
def page(spark: SparkSession, dataset: Dataset) -> str:
    html, _ = build_page(spark, DeltaLake(spark), dataset.root, dataset.window)
    return html


def _plain(value: object) -> object:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", value):
        return datetime.fromisoformat(value).isoformat()
    return value


def _points(dataset: Dataset) -> list[tuple[str, str, float, int]]:
    """(client instance, metric, value, time ms) of every gauge point in the decodable pushes."""
    out = []
    for push in dataset.pushes[:-1]:
        for resource in MetricsData.FromString(push.payload).resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.gauge.data_points:
                        value = point.as_double if point.HasField("as_double") else float(point.as_int)
                        instance = kafka_uuid_string(push.context.client_instance_id)
                        out.append((instance, metric.name, value, point.time_unix_nano // 1_000_000))
    return out


def test_the_page_carries_exactly_what_each_sql_file_answers_in_spark_sql(
    spark: SparkSession, dataset: Dataset, page: str
) -> None:
    data = page_data(page)
    assert set(data) == set(QUERY_NAMES)
    views = register_views(DeltaLake(spark), dataset.root)
    set_variables(spark, dataset.window)  # as a spark-sql user: variables.sql, then SET VAR
    create_window_views(spark, views)  # window.sql
    for name in QUERY_NAMES:
        table = spark.sql(query_text(name)).toArrow()
        assert data[name]["columns"] == table.column_names, name
        expected = [[_plain(v) for v in row.values()] for row in table.to_pylist()]
        got = [[_plain(v) for v in row] for row in data[name]["rows"]]
        assert got == expected, name
        assert data[name]["missing"] == []


def test_fleet_totals_count_what_landed(spark: SparkSession, dataset: Dataset, page: str) -> None:
    [totals] = records(page_data(page), "fleet_totals")
    assert totals == {
        "client_instances": 7,  # six clients and the one with the hostile client id
        "quota_entities": 2,
        "pushes": len(dataset.pushes),  # the quarantined one included: it landed
        "payload_bytes": sum(len(p.payload) for p in dataset.pushes),
        "terminating_pushes": 0,
        "error_answers": SNAPSHOTS * (2 + 1),
        "quarantined_pushes": 1,
        "max_throttle_ms": 50.0 * (SNAPSHOTS - 1),
    }


def test_fleet_per_minute_counts_pushes_by_minute_and_clients_by_their_points(
    dataset: Dataset, page: str
) -> None:
    pushes: dict[str, int] = defaultdict(int)
    payload: dict[str, int] = defaultdict(int)
    for push in dataset.pushes:
        minute = datetime.fromtimestamp(push.context.received_ms // 60_000 * 60, UTC)
        pushes[minute.isoformat()] += 1
        payload[minute.isoformat()] += len(push.payload)
    clients: dict[str, set[str]] = defaultdict(set)
    for instance, _, _, time_ms in _points(dataset):
        clients[datetime.fromtimestamp(time_ms // 60_000 * 60, UTC).isoformat()].add(instance)
    every = records(page_data(page), "fleet_per_minute")
    assert len(every) == 60  # every minute of the hour's window, those without activity at zero
    rows = [r for r in every if r["pushes"] or r["client_instances"] or r["error_answers"]]
    assert {_plain(r["bucket_start"]): r["pushes"] for r in rows} == pushes
    assert {_plain(r["bucket_start"]): r["payload_bytes"] for r in rows} == payload
    assert {_plain(r["bucket_start"]): r["client_instances"] for r in rows} == {
        k: len(v) for k, v in clients.items()
    }
    assert sum(r["error_answers"] for r in rows) == SNAPSHOTS * 3


def test_top_clients_rank_a_gauge_by_its_average_over_the_window(dataset: Dataset, page: str) -> None:
    values: dict[str, list[float]] = defaultdict(list)
    for instance, metric, value, _ in _points(dataset):
        if metric == LATENCY:
            values[instance].append(value)
    average = {i: sum(v) / len(v) for i, v in values.items()}
    expected = sorted(average, key=lambda i: (-average[i], i))[: dataset.window.top]
    rows = [r for r in records(page_data(page), "top_clients") if r["metric_name"] == LATENCY]
    assert [r["rank"] for r in rows] == list(range(1, len(expected) + 1))
    assert [r["client_instance_id"] for r in rows] == expected
    assert [r["value"] for r in rows] == pytest.approx([average[i] for i in expected])
    assert {r["measure"] for r in rows} == {"average"}
    assert all(r["points"] == len(values[i]) for r, i in zip(rows, expected, strict=True))


@pytest.mark.parametrize(
    ("hours_before", "minutes_after"),
    [(2, 120), (2, 28), (0, 28)],
    ids=["whole hours around the data", "whole hours then minutes", "minutes only"],
)
def test_windows_over_whole_hours_read_the_hourly_rollup_and_agree_with_the_points(
    spark: SparkSession, dataset: Dataset, hours_before: int, minutes_after: int
) -> None:
    """top_clients, clients and client_metrics read a window's whole hours from rollup_client_1h and the
    minutes around them from rollup_client_1m: the answers are those of the points in the window."""
    hour = datetime.fromtimestamp(START_MS // 3_600_000 * 3600, UTC)
    start = (
        hour - timedelta(hours=hours_before) + (timedelta(minutes=26) if hours_before == 0 else timedelta())
    )
    window = Window(start, hour + timedelta(minutes=minutes_after), top=50)
    views = register_views(DeltaLake(spark), dataset.root)
    results = run_queries(spark, views, window, ("top_clients", "clients", "client_metrics"))
    inside = [
        p
        for p in _points(dataset)
        if window.start.timestamp() * 1000 <= p[3] // 60_000 * 60_000 < window.end.timestamp() * 1000
    ]
    values: dict[str, list[float]] = defaultdict(list)
    for instance, metric, value, _ in inside:
        if metric == LATENCY:
            values[instance].append(value)
    top = [r for r in results["top_clients"].records() if r["metric_name"] == LATENCY]
    assert {r["client_instance_id"]: r["value"] for r in top} == pytest.approx(
        {i: sum(v) / len(v) for i, v in values.items()}
    )
    assert {r["client_instance_id"] for r in results["clients"].records()} == {p[0] for p in inside}
    last_seen = {r["client_instance_id"]: r["last_seen"] for r in results["clients"].records()}
    for client, seen in last_seen.items():
        latest = max(p[3] for p in inside if p[0] == client)
        assert datetime.fromisoformat(str(seen)).timestamp() * 1000 == latest


def test_top_entities_rank_a_gauge_over_all_the_entitys_clients(dataset: Dataset, page: str) -> None:
    users = {
        kafka_uuid_string(push.context.client_instance_id): push.context.principal for push in dataset.pushes
    }
    values: dict[str, list[float]] = defaultdict(list)
    for instance, metric, value, _ in _points(dataset):
        if metric == LATENCY:
            values[f"client-id=,user={users[instance].removeprefix('User:')}"].append(value)
    rows = [r for r in records(page_data(page), "top_entities") if r["metric_name"] == LATENCY]
    expected = sorted(values, key=lambda e: -sum(values[e]) / len(values[e]))
    assert [r["quota_entity"] for r in rows] == expected
    assert [r["value"] for r in rows] == pytest.approx([sum(values[e]) / len(values[e]) for e in expected])


def test_throttling_ranks_entities_and_follows_throttle_time_and_tokens(page: str) -> None:
    data = page_data(page)
    throttled = records(data, "throttled_entities")
    worst = 50.0 * (SNAPSHOTS - 1)
    assert [(r["quota_entity"], r["quota_type"], r["throttle_ms_max"]) for r in throttled] == [
        ("client-id=,user=bob", "Produce", worst),
        ("client-id=,user=alice", "Produce", 10.0),
    ]
    assert throttled[0]["throttle_ms_avg"] == pytest.approx(worst / 2)
    over_time = records(data, "throttle_over_time")
    bob = [r["throttle_ms_max"] for r in over_time if r["quota_entity"] == "client-id=,user=bob"]
    assert max(bob) == worst
    tokens = records(data, "token_levels")
    assert {r["quota_entity"] for r in tokens} == {"client-id=,user=bob"}
    assert min(r["tokens_min"] for r in tokens) == 5.0 - (SNAPSHOTS - 1)


def test_the_drill_down_lists_every_client_instance_and_its_metrics(dataset: Dataset, page: str) -> None:
    data = page_data(page)
    clients = records(data, "clients")
    assert {r["client_instance_id"] for r in clients} == {
        kafka_uuid_string(uuid.UUID(int=i + 1)) for i in (*range(6), 7)
    }
    assert HOSTILE in {r["client_id"] for r in clients}
    seen: dict[str, set[str]] = defaultdict(set)
    for push in dataset.pushes[:-1]:
        for resource in MetricsData.FromString(push.payload).resource_metrics:
            for scope in resource.scope_metrics:
                seen[kafka_uuid_string(push.context.client_instance_id)].update(m.name for m in scope.metrics)
    metrics: dict[str, set[object]] = defaultdict(set)
    for row in records(data, "client_metrics"):
        metrics[str(row["client_instance_id"])].add(row["metric_name"])
    assert metrics == seen
    assert {r["client_instance_id"]: r["metrics"] for r in clients} == {k: len(v) for k, v in seen.items()}


def test_config_history_is_newest_first_and_says_what_changed(page: str) -> None:
    rows = records(page_data(page), "config_history")
    assert [(r["kind"], r["target"], r["change"], r["principal"], r["in_window"]) for r in rows] == [
        ("client_quota", "user=bob", "producer_byte_rate removed", "User:ops", True),
        ("client_quota", "user=bob", "producer_byte_rate = 1024", "User:ops", True),
        (
            "subscription",
            "producers",
            json.dumps({"metrics": ["org.apache.kafka.producer."], "interval.ms": 30000}),
            "User:admin",
            False,
        ),
    ]


def test_a_window_with_no_data_shows_empty_states(spark: SparkSession, dataset: Dataset) -> None:
    later = dataset.window.end + timedelta(days=2)
    html, results = build_page(
        spark, DeltaLake(spark), dataset.root, Window(later, later + timedelta(hours=1))
    )
    assert all(not r.missing for r in results.values())
    # fleet_totals: one row of zeros; fleet_per_minute: every minute, at zero
    assert [n for n, r in results.items() if r.rows] == ["fleet_totals", "fleet_per_minute", "config_history"]
    assert results["fleet_totals"].records()[0]["pushes"] == 0
    assert "Fleet activity per minute: nothing in this window." in html
    assert 'class="chart"' not in html


def test_tables_that_do_not_exist_yet_show_an_empty_state_not_an_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    window = Window.last(timedelta(hours=1), datetime.now(UTC))
    results = run_queries(spark, [], window)
    assert all(not r.rows for r in results.values())
    assert results["top_clients"].missing == ("telemetry.rollup_client_1h", "telemetry.rollup_client_1m")
    html, _ = build_page(spark, DeltaLake(spark), str(tmp_path), window)
    assert "no data yet (telemetry.rollup_entity_1m does not exist; run `telemetry-sink rollup`)" in html
    assert "telemetry.rollup_client_1h, telemetry.rollup_client_1m do not exist" in html


def test_metrics_with_no_number_rank_last_instead_of_failing_the_page(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An idle cumulative histogram (a count increase of 0: a division by zero under ANSI SQL) and a
    gauge with no samples (NaN, which Spark sorts above every number) have no value."""
    start = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)

    def row(instance: int, metric: str, kind: str, **measures: float | None) -> dict[str, object]:
        return {
            "bucket_start": start,
            "client_instance_id": kafka_uuid_string(uuid.UUID(int=instance)),
            "client_id": f"c{instance}",
            "metric_name": metric,
            "metric_kind": kind,
            "metric_unit": "ms",
            "attributes_key": "{}",
            "points": 1,
            "first_time": start,
            "last_time": start,
            "unknown_deltas": 0,
            "bucket_hour": "2026-11-21T10",
            **measures,
        }

    rows = [
        row(1, "idle.histogram", "histogram", count=0, sum=0.0),
        row(2, "latency", "gauge", value_sum=float("nan"), value_count=1, value_max=float("nan")),
        row(3, "latency", "gauge", value_sum=5.0, value_count=1, value_max=5.0),
    ]
    minutes = pa.Table.from_pylist(rows, schema=rollup_schema("client", "1m"))
    write_deltalake(str(tmp_path / "rollup_client_1m"), minutes)
    write_deltalake(str(tmp_path / "rollup_client_1h"), rollup_schema("client", "1h").empty_table())
    views = register_views(DeltaLake(spark), str(tmp_path))
    window = Window(start, start + timedelta(minutes=30))
    results = run_queries(spark, views, window, ("top_clients", "client_metrics"))
    top = {
        (r["metric_name"], r["rank"]): (r["client_id"], r["value"]) for r in results["top_clients"].records()
    }
    assert top == {
        ("idle.histogram", 1): ("c1", None),
        ("latency", 1): ("c3", 5.0),
        ("latency", 2): ("c2", None),
    }
    peaks = {
        (r["client_instance_id"], r["metric_name"]): r["peak"] for r in results["client_metrics"].records()
    }
    assert peaks[(kafka_uuid_string(uuid.UUID(int=2)), "latency")] is None
