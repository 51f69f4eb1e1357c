"""Compaction, checkpoints and vacuum, also while the sink writes; the retention floor (F12); the bronze
log expired behind its reader."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import helm_python as helm
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import AddAction

from exporters import DeltaLandingExporter, ExportResult, maintain
from exporters.delta.maintenance import (
    EXPIRY_MARGIN,
    MIN_RETENTION_HOURS,
    RetentionTooShortError,
    expire_log,
    log_retention,
    may_expire_log,
)
from telemetry_sink.cli import main
from tests.support.otlp import push
from tests.support.paths import REPO

pytestmark = pytest.mark.integration

CHART = REPO / "helm" / "telemetry-sink"
SCHEMA = pa.schema([("x", pa.int64())])
HOUR_S = 3600


async def _land(table: Path, count: int, writer_id: str = "w") -> None:
    exporter = DeltaLandingExporter(str(table), writer_id=writer_id, max_batch_rows=1)
    await exporter.start()
    for n in range(count):
        assert await exporter.export(push(n, push_id=f"{writer_id}-{n}")) is ExportResult.SUCCESS
    await exporter.shutdown()


def _age(path: Path, hours: float) -> None:
    """Make a file ``hours`` old (the fake clock: vacuum reads the storage's modification time)."""
    then = time.time() - hours * HOUR_S
    os.utime(path, (then, then))


def _table_with_a_file_in_flight(tmp_path: Path) -> tuple[Path, Path]:
    """A table of one row, and a writer's parquet file written beside it but not committed yet."""
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"x": [1]}, schema=SCHEMA))
    in_flight = table / "part-in-flight.parquet"
    pq.write_table(pa.table({"x": [2]}, schema=SCHEMA), in_flight)
    return table, in_flight


def _commit(table: Path, written: Path) -> None:
    """The writer's commit of a file it wrote earlier, as delta-rs makes it."""
    add = AddAction(
        written.name, written.stat().st_size, {}, int(time.time() * 1000), True, '{"numRecords": 1}'
    )
    DeltaTable(str(table)).create_write_transaction([add], mode="append", schema=SCHEMA)


async def test_compaction_and_checkpoint_keep_every_row_and_vacuum_keeps_recent_files(tmp_path: Path) -> None:
    table = tmp_path / "telemetry_pushes"
    await _land(table, 12)
    assert len(DeltaTable(str(table)).file_uris()) == 12
    report = maintain(str(table))
    assert (report.files_removed_by_compaction, report.files_added_by_compaction) == (12, 1)
    assert report.checkpoint_version == report.version_after
    assert report.files_vacuumed == 0  # the compacted-away files were removed less than 168 hours ago
    after = DeltaTable(str(table))
    assert len(after.file_uris()) == 1
    assert sorted(after.to_pyarrow_table().column("push_id").to_pylist()) == sorted(
        f"w-{n}" for n in range(12)
    )
    assert any(p.name.endswith(".checkpoint.parquet") for p in (table / "_delta_log").iterdir())


def test_F12_vacuum_deletes_unreferenced_files_older_than_the_floor_only(tmp_path: Path) -> None:
    table, young = _table_with_a_file_in_flight(tmp_path)
    old = table / "part-of-a-commit-that-failed.parquet"
    pq.write_table(pa.table({"x": [3]}, schema=SCHEMA), old)
    _age(old, MIN_RETENTION_HOURS + 1)
    _age(young, MIN_RETENTION_HOURS - 1)
    report = maintain(str(table), compact=False)
    assert report.files_vacuumed == 1
    assert not old.exists()
    assert young.exists()


@pytest.mark.parametrize("hours", [-1, 0, 1, MIN_RETENTION_HOURS - 1])
def test_F12_a_retention_under_the_floor_is_refused_before_the_table_is_touched(
    tmp_path: Path, hours: int
) -> None:
    table, in_flight = _table_with_a_file_in_flight(tmp_path)
    with pytest.raises(RetentionTooShortError, match=f"the minimum is {MIN_RETENTION_HOURS}"):
        maintain(str(table), retention_hours=hours)
    assert in_flight.exists()
    assert DeltaTable(str(table)).version() == 0  # not even compacted


