"""Compaction, checkpoints and vacuum, also while the sink writes."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable

from exporters import DeltaLandingExporter, ExportResult, maintain
from tests.support.otlp import push

pytestmark = pytest.mark.integration


async def _land(table: Path, count: int, writer_id: str = "w") -> None:
    exporter = DeltaLandingExporter(str(table), writer_id=writer_id, max_batch_rows=1)
    await exporter.start()
    for n in range(count):
        assert await exporter.export(push(n, push_id=f"{writer_id}-{n}")) is ExportResult.SUCCESS
    await exporter.shutdown()


async def test_compaction_checkpoint_and_vacuum_keep_every_row(tmp_path: Path) -> None:
    table = tmp_path / "telemetry_pushes"
    await _land(table, 12)
    assert len(DeltaTable(str(table)).file_uris()) == 12
    report = maintain(str(table), retention_hours=0)
    assert (report.files_removed_by_compaction, report.files_added_by_compaction) == (12, 1)
    assert report.checkpoint_version == report.version_after
    assert report.files_vacuumed == 12  # the compacted-away files, with zero retention
    after = DeltaTable(str(table))
    assert len(after.file_uris()) == 1
    assert sorted(after.to_pyarrow_table().column("push_id").to_pylist()) == sorted(
        f"w-{n}" for n in range(12)
    )
    assert any(p.name.endswith(".checkpoint.parquet") for p in (table / "_delta_log").iterdir())


async def test_default_retention_keeps_recent_files(tmp_path: Path) -> None:
    table = tmp_path / "t"
    await _land(table, 3)
    report = maintain(str(table))
    assert report.files_vacuumed == 0  # replaced files are younger than 168 hours


def test_negative_retention_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retention_hours"):
        maintain(str(tmp_path), retention_hours=-1)


async def test_maintenance_is_safe_while_the_sink_writes(tmp_path: Path) -> None:
    table = tmp_path / "t"
    await _land(table, 5, "before")
    errors: list[BaseException] = []

    def maintain_repeatedly() -> None:
        try:
            for _ in range(3):  # a retention longer than any commit takes (see docs/exporters.md)
                maintain(str(table), retention_hours=1)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    thread = threading.Thread(target=maintain_repeatedly)
    thread.start()
    await _land(table, 40, "during")
    await asyncio.to_thread(thread.join)
    assert errors == []
    landed = DeltaTable(str(table)).to_pyarrow_table().column("push_id").to_pylist()
    assert sorted(landed) == sorted([f"before-{n}" for n in range(5)] + [f"during-{n}" for n in range(40)])
