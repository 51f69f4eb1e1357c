"""The decode and rollup jobs end to end on a real local Spark, from bronze landed by the real exporter
(Kafka-client-shaped payloads and the OpenTelemetry SDK's), checked against the pure-Python reference."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from pyspark.sql import SparkSession

from exporters import TelemetryPush
from exporters.delta.schema import kafka_instance_id
from spark_jobs.jobs import rollup as rollup_job
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from spark_jobs.tables import ACTIVITY_TABLES, ROLLUP_TABLES
from spark_jobs.views import NAMESPACE, OPEN_HOURS, register_views
from tests.support.fleet import START_MS, context, kafka_pushes, land, sdk_pushes
from tests.support.gold import assert_gold_matches_reference, assert_same_rows

pytestmark = pytest.mark.spark

HOUR_22 = datetime(2026, 11, 21, 22, tzinfo=UTC)
"""The hour of the fleet's first pushes (``START_MS``, 22:26:40)."""


def _rows(uri: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(uri).to_pyarrow_table().to_pylist()
    return rows


def _versions(root: Path) -> dict[str, int]:
    return {t: DeltaTable(str(root / t)).version() for t in ("metric_points", *ROLLUP_TABLES)}


def _crash_on_writes_to(table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``DeltaLake.write`` to ``table`` dies (until ``monkeypatch.undo()``)."""
    write = DeltaLake.write

    def crashing(self: DeltaLake, frame: Any, uri: str, **kwargs: Any) -> bool:
        if uri.rstrip("/").endswith(table):
            raise OSError("the job died here")
        return write(self, frame, uri, **kwargs)

    monkeypatch.setattr(DeltaLake, "write", crashing)


def _minute_by_minute(
    lake: DeltaLake, root: Path, pushes: list[TelemetryPush], minutes: range, said: list[str] | None = None
) -> None:
    """Land the pushes of each of these minutes from START_MS and roll them up, minute by minute
    (``said``: the last run's progress)."""
    for k in minutes:
        low = START_MS + k * 60_000
        land([p for p in pushes if low <= p.context.received_ms < low + 60_000], str(root))
        if said is not None:
            said.clear()
        run_rollup(lake, str(root), progress=said.append if said is not None else lambda _: None)


def _protobuf_points(pushes: Iterable[TelemetryPush]) -> int:
    total = 0
    for p in pushes:
        for r in MetricsData.FromString(p.payload).resource_metrics:
            for s in r.scope_metrics:
                for m in s.metrics:
                    kind = m.WhichOneof("data")
                    total += len(getattr(m, kind).data_points) if kind else 0
    return total


def test_decode_and_rollup_match_an_independent_computation(lake: DeltaLake, tmp_path: Path) -> None:
    pushes = kafka_pushes() + sdk_pushes()
    land(pushes, str(tmp_path))
    land([TelemetryPush(context(3, START_MS), b"\x0a\xff not otlp")], str(tmp_path), replica="r2")
    report = run_rollup(lake, str(tmp_path))
    assert report.decode.points == _protobuf_points(pushes) == len(_rows(str(tmp_path / "metric_points")))
    assert report.decode.quarantined == 1
    [bad] = _rows(str(tmp_path / "decode_quarantine"))
    assert bad["reason"]
    assert bad["payload"] == b"\x0a\xff not otlp"
    kinds = {r["metric_kind"] for r in _rows(str(tmp_path / "metric_points"))}
    assert kinds == {"sum", "gauge", "histogram", "exponential_histogram", "summary"}
    assert assert_gold_matches_reference(tmp_path) > 100
    entity = _rows(str(tmp_path / "rollup_entity_1m"))  # carol's SDK pushes are of this hour: not closed
    assert {r["quota_entity"] for r in entity} == {f"client-id=,user={u}" for u in ("alice", "bob", "carol")}


def test_a_rerun_commits_nothing_and_new_pushes_are_decoded_once(lake: DeltaLake, tmp_path: Path) -> None:
    first, later = (
        kafka_pushes(clients=2, pushes=6),
        kafka_pushes(clients=2, pushes=6, start_ms=START_MS + 600_000),
    )
    land(first, str(tmp_path))
    run_rollup(lake, str(tmp_path))
    versions = _versions(tmp_path)
    again = run_rollup(lake, str(tmp_path))
    assert (again.decode.points, again.tables) == (0, [])
    assert _versions(tmp_path) == versions
    land(later, str(tmp_path))
    run_rollup(lake, str(tmp_path))
    points = _rows(str(tmp_path / "metric_points"))
    assert len(points) == _protobuf_points(first + later)
    assert len({r["push_id"] for r in points}) == len(first) + len(later)
    assert_gold_matches_reference(tmp_path)


def test_late_data_recomputes_only_the_buckets_it_touches(lake: DeltaLake, tmp_path: Path) -> None:
    day1 = kafka_pushes(clients=2, pushes=4, start_ms=START_MS)
    day2 = kafka_pushes(clients=2, pushes=4, start_ms=START_MS + 2 * 86_400_000)
    land(day1 + day2, str(tmp_path))
    run_rollup(lake, str(tmp_path))
    tables = (*ROLLUP_TABLES, *ACTIVITY_TABLES)
    files = {t: set(DeltaTable(str(tmp_path / t)).file_uris()) for t in tables}
    late = kafka_pushes(clients=1, pushes=1, start_ms=START_MS + 120_000, seed=99)
    land(late, str(tmp_path))
    report = run_rollup(lake, str(tmp_path))
    touched = {t.table: t.partitions for t in report.tables}
    assert all(p.startswith("2026-11-21") for p in touched["rollup_client_1m"])
    # the 1-hour tables recompute only the hours the late minutes are in, not their whole day
    assert touched["rollup_client_1h"] == touched["rollup_entity_1h"] == ["2026-11-21T22"]
    # the activity of the late push's minute alone, from the bronze files that may hold it
    late_minute = datetime.fromtimestamp(late[0].context.received_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M")
    assert touched["rollup_entity_activity_1m"] == [late_minute]
    assert touched["rollup_entity_activity_1h"] == ["2026-11-21T22"]
    for table in tables:  # the other day's files are the very same files
        now = set(DeltaTable(str(tmp_path / table)).file_uris())
        day2_files = {f for f in files[table] if "2026-11-23" in f}
        assert day2_files, table
        assert day2_files <= now, table
    assert_gold_matches_reference(tmp_path)


def test_a_late_point_recomputes_its_minute_and_the_minute_of_the_next_point_of_its_series(
    lake: DeltaLake, tmp_path: Path
) -> None:
    """Client 3 pushes cumulative sums every minute; its third push lands late. Its own minute is
    recomputed, and so is the minute of its fourth push, whose deltas now start from it; no other
    minute of the 1-minute client rows is."""
    pushes = kafka_pushes(clients=4, pushes=6, interval_ms=60_000)
    late = pushes.pop(3 * 6 + 2)
    land(pushes, str(tmp_path))
    run_rollup(lake, str(tmp_path))
    land([late], str(tmp_path))
    said: list[str] = []
    report = run_rollup(lake, str(tmp_path), progress=said.append)
    assert not any("follow every earlier one" in s for s in said), said
    touched = {t.table: t.partitions for t in report.tables}
    late_at = datetime.fromtimestamp(late.context.received_ms / 1000, UTC)
    minutes = [(late_at + timedelta(minutes=k)).strftime("%Y-%m-%dT%H:%M") for k in (0, 1)]
    assert touched["rollup_client_1m"] == minutes
    # the entity minutes follow the client rows written: these minutes, and the others of the files
    # that held them (written again without them)
    assert set(minutes) <= set(touched["rollup_entity_1m"])
    assert_gold_matches_reference(tmp_path)


def test_a_new_minute_finds_previous_points_in_the_recent_files_unless_a_series_is_new(
    lake: DeltaLake, tmp_path: Path
) -> None:
    """Clients pushing every minute: the next minute's deltas start from points of the minutes just
    before (read by their files' statistics); when a client appears, its series may have points
    anywhere in the lookback, which is read for its series alone. Both agree with the reference."""
    pushes = kafka_pushes(clients=4, pushes=8, interval_ms=60_000)
    land([p for p in pushes if p.context.received_ms < START_MS + 6 * 60_000], str(tmp_path))
    run_rollup(lake, str(tmp_path))
    said: list[str] = []
    land(
        [p for p in pushes if START_MS + 6 * 60_000 <= p.context.received_ms < START_MS + 7 * 60_000],
        str(tmp_path),
    )
    run_rollup(lake, str(tmp_path), progress=said.append)
    assert any("previous points from the 120 s before the minutes" in s for s in said), said
    # every new point is later than every earlier one: no later minute is looked for
    assert any("the new points follow every earlier one" in s for s in said), said
    assert_gold_matches_reference(tmp_path)
    said.clear()
    newcomer = kafka_pushes(clients=5, pushes=8, interval_ms=60_000)[4 * 8 + 7]  # client 4, minute 7
    land([p for p in pushes if p.context.received_ms >= START_MS + 7 * 60_000] + [newcomer], str(tmp_path))
    run_rollup(lake, str(tmp_path), progress=said.append)
    assert any("and from the lookback hours for the" in s for s in said), said
    assert_gold_matches_reference(tmp_path)


def test_a_series_without_a_point_in_the_seed_windows_finds_its_previous_point_in_the_lookback(
    lake: DeltaLake, tmp_path: Path
) -> None:
    """A cumulative client pushing every 21 minutes among clients pushing every minute: its new
    point's delta starts from its point 21 minutes before, outside the longest seed window, which only
    its own series are read for; the others' start from the window."""
    fleet = kafka_pushes(clients=4, pushes=22, interval_ms=60_000)
    sparse = kafka_pushes(clients=6, pushes=2, interval_ms=21 * 60_000)[5 * 2 :]  # client 5, cumulative
    last_minute = START_MS + 21 * 60_000
    land([p for p in fleet if p.context.received_ms < last_minute] + sparse[:1], str(tmp_path))
    run_rollup(lake, str(tmp_path))
    said: list[str] = []
    land([p for p in fleet if p.context.received_ms >= last_minute] + sparse[1:], str(tmp_path))
    run_rollup(lake, str(tmp_path), progress=said.append)
    [older] = [s for s in said if "and from the lookback hours for the" in s]
    instance = kafka_instance_id(sparse[1].context.client_instance_id)
    points = [r for r in _rows(str(tmp_path / "metric_points")) if r["client_instance_id"] == instance]
    series = {(r["metric_name"], r["metric_kind"], r["attributes_key"]) for r in points}
    assert f"hours for the {len(series)} series without a point since" in older, (older, len(series))
    assert_gold_matches_reference(tmp_path)


def test_clients_pushing_every_five_minutes_find_previous_points_in_the_longer_window(
    lake: DeltaLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More series without a point in the shorter window than are read for by name (a fleet pushing
    less often than that, here two clients against a bound of 10) are looked for in the longer one."""
    monkeypatch.setattr(rollup_job, "SEED_NAMED_SERIES", 10)
    pushes = kafka_pushes(clients=2, pushes=4, interval_ms=300_000)
    last = START_MS + 3 * 300_000
    land([p for p in pushes if p.context.received_ms < last], str(tmp_path))
    run_rollup(lake, str(tmp_path))
    said: list[str] = []
    land([p for p in pushes if p.context.received_ms >= last], str(tmp_path))
    run_rollup(lake, str(tmp_path), progress=said.append)
    assert any("previous points from the 900 s before the minutes" in s for s in said), said
    assert_gold_matches_reference(tmp_path)


def test_a_crash_between_silver_and_quarantine_is_caught_up_without_duplicates(
    lake: DeltaLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pushes = kafka_pushes(clients=1, pushes=3)
    land([*pushes, TelemetryPush(context(5, START_MS), b"garbage")], str(tmp_path))
    _crash_on_writes_to("decode_quarantine", monkeypatch)
    with pytest.raises(OSError, match="died"):
        run_rollup(lake, str(tmp_path))
    monkeypatch.undo()
    report = run_rollup(lake, str(tmp_path))
    assert report.decode.quarantined == 1
    assert len(_rows(str(tmp_path / "decode_quarantine"))) == 1
    assert len(_rows(str(tmp_path / "metric_points"))) == _protobuf_points(pushes)


def test_lookback_decides_when_a_cumulative_increase_is_unknown(lake: DeltaLake, tmp_path: Path) -> None:
    """Pushes 30 s apart from clients that started a minute before: with a lookback of 10 s no
    cumulative point has a previous one in reach, and only the first push of a series counts whole."""
    land(kafka_pushes(clients=2, pushes=4), str(tmp_path))
    run_rollup(lake, str(tmp_path), lookback_s=10)
    rows = _rows(str(tmp_path / "rollup_client_1h"))
    cumulative = [r for r in rows if r["temporality"] == "cumulative"]
    assert cumulative
    assert all(r["unknown_deltas"] > 0 for r in cumulative)
    assert_gold_matches_reference(tmp_path, lookback_s=10)


def test_gold_tables_are_partitioned_for_their_recompute_unit(lake: DeltaLake, tmp_path: Path) -> None:
    land(kafka_pushes(clients=1, pushes=2), str(tmp_path))
    run_rollup(lake, str(tmp_path))
    expected = {"1m": ["bucket_hour"], "1h": ["bucket_date"]}
    for table in ROLLUP_TABLES:
        assert DeltaTable(str(tmp_path / table)).metadata().partition_columns == expected[table[-2:]]
    schema = pa.schema(DeltaTable(str(tmp_path / "metric_points")).schema().to_arrow())
    assert schema.field("time").type == pa.timestamp("us", tz="UTC")


def test_since_recomputes_every_bucket_from_then_on_without_moving_the_watermark(
    lake: DeltaLake, tmp_path: Path
) -> None:
    land(kafka_pushes(clients=2, pushes=4), str(tmp_path))
    run_rollup(lake, str(tmp_path))
    app = "telemetry-sink-rollup/rollup_client_1m"
    watermark = DeltaTable(str(tmp_path / "rollup_client_1m")).transaction_version(app)
    report = run_rollup(lake, str(tmp_path), since=datetime(2026, 11, 21, tzinfo=UTC))
    assert {t.table for t in report.tables} == {*ROLLUP_TABLES, *ACTIVITY_TABLES}
    assert DeltaTable(str(tmp_path / "rollup_client_1m")).transaction_version(app) == watermark
    assert_gold_matches_reference(tmp_path)


def _hours(root: Path, table: str) -> list[str]:
    return sorted({r["bucket_start"].strftime("%Y-%m-%dT%H") for r in _rows(str(root / table))})


def test_an_hour_is_written_once_closed_and_until_then_its_view_merges_its_minutes(
    spark: SparkSession, lake: DeltaLake, tmp_path: Path
) -> None:
    """Pushes every minute from 21:50 to 22:09, rolled up at 22:15: hour 21 is closed (more than
    CLOSE_AFTER past its end) and written; hour 22 is not, and the 1-hour views show it merged from its
    minutes. A run at 23:05 with nothing new writes hour 22 (closed since), the very rows the views
    showed; a late push into hour 22 then recomputes that hour alone."""
    start = HOUR_22 - timedelta(minutes=10)
    pushes = kafka_pushes(clients=2, pushes=20, interval_ms=60_000, start_ms=int(start.timestamp() * 1000))
    land(pushes, str(tmp_path))
    run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(minutes=15))
    for table in OPEN_HOURS:
        assert _hours(tmp_path, table) == ["2026-11-21T21"], table
    register_views(lake, str(tmp_path))
    shown = {t: spark.sql(f"SELECT * FROM {NAMESPACE}.{t}").toArrow().to_pylist() for t in OPEN_HOURS}
    for table, rows in shown.items():
        assert {r["bucket_start"].hour for r in rows} == {21, 22}, table
    report = run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(hours=1, minutes=5))
    assert {t.table for t in report.tables} == set(OPEN_HOURS)  # nothing new but the closed hour
    for table in OPEN_HOURS:
        assert _hours(tmp_path, table) == ["2026-11-21T21", "2026-11-21T22"], table
        assert_same_rows(shown[table], _rows(str(tmp_path / table)), table)
    assert_gold_matches_reference(tmp_path)
    late_ms = int((HOUR_22 + timedelta(minutes=5, seconds=30)).timestamp() * 1000)
    late = kafka_pushes(clients=1, pushes=1, start_ms=late_ms, seed=99)
    land(late, str(tmp_path))
    report = run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(hours=1, minutes=6))
    touched = {t.table: t.partitions for t in report.tables}
    assert touched["rollup_client_1h"] == touched["rollup_entity_activity_1h"] == ["2026-11-21T22"]
    assert_gold_matches_reference(tmp_path)


def test_the_rows_of_an_open_hour_an_earlier_version_wrote_go_until_the_hour_closes(
    lake: DeltaLake, tmp_path: Path
) -> None:
    """An earlier version of the job wrote the hour in progress every minute (upgrades): the first run
    that finds a 1-hour table holding an open hour removes its rows (the views show it from its
    minutes), and the run that finds it closed writes it."""
    land(kafka_pushes(clients=2, pushes=6, interval_ms=60_000), str(tmp_path))
    run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(hours=2))  # as if written while open
    run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(minutes=40))
    for table in OPEN_HOURS:
        assert _hours(tmp_path, table) == [], table
    run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(hours=1, minutes=2))
    for table in OPEN_HOURS:
        assert _hours(tmp_path, table) == ["2026-11-21T22"], table
    assert_gold_matches_reference(tmp_path)


def test_a_run_that_dies_before_the_1_hour_tables_writes_the_closed_hour_next_time(
    lake: DeltaLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pushes = kafka_pushes(clients=2, pushes=7, interval_ms=60_000)
    land(pushes, str(tmp_path))
    _crash_on_writes_to("rollup_client_1h", monkeypatch)
    with pytest.raises(OSError, match="died"):
        run_rollup(lake, str(tmp_path))
    monkeypatch.undo()
    run_rollup(lake, str(tmp_path))
    assert _hours(tmp_path, "rollup_client_1h") == ["2026-11-21T22"]
    assert_gold_matches_reference(tmp_path)


def test_the_buckets_new_rows_touch_come_from_the_delta_log_or_past_its_limit_from_the_rows(
    lake: DeltaLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    land(kafka_pushes(clients=2, pushes=4, interval_ms=60_000), str(tmp_path))
    run_rollup(lake, str(tmp_path))
    silver = str(tmp_path / "metric_points")
    added = rollup_job._Added(lake, silver, -1, DeltaTable(silver).version())
    minutes = sorted({r["time"].strftime("%Y-%m-%dT%H:%M") for r in _rows(silver)})
    from_log = added.keys("time", "minute")
    # every minute between a file's first and last point: the rows' own, and perhaps some between
    assert set(minutes) <= set(from_log)
    assert (from_log[0], from_log[-1]) == (minutes[0], minutes[-1])
    assert added.keys("time", "hour") == ["2026-11-21T22"]
    monkeypatch.setattr(rollup_job, "STATS_KEYS", 1)
    assert added.keys("time", "minute") == minutes  # more than the limit: read from the rows
