"""A trusted forwarder's numbered batches in the Delta landing exporter, against real Delta tables: each
committed whole with its forwarder's ``txn``, and a batch the table (or another replica's) already
holds answered DUPLICATE and never written again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from deltalake import DeltaTable

from exporters import DeltaLandingExporter, ExportResult, ForwardedBatch, TelemetryPush, shard_uri
from exporters.delta.landing import FORWARDED_APP_ID_PREFIX
from tests.support.otlp import push

pytestmark = pytest.mark.integration

BROKER = "User:kafka-broker/b1-4f2a"
SUCCESS, DUPLICATE = [ExportResult.SUCCESS], [ExportResult.DUPLICATE]


async def _replica(root: Path, replica: str, **options: object) -> DeltaLandingExporter:
    exporter = DeltaLandingExporter(
        shard_uri(str(root), "telemetry_pushes", replica),
        shards_uri=str(root / "telemetry_pushes"),
        writer_id=replica,
        **options,  # type: ignore[arg-type]
    )
    await exporter.start()
    return exporter


def _pushes(first: int, count: int) -> list[TelemetryPush]:
    return [push(n) for n in range(first, first + count)]


def _rows(exporter: DeltaLandingExporter) -> list[tuple[str, int]]:
    table = DeltaTable(exporter.table_uri).to_pyarrow_table(columns=["client_id", "batch_seq"])
    return sorted(
        zip(table.column("client_id").to_pylist(), table.column("batch_seq").to_pylist(), strict=True)
    )


async def test_a_forwarded_batch_is_committed_whole_even_past_the_batch_bounds(tmp_path: Path) -> None:
    exporter = await _replica(tmp_path, "sink-0", max_batch_rows=4, max_batch_latency_ms=60_000)
    lone = asyncio.create_task(exporter.export(push(100)))
    await asyncio.sleep(0)
    batch = ForwardedBatch(BROKER, 9)
    assert await exporter.export_batch(_pushes(0, 10), batch) == SUCCESS * 10
    assert await lone == ExportResult.SUCCESS
    rows = _rows(exporter)
    assert len({seq for client, seq in rows if client != "producer-100"}) == 1  # one commit
    table = DeltaTable(exporter.table_uri)
    assert table.transaction_version(FORWARDED_APP_ID_PREFIX + BROKER) == 9
    await exporter.shutdown()


async def test_a_resent_batch_the_table_holds_is_a_duplicate_and_lands_nothing(tmp_path: Path) -> None:
    exporter = await _replica(tmp_path, "sink-0")
    assert await exporter.export_batch(_pushes(0, 3), ForwardedBatch(BROKER, 2)) == SUCCESS * 3
    for resend in (ForwardedBatch(BROKER, 2, resend=True), ForwardedBatch(BROKER, 2, resend=False)):
        assert await exporter.export_batch(_pushes(0, 3), resend) == DUPLICATE * 3
    part = ForwardedBatch(BROKER, 1, resend=True)  # a part of it (its oldest push expired meanwhile)
    assert await exporter.export_batch(_pushes(1, 2), part) == DUPLICATE * 2
    assert await exporter.export_batch(_pushes(3, 2), ForwardedBatch(BROKER, 4)) == SUCCESS * 2
    assert [client for client, _ in _rows(exporter)] == [f"producer-{n}" for n in range(5)]
    await exporter.shutdown()


async def test_a_batch_is_numbered_per_forwarder_so_another_forwarders_same_number_lands(
    tmp_path: Path,
) -> None:
    exporter = await _replica(tmp_path, "sink-0")
    assert await exporter.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 7)) == SUCCESS * 2
    other = ForwardedBatch("User:kafka-broker/b2-99c1", 7, resend=True)
    assert await exporter.export_batch(_pushes(2, 2), other) == SUCCESS * 2
    assert len(_rows(exporter)) == 4
    await exporter.shutdown()


async def test_a_duplicate_queued_beside_new_pushes_leaves_them_to_land(tmp_path: Path) -> None:
    """The check runs at the commit: two attempts of one batch queued together land once."""
    exporter = await _replica(tmp_path, "sink-0", max_batch_latency_ms=60_000)
    first = asyncio.create_task(exporter.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1)))
    await asyncio.sleep(0)
    assert await exporter.force_flush()
    again = asyncio.create_task(exporter.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1, resend=True)))
    fresh = asyncio.create_task(exporter.export(push(50)))
    await asyncio.sleep(0.05)
    assert await exporter.force_flush()
    assert (await first, await again, await fresh) == (SUCCESS * 2, DUPLICATE * 2, ExportResult.SUCCESS)
    assert [c for c, _ in _rows(exporter)] == ["producer-0", "producer-1", "producer-50"]
    await exporter.shutdown()


async def test_two_attempts_queued_for_the_same_commit_land_once(tmp_path: Path) -> None:
    """The forwarder gave up waiting and resent while its first attempt still waited for the commit."""
    exporter = await _replica(tmp_path, "sink-0", max_batch_latency_ms=60_000)
    first = asyncio.create_task(exporter.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1)))
    again = asyncio.create_task(exporter.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1, resend=True)))
    part = asyncio.create_task(exporter.export_batch(_pushes(1, 1), ForwardedBatch(BROKER, 1, resend=True)))
    await asyncio.sleep(0.05)
    assert await exporter.force_flush()
    assert (await first, await again, await part) == (SUCCESS * 2, DUPLICATE * 2, DUPLICATE)
    assert [c for c, _ in _rows(exporter)] == ["producer-0", "producer-1"]
    assert exporter.commits == 1
    await exporter.shutdown()


async def test_a_resend_another_replica_landed_is_a_duplicate_and_a_first_attempt_is_not_looked_up(
    tmp_path: Path,
) -> None:
    a, b = await _replica(tmp_path, "sink-a"), await _replica(tmp_path, "sink-b")
    assert await a.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1)) == SUCCESS * 2
    assert await b.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1, resend=True)) == DUPLICATE * 2
    assert DeltaTable(b.table_uri).transaction_version(FORWARDED_APP_ID_PREFIX + BROKER) is None
    # a first attempt cannot have landed elsewhere: only this replica's table is read for it
    assert await b.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1)) == SUCCESS * 2
    await a.shutdown()
    await b.shutdown()


async def test_a_restarted_replica_still_knows_the_batches_it_landed(tmp_path: Path) -> None:
    before = await _replica(tmp_path, "sink-0")
    assert await before.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1)) == SUCCESS * 2
    await before.shutdown()
    after = await _replica(tmp_path, "sink-0")
    assert await after.export_batch(_pushes(0, 2), ForwardedBatch(BROKER, 1, resend=True)) == DUPLICATE * 2
    assert len(_rows(after)) == 2
    await after.shutdown()
