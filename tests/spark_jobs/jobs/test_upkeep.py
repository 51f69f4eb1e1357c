"""The rollup's compaction of the bronze shards (``spark_jobs.jobs.upkeep``) on real Delta tables landed
by the real exporter, one commit a batch as a sink lands them: a shard of many small files is compacted
at the run's end, and the decode reads exactly the pushes it had not read, compaction or not; the log
is expired behind what every table has read of the shard."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from exporters import TelemetryPush
from spark_jobs.jobs import upkeep
from spark_jobs.jobs.rollup import run_rollup
from spark_jobs.jobs.upkeep import checkpointed_since, compact_bronze, expire_logs, small_files
from spark_jobs.lake import DeltaLake
from spark_jobs.tables import (
    DERIVED_TABLES,
    METRIC_POINTS,
    QUARANTINE,
    ROLLUP_CLIENT_1M,
    ROLLUP_ENTITY_1M,
    ROLLUP_ENTITY_ACTIVITY_1M,
)
from tests.support.fleet import START_MS, kafka_pushes, land
from tests.support.gold import assert_gold_matches_reference

pytestmark = pytest.mark.spark


def _land_one_commit_each(pushes: list[TelemetryPush], root: Path, batch: int = 2) -> None:
    for k in range(0, len(pushes), batch):
        land(pushes[k : k + batch], str(root))


def _shard(root: Path) -> str:
    return str(root / "telemetry_pushes" / "r1")


def _push_ids(root: Path) -> list[str]:
    points = DeltaTable(str(root / "metric_points")).to_pyarrow_table(columns=["push_id"])
    return [str(push_id) for push_id in points["push_id"].to_pylist()]


def test_a_run_compacts_a_shard_of_many_small_files_and_decodes_every_push_once(
    lake: DeltaLake, tmp_path: Path
) -> None:
    first = kafka_pushes(clients=2, pushes=6)
    later = kafka_pushes(clients=2, pushes=6, start_ms=START_MS + 600_000)
    _land_one_commit_each(first, tmp_path)
    files = len(DeltaTable(_shard(tmp_path)).file_uris())
    assert files >= 6

    report = run_rollup(lake, str(tmp_path), compact_at_files=files)

    [compaction] = report.compactions
    assert (compaction.shard, compaction.small_files, compaction.error) == (_shard(tmp_path), files, None)
    assert (compaction.files_removed, compaction.files_added) == (files, 1)
    assert len(DeltaTable(_shard(tmp_path)).file_uris()) == 1
    assert DeltaTable(_shard(tmp_path)).version() == compaction.version

    # new pushes land, and a compaction (another run's, or maintain's) folds them into one file with
    # the pushes already decoded before the next run reads them
    _land_one_commit_each(later, tmp_path)
    [folded] = compact_bronze(str(tmp_path), at_files=2)
    assert folded.files_added == 1
    again = run_rollup(lake, str(tmp_path), compact_at_files=2)

    assert again.compactions == []  # one file: nothing to do
    ids = _push_ids(tmp_path)
    assert len({*ids}) == len(first) + len(later)
    assert again.decode.points == len(ids) - report.decode.points
    assert_gold_matches_reference(tmp_path)


def test_a_shard_with_fewer_small_files_than_the_threshold_is_left_alone(
    lake: DeltaLake, tmp_path: Path
) -> None:
    _land_one_commit_each(kafka_pushes(clients=2, pushes=3), tmp_path)
    version = DeltaTable(_shard(tmp_path)).version()
    files = small_files(_shard(tmp_path))

    report = run_rollup(lake, str(tmp_path), compact_at_files=files + 1)

    assert report.compactions == []
    assert DeltaTable(_shard(tmp_path)).version() == version


def test_a_failed_compaction_is_reported_and_the_next_run_compacts(
    lake: DeltaLake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _land_one_commit_each(kafka_pushes(clients=2, pushes=4), tmp_path)

    def failing(uri: str, **_: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(upkeep, "maintain", failing)  # the storage fault, where delta-rs would raise it
    failed = run_rollup(lake, str(tmp_path), compact_at_files=2)
    monkeypatch.undo()

    [compaction] = failed.compactions
    assert compaction.error == "No space left on device"
    assert failed.decode.points > 0
    assert_gold_matches_reference(tmp_path)
    [retried] = run_rollup(lake, str(tmp_path), compact_at_files=2).compactions
    assert (retried.error, retried.files_added) == (None, 1)


def _age_log(shard: str, hours: float) -> None:
    """Make every log entry of the shard ``hours`` old (the fake clock: log expiry reads the store's
    modification times)."""
    then = time.time() - hours * 3600
    for entry in (Path(shard) / "_delta_log").iterdir():
        os.utime(entry, (then, then))


def test_a_shards_log_is_expired_only_behind_what_every_table_has_read_of_it(
    lake: DeltaLake, tmp_path: Path
) -> None:
    shard = _shard(tmp_path)
    first = kafka_pushes(clients=2, pushes=4)
    _land_one_commit_each(first, tmp_path)
    [compacted] = run_rollup(lake, str(tmp_path), compact_at_files=2).compactions
    _age_log(shard, 2)  # the shard's log retention is an hour (the sink's setting)

    # a run that does not decode compacts what landed since, but silver has not read the old
    # compaction's commit: the log stays whole
    second = kafka_pushes(clients=2, pushes=4, start_ms=START_MS + 600_000)
    _land_one_commit_each(second, tmp_path)
    [kept] = run_rollup(lake, str(tmp_path), decode=False, compact_at_files=2).compactions
    assert (kept.error, kept.log_expired) == (None, False)
    assert (Path(shard) / "_delta_log" / f"{0:020d}.json").exists()

    # a run that reads it all expires the old entries, and keeps what it read through loadable
    third = kafka_pushes(clients=2, pushes=4, start_ms=START_MS + 1_200_000)
    _land_one_commit_each(third, tmp_path)
    points = len(_push_ids(tmp_path))
    last = run_rollup(lake, str(tmp_path), compact_at_files=2)
    [expired] = last.compactions
    assert (expired.error, expired.log_expired) == (None, True)
    assert not (Path(shard) / "_delta_log" / f"{0:020d}.json").exists()
    assert DeltaTable(shard, version=compacted.version).version() == compacted.version

    ids = _push_ids(tmp_path)
    assert len({*ids}) == len(first) + len(second) + len(third)
    assert last.decode.points == len(ids) - points > 0
    assert_gold_matches_reference(tmp_path)


HOUR_22 = datetime(2026, 11, 21, 22, tzinfo=UTC)
"""The hour of the fleet's first pushes (``START_MS``, 22:26:40)."""


