"""Regression tests for an independent review of the Delta landing exporter."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import exporters.delta.landing as landing_module
from exporters import DeltaLandingExporter, ExportResult, PushContext, TelemetryPush, maintain
from exporters.delta.appender import sync_local_table
from tests.support.clock import T0
from tests.support.otlp import push
from tests.support.paths import REPO
from tests.support.storage_faults import read_faults

pytestmark = pytest.mark.integration


def _ids(table: str) -> list[str]:
    ids: list[str] = DeltaTable(table).to_pyarrow_table(columns=["push_id"]).column("push_id").to_pylist()
    return ids


async def test_a_cancelled_push_does_not_cancel_its_batch_mates(tmp_path: Path) -> None:
    exporter = DeltaLandingExporter(str(tmp_path / "t"), max_batch_latency_ms=60_000)
    await exporter.start()
    gone = asyncio.create_task(exporter.export(push(1)))
    stays = asyncio.create_task(exporter.export(push(2)))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert await exporter.force_flush()
    assert await stays is ExportResult.SUCCESS
    await exporter.shutdown()
    assert len(_ids(exporter.table_uri)) == 2  # the cancelled caller's push was still landed


async def test_F6_a_restart_on_flaky_storage_never_acknowledges_an_unwritten_push(tmp_path: Path) -> None:
    """The same replica id restarts while storage is flaky: its first two reads of the table fail (the
    start-up read the old code made, or the claim's first attempt, then the first batch's). A retry
    finding the previous run's later ``txn`` must not take it for its own: every acknowledged push is
    in the table."""
    table = str(tmp_path / "t")
    first = DeltaLandingExporter(table, writer_id="pod-0", max_batch_rows=1)
    await first.start()
    for n in range(3):
        assert await first.export(push(n)) is ExportResult.SUCCESS
    await first.shutdown()
    with read_faults(2):
        second = DeltaLandingExporter(table, writer_id="pod-0", max_batch_rows=1, retry_backoff_ms=1)
        await second.start()
        pushes = [push(10 + n) for n in range(4)]
        assert [await second.export(p) for p in pushes] == [ExportResult.SUCCESS] * 4
        await second.shutdown()
    assert set(_ids(table)) >= {p.context.push_id for p in pushes}
    assert len(_ids(table)) == 7


async def test_shutdown_under_steady_load_finishes_and_refuses_new_pushes(tmp_path: Path) -> None:
    exporter = DeltaLandingExporter(str(tmp_path / "t"), max_batch_rows=20)
    await exporter.start()
    stop = False
    results: list[ExportResult] = []

    async def client(k: int) -> None:
        n = 0
        while not stop:
            results.append(await exporter.export(push(k * 100_000 + n)))
            n += 1
            await asyncio.sleep(0)  # as a connection reading its next request would

    clients = [asyncio.create_task(client(k)) for k in range(20)]
    while len(results) < 100:  # under load
        await asyncio.sleep(0)
    await asyncio.wait_for(exporter.shutdown(), 30)
    stop = True
    await asyncio.gather(*clients)
    assert ExportResult.RETRYABLE in results  # pushes after shutdown began are refused
    assert results.count(ExportResult.SUCCESS) == len(_ids(exporter.table_uri))


async def test_each_batch_keeps_its_own_latency_clock(tmp_path: Path) -> None:
    exporter = DeltaLandingExporter(str(tmp_path / "t"), max_batch_rows=2, max_batch_latency_ms=60_000)
    await exporter.start()
    tasks = [asyncio.create_task(exporter.export(push(n))) for n in range(2)]
    await asyncio.sleep(0)
    before = time.monotonic()
    tasks.append(asyncio.create_task(exporter.export(push(9))))
    await asyncio.sleep(0)
    queued = exporter._batches[-1].first_at
    assert queued >= before
    await asyncio.gather(*tasks[:2])  # the full batch is committed...
    assert exporter._batches[0].first_at == queued  # ...without restarting the next one's clock
    await exporter.shutdown()


async def test_the_queue_is_bounded(tmp_path: Path) -> None:
    exporter = DeltaLandingExporter(str(tmp_path / "t"), max_pending_bytes=2500, max_batch_latency_ms=60_000)
    await exporter.start()
    first = asyncio.create_task(exporter.export(push(1, payload=b"x" * 2000)))
    await asyncio.sleep(0)
    assert await exporter.export(push(2, payload=b"x" * 1000)) is ExportResult.RETRYABLE  # overloaded
    await exporter.shutdown()
    assert await first is ExportResult.SUCCESS


def test_creating_one_table_from_four_processes_gives_one_table(tmp_path: Path) -> None:
    table = tmp_path / "t"
    script = (
        "import asyncio, sys\n"
        "from exporters import DeltaLandingExporter\n"
        "from tests.support.otlp import push\n"
        "async def main():\n"
        "    e = DeltaLandingExporter(sys.argv[1], max_batch_rows=1)\n"
        "    await e.start(); print(await e.export(push())); await e.shutdown()\n"
        "asyncio.run(main())\n"
    )
    repo = REPO
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(table)], cwd=repo, stdout=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    assert [p.communicate(timeout=120)[0].strip() for p in procs] == ["ExportResult.SUCCESS"] * 4
    metadata = [
        json.loads(line)["metaData"]["id"]
        for entry in sorted((table / "_delta_log").glob("*.json"))
        for line in entry.read_text().splitlines()
        if "metaData" in line
    ]
    assert len(metadata) == 1
    assert len(_ids(str(table))) == 4


async def test_pushes_are_acknowledged_only_after_the_file_system_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    exporter = DeltaLandingExporter(str(tmp_path / "t"), max_batch_rows=1)

    def recording_sync(uri: str) -> None:  # observes a syscall's order, which we cannot otherwise
        sync_local_table(uri)
        order.append("synced")

    monkeypatch.setattr(landing_module, "sync_local_table", recording_sync)
    await exporter.start()
    assert await exporter.export(push()) is ExportResult.SUCCESS
    order.append("acknowledged")
    await exporter.shutdown()
    assert order == ["synced", "acknowledged"]
    sync_local_table("s3://bucket/table")  # object stores need no sync


def test_bad_context_values_are_refused_when_the_push_is_made() -> None:
    with pytest.raises(ValueError, match="client_source_port 70000 is not a port; compression_type"):
        PushContext(push().context.client_instance_id, 1, T0, client_source_port=70000, compression_type=300)
    with pytest.raises(ValueError, match="int32"):
        TelemetryPush(PushContext(push().context.client_instance_id, 2**31, T0), b"")


async def test_full_vacuum_removes_files_no_commit_referenced(tmp_path: Path) -> None:
    table = tmp_path / "t"
    exporter = DeltaLandingExporter(str(table), max_batch_rows=1)
    await exporter.start()
    await exporter.export(push())
    await exporter.shutdown()
    orphan = table / "date=2023-11-14" / "part-orphan-of-a-failed-commit.parquet"
    pq.write_table(pa.table({"x": [1]}), orphan)
    week_ago = time.time() - 169 * 3600  # older than the retention floor (168 hours)
    os.utime(orphan, (week_ago, week_ago))
    report = maintain(str(table))
    assert report.files_vacuumed >= 1
    assert not orphan.exists()
    assert len(_ids(str(table))) == 1
