"""The quota entities' activity rollups: pushes and bytes from bronze, quarantined pushes, quota
sensors and answers by error code from ``quota_samples``, checked against a plain computation over
the same bronze rows."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from exporters import QuotaSample, TelemetryPush
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from tests.support.fleet import START_MS, context, kafka_pushes, land, land_quota_samples

pytestmark = pytest.mark.spark

ALICE = (("client-id", ""), ("user", "alice"))
BOB = (("client-id", ""), ("user", "bob"))


def _rows(uri: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(str(uri)).to_pyarrow_table().to_pylist()
    return rows


def _minute(when: datetime, width: str) -> datetime:
    bucket = when.replace(second=0, microsecond=0)
    return bucket.replace(minute=0) if width == "1h" else bucket


def _expected(root: Path, width: str) -> dict[tuple[Any, ...], tuple[int, float, float, float, float]]:
    """(bucket, entity, group, metric) -> (samples, sum, min, max, last), from the bronze rows."""
    samples: dict[tuple[Any, ...], list[tuple[datetime, float]]] = defaultdict(list)
    for shard in sorted((root / "telemetry_pushes").iterdir()):
        for push in _rows(shard):
            at = push["received_at"]
            for metric, value in (
                ("pushes", 1.0),
                ("payload_bytes", float(push["payload_bytes"])),
                ("terminating", float(push["terminating"])),
            ):
                samples[_minute(at, width), push["quota_entity"], "telemetry_pushes", metric].append(
                    (at, value)
                )
    for bad in _rows(root / "decode_quarantine"):
        at = bad["received_at"]
        samples[_minute(at, width), bad["quota_entity"], "decode_quarantine", "pushes"].append((at, 1.0))
    for sample in _rows(root / "quota_samples" / "r1"):
        at = sample["sampled_at"]
        key = (_minute(at, width), sample["entity"], sample["group"], sample["metric"])
        samples[key].append((at, sample["value"]))
    out = {}
    for key, values in samples.items():
        numbers = [v for _, v in values]
        out[key] = (len(values), sum(numbers), min(numbers), max(numbers), max(values)[1])
    return out


def test_entity_activity_counts_pushes_bytes_quarantine_sensors_and_answers(
    lake: DeltaLake, tmp_path: Path
) -> None:
    land(kafka_pushes(clients=3, pushes=5), str(tmp_path))
    land([TelemetryPush(context(7, START_MS + 61_000, user="bob"), b"not otlp")], str(tmp_path), replica="r2")
    land_quota_samples(
        [
            (
                START_MS + k * 30_000,
                [
                    QuotaSample("Produce", "throttle-time", ALICE, 10.0 * k),
                    QuotaSample("Produce", "byte-rate", BOB, 1000.0 + k),
                    QuotaSample("Requests", "PushTelemetry/0", ALICE, 3.0),
                    QuotaSample("Requests", "PushTelemetry/89", BOB, float(k)),
                ],
            )
            for k in range(6)
        ],
        str(tmp_path),
    )
    run_rollup(lake, str(tmp_path))
    for width in ("1m", "1h"):
        actual = {
            (r["bucket_start"], r["quota_entity"], r["group"], r["metric"]): (
                r["samples"],
                r["value_sum"],
                r["value_min"],
                r["value_max"],
                r["value_last"],
            )
            for r in _rows(tmp_path / f"rollup_entity_activity_{width}")
        }
        expected = _expected(tmp_path, width)
        assert actual.keys() == expected.keys()
        for key, values in expected.items():
            assert actual[key] == pytest.approx(values), key
    hour = datetime(2026, 11, 21, 22, tzinfo=UTC)
    throttled = [
        r
        for r in _rows(tmp_path / "rollup_entity_activity_1h")
        if (r["bucket_start"], r["group"], r["metric"]) == (hour, "Requests", "PushTelemetry/89")
    ]
    assert [(r["quota_entity"], r["value_sum"]) for r in throttled] == [("client-id=,user=bob", 15.0)]


def test_a_new_replica_shard_is_picked_up_and_recomputes_only_its_hours(
    lake: DeltaLake, tmp_path: Path
) -> None:
    land(kafka_pushes(clients=2, pushes=3), str(tmp_path))
    run_rollup(lake, str(tmp_path))
    before = {
        r["quota_entity"]: r["value_sum"]
        for r in _rows(tmp_path / "rollup_entity_activity_1h")
        if r["metric"] == "pushes" and r["group"] == "telemetry_pushes"
    }
    land([TelemetryPush(context(0, START_MS + 5), b"")], str(tmp_path), replica="r9")  # an empty push
    report = run_rollup(lake, str(tmp_path))
    assert [t.table for t in report.tables if "activity" in t.table] == [
        "rollup_entity_activity_1m",
        "rollup_entity_activity_1h",
    ]
    after = {
        r["quota_entity"]: r["value_sum"]
        for r in _rows(tmp_path / "rollup_entity_activity_1h")
        if r["metric"] == "pushes" and r["group"] == "telemetry_pushes"
    }
    assert after == {**before, "client-id=,user=alice": before["client-id=,user=alice"] + 1}