def test_the_logs_of_the_tables_a_run_writes_are_expired_only_behind_what_their_followers_read(
    lake: DeltaLake, tmp_path: Path
) -> None:
    """While hour 22 is open the 1-hour tables read nothing of the 1-minute ones: a run whose tables
    were checkpointed expires the old entries of silver, the quarantine and the 1-minute entity table
    (each read through by what follows it, or followed by nothing), and keeps every entry of the
    1-minute client and activity tables, which the 1-hour ones, once the hour closes, read from the
    start."""
    land(kafka_pushes(clients=2, pushes=4), str(tmp_path))
    run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(minutes=40))
    for table in DERIVED_TABLES:
        if (tmp_path / table).exists():  # the 1-hour tables have nothing yet
            # a checkpoint every commit (delta-rs's default is every 100), and a log two days old
            DeltaTable(str(tmp_path / table)).alter.set_table_properties({"delta.checkpointInterval": "1"})
            _age_log(str(tmp_path / table), 48)

    second = kafka_pushes(clients=2, pushes=4, start_ms=START_MS + 600_000)
    _land_one_commit_each(second, tmp_path)
    report = run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(minutes=50))

    expired = {METRIC_POINTS, QUARANTINE, ROLLUP_ENTITY_1M}
    assert set(report.logs_expired) == {str(tmp_path / table) for table in expired}
    for table in expired:
        assert not (tmp_path / table / "_delta_log" / f"{0:020d}.json").exists(), table
    for table in (ROLLUP_CLIENT_1M, ROLLUP_ENTITY_ACTIVITY_1M):
        assert (tmp_path / table / "_delta_log" / f"{0:020d}.json").exists(), table

    # the hour closes: the 1-hour tables read the 1-minute ones from their first commit
    report = run_rollup(lake, str(tmp_path), now=HOUR_22 + timedelta(hours=1, minutes=5))
    assert {"rollup_client_1h", "rollup_entity_activity_1h"} <= {t.table for t in report.tables}
    assert_gold_matches_reference(tmp_path)


def test_the_tables_checkpointed_from_a_time_on_are_told_by_one_request_each_and_a_missing_one_is_not(
    tmp_path: Path,
) -> None:
    """``checkpointed_since`` names a table whose checkpoint was written from ``since`` (less the clock
    margin) on, not one without a checkpoint, nor one checkpointed earlier, nor a path that is no
    table; ``expire_logs`` expires what it can and leaves a missing table to a later run."""
    rows = pa.table({"n": [1]})
    checkpointed, plain, missing = (str(tmp_path / name) for name in ("checkpointed", "plain", "missing"))
    write_deltalake(checkpointed, rows, configuration={"delta.checkpointInterval": "1"})
    write_deltalake(checkpointed, rows, mode="append")
    write_deltalake(plain, rows)
    now = datetime.now(UTC)
    tables = [checkpointed, plain, missing]
    assert checkpointed_since(tables, now) == [checkpointed]
    assert checkpointed_since(tables, now + timedelta(hours=1)) == []

    version = DeltaTable(checkpointed).version()
    assert expire_logs({missing: 0, checkpointed: version}) == [checkpointed]