def test_F12_a_file_written_but_not_committed_survives_maintain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The vacuum_inflight mechanism: a writer has written its file, maintain runs with a small
    retention, then the writer commits. The command refuses, so the commit's file is still there."""
    table, in_flight = _table_with_a_file_in_flight(tmp_path)
    assert (
        main(["maintain", "--data-root", str(tmp_path), "--table-uri", str(table), "--retention-hours", "0"])
        == 2
    )
    assert f"the minimum is {MIN_RETENTION_HOURS}" in capsys.readouterr().err
    assert in_flight.exists()
    assert main(["maintain", "--data-root", str(tmp_path), "--table-uri", str(table)]) == 0  # the floor
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (report["table_uri"], report["files_vacuumed"]) == (str(table), 0)
    _commit(table, in_flight)
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("x").to_pylist()) == [1, 2]


@pytest.mark.parametrize(
    ("hours", "accepted"), [(MIN_RETENTION_HOURS - 1, False), (MIN_RETENTION_HOURS, True)]
)
def test_F12_the_charts_schema_refuses_a_retention_under_the_floor(hours: int, accepted: bool) -> None:
    with helm.Chart.load(str(CHART)) as chart:
        if accepted:
            chart.validate_schema({"maintain": {"retentionHours": hours}})
            return
        with pytest.raises(helm.HelmValuesError, match="at '/maintain/retentionHours'"):
            chart.validate_schema({"maintain": {"retentionHours": hours}})


async def test_maintenance_is_safe_while_the_sink_writes(tmp_path: Path) -> None:
    table = tmp_path / "t"
    await _land(table, 5, "before")
    errors: list[BaseException] = []

    def maintain_repeatedly() -> None:
        try:
            for _ in range(3):
                maintain(str(table))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=maintain_repeatedly)
    thread.start()
    await _land(table, 40, "during")
    await asyncio.to_thread(thread.join)
    assert errors == []
    landed = DeltaTable(str(table)).to_pyarrow_table().column("push_id").to_pylist()
    assert sorted(landed) == sorted([f"before-{n}" for n in range(5)] + [f"during-{n}" for n in range(40)])


def _age_log(table: Path, hours: float) -> None:
    for entry in (table / "_delta_log").iterdir():
        _age(entry, hours)


def _loads(table: Path, version: int) -> bool:
    try:
        return DeltaTable(str(table), version=version).version() == version
    except TableNotFoundError:
        return False


@pytest.mark.parametrize(
    ("text", "retention"),
    [
        (None, timedelta(days=30)),  # Delta's default
        ("interval 1 hours", timedelta(hours=1)),
        ("interval 1 hour", timedelta(hours=1)),
        ("INTERVAL 90 minutes", timedelta(minutes=90)),
        ("2 weeks", timedelta(weeks=2)),
        ("interval 1 month", None),  # not a fixed length: never expired here
        ("soon", None),
    ],
)
def test_the_log_retention_is_read_as_delta_writes_it(text: str | None, retention: timedelta | None) -> None:
    configuration = {} if text is None else {"delta.logRetentionDuration": text}
    assert log_retention(configuration) == retention


@pytest.mark.parametrize(
    ("unread_age", "expires"),
    [
        (None, True),
        (timedelta(minutes=1), True),
        (timedelta(hours=1) - EXPIRY_MARGIN - timedelta(seconds=1), True),
        (timedelta(hours=1) - EXPIRY_MARGIN + timedelta(seconds=1), False),  # within the margin
        (timedelta(hours=2), False),
    ],
)
def test_a_log_is_expired_only_while_the_oldest_unread_commit_is_younger_than_the_retention(
    unread_age: timedelta | None, expires: bool
) -> None:
    now = datetime(2026, 12, 6, 12, tzinfo=UTC)
    first_unread = None if unread_age is None else now - unread_age
    assert may_expire_log(first_unread, timedelta(hours=1), now) is expires


async def test_a_bronze_log_is_expired_behind_its_reader_only(tmp_path: Path) -> None:
    """Twelve commits, compacted and checkpointed, two hours old; then three new ones. A reader that
    has read through the checkpoint lets the old entries go and still loads what it read through; one
    that has read only the first five keeps the log whole."""
    table = tmp_path / "telemetry_pushes"
    await _land(table, 12)
    checkpointed = maintain(str(table), vacuum=False).version_after
    _age_log(table, 2)
    await _land(table, 3, writer_id="later")
    newest = DeltaTable(str(table)).version()

    assert expire_log(str(table), 5) is False
    assert _loads(table, 0)

    assert expire_log(str(table), checkpointed) is True
    assert not _loads(table, 0)
    assert not (table / "_delta_log" / f"{0:020d}.json").exists()
    assert _loads(table, checkpointed)
    assert _loads(table, newest)
    assert len(DeltaTable(str(table)).to_pyarrow_table()) == 15
