"""The decode job (``spark_jobs.jobs.decode``) on a real local Spark with poison pushes in bronze (F14):
the run succeeds and advances, the good pushes' points land in silver and each poison push lands in
``decode_quarantine`` with the bound it went over."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from exporters import TelemetryPush
from spark_jobs.jobs import decode as decode_job
from spark_jobs.jobs.decode import DECODE_APP
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.lake import DeltaLake
from spark_jobs.transforms.decode import PUSH_BOUNDS
from tests.support.fleet import START_MS, context, kafka_pushes, land

pytestmark = pytest.mark.spark

_TIME_NS = START_MS * 1_000_000


def _wire(number: int, content: bytes) -> bytes:
    """One length-delimited protobuf field."""
    header = bytearray([number << 3 | 2])
    length = len(content)
    while length >= 0x80:
        header.append(length & 0x7F | 0x80)
        length >>= 7
    header.append(length)
    return bytes(header) + content


def _gauge_of(points: int) -> bytes:
    """One gauge of ``points`` points that hold only their time."""
    point = _wire(1, b"\x19" + _TIME_NS.to_bytes(8, "little"))
    return _wire(1, _wire(2, _wire(2, _wire(1, b"g") + _wire(5, point * points))))


def _rows(uri: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(str(uri)).to_pyarrow_table().to_pylist()
    return rows


@pytest.mark.parametrize("one_pass", [True, False], ids=["small batch: one pass", "large batch: two passes"])
def test_a_run_with_poison_pushes_in_bronze_succeeds_advances_and_quarantines_them(
    lake: DeltaLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, one_pass: bool
) -> None:
    """A small batch is decoded once for both tables; a large one (here: over a limit of 0 pushes) is
    decoded into silver, and its pushes without points again for the quarantine. Same tables."""
    if not one_pass:
        monkeypatch.setattr(decode_job, "ONE_PASS_PUSHES", 0)
    good = kafka_pushes(clients=2, pushes=3)
    too_many_points = TelemetryPush(context(7, START_MS + 1), _gauge_of(PUSH_BOUNDS.max_data_points + 1))
    long_client_id = TelemetryPush(
        context(8, START_MS + 2, client_id="x" * 60_000), _gauge_of(50_000)
    )  # 3 GB of rows if each point copied its client id
    land([*good[:3], too_many_points, long_client_id, *good[3:]], str(tmp_path))

    report = run_rollup(lake, str(tmp_path))

    points = _rows(tmp_path / "metric_points")
    assert {r["push_id"] for r in points} == {p.context.push_id for p in good}
    assert report.decode.points == len(points)
    reasons = {r["client_id"]: r["reason"] for r in _rows(tmp_path / "decode_quarantine")}
    assert reasons.keys() == {"client-7", "x" * 60_000}
    assert reasons["client-7"] == "at least 200001 data points over the max_data_points bound (200000)"
    assert "over the max_repeated_bytes bound (1073741824)" in reasons["x" * 60_000]
    assert report.decode.quarantined == 2
    shard = DeltaTable(str(tmp_path / "telemetry_pushes" / "r1")).version()
    for table in ("metric_points", "decode_quarantine"):
        assert DeltaTable(str(tmp_path / table)).transaction_version(f"{DECODE_APP}/r1") == shard
    assert _rows(tmp_path / "rollup_client_1m")

    again = run_rollup(lake, str(tmp_path))  # advanced past them: nothing decoded twice
    assert (again.decode.points, again.decode.quarantined) == (0, 0)


def test_the_lag_is_how_far_silver_is_behind_the_newest_landed_push(lake: DeltaLake, tmp_path: Path) -> None:
    """``lag_s``: 0 once a run has decoded everything; after a push lands, the commit time of the
    newest bronze version less that of the newest decoded (the commit times set at the store, where
    landing puts them)."""
    shard = tmp_path / "telemetry_pushes" / "r1"
    land(kafka_pushes(clients=1, pushes=2), str(tmp_path), replica="r1")
    assert run_rollup(lake, str(tmp_path)).lag_s == 0
    decoded = DeltaTable(str(shard)).version()
    land(kafka_pushes(clients=1, pushes=2, start_ms=START_MS + 60_000), str(tmp_path), replica="r1")
    newest = DeltaTable(str(shard)).version()
    log = shard / "_delta_log"
    at = (log / f"{decoded:020d}.json").stat().st_mtime
    os.utime(log / f"{newest:020d}.json", (at + 90, at + 90))
    assert decode_job.lag_s(lake, str(tmp_path)) == pytest.approx(90, abs=0.01)
    assert run_rollup(lake, str(tmp_path)).lag_s == 0


def test_a_batch_with_nothing_to_quarantine_moves_the_quarantines_watermark_without_a_file(
    lake: DeltaLake, tmp_path: Path
) -> None:
    land(kafka_pushes(clients=2, pushes=2), str(tmp_path), replica="r1")
    report = decode_job.run_decode(lake, str(tmp_path))
    assert (report.quarantined, report.points > 0) == (0, True)
    quarantine = DeltaTable(str(tmp_path / "decode_quarantine"))
    assert quarantine.file_uris() == []
    shard = str(tmp_path / "telemetry_pushes" / "r1")
    latest = DeltaTable(shard).version()
    assert quarantine.transaction_version(f"{DECODE_APP}/r1") == latest
    assert decode_job.decoded_through(lake, str(tmp_path), shard) == latest


def test_the_shards_new_pushes_are_decoded_together_in_one_commit_to_each_table(
    lake: DeltaLake, tmp_path: Path
) -> None:
    replicas = ("r1", "r2", "r3")
    for k, replica in enumerate(replicas):
        land(kafka_pushes(clients=1, pushes=2, seed=k), str(tmp_path), replica=replica)
    run_rollup(lake, str(tmp_path))
    tables = {t: tmp_path / t for t in ("metric_points", "decode_quarantine", "rollup_entity_activity_1m")}
    versions = {t: DeltaTable(str(path)).version() for t, path in tables.items()}
    for k, replica in enumerate(replicas):
        land(
            kafka_pushes(clients=1, pushes=2, start_ms=START_MS + 60_000, seed=k),
            str(tmp_path),
            replica=replica,
        )
    report = run_rollup(lake, str(tmp_path))
    assert sorted(s.shard.rsplit("/", 1)[-1] for s in report.decode.shards) == list(replicas)
    # one commit each, carrying every shard's batch
    assert {t: DeltaTable(str(path)).version() for t, path in tables.items()} == {
        t: v + 1 for t, v in versions.items()
    }
    for replica in replicas:
        shard = tmp_path / "telemetry_pushes" / replica
        latest = DeltaTable(str(shard)).version()
        assert decode_job.decoded_through(lake, str(tmp_path), str(shard)) == latest
        activity = DeltaTable(str(tables["rollup_entity_activity_1m"]))
        assert (
            activity.transaction_version(
                f"telemetry-sink-rollup/rollup_entity_activity_1m/telemetry_pushes/{replica}"
            )
            == latest
        )
    assert report.decode.points == len(_rows(tmp_path / "metric_points")) // 2
