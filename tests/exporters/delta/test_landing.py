"""The Delta landing exporter against real Delta tables in temporary directories."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

import exporters.delta.schema as schema_module
from exporters import TELEMETRY_PUSHES_SCHEMA, DeltaLandingExporter, ExportResult, TelemetryPush
from exporters.delta.appender import AppendError, DeltaAppender
from exporters.delta.schema import PARTITION_BY, pushes_to_table
from subscriptions import kafka_uuid_string
from tests.support.clock import T0
from tests.support.otlp import push
from tests.support.storage_faults import write_faults

pytestmark = pytest.mark.integration


def _rows(table_uri: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(table_uri).to_pyarrow_table().sort_by("push_id").to_pylist()
    return rows


async def _exporter(tmp_path: Path, **options: object) -> DeltaLandingExporter:
    exporter = DeltaLandingExporter(str(tmp_path / "telemetry_pushes"), **options)  # type: ignore[arg-type]
    await exporter.start()
    return exporter


def _poisoned(n: int, field: str, value: object) -> TelemetryPush:
    """A push whose context holds ``value``, which ``PushContext`` refuses: set past its validation,
    as a transport that forgot to check its client text would leave it (F3)."""
    poisoned = push(n)
    object.__setattr__(poisoned.context, field, value)
    return poisoned


async def _flushed(exporter: DeltaLandingExporter, pushes: list[TelemetryPush]) -> list[ExportResult]:
    """Export ``pushes`` (queued in order, batched by the exporter's bounds) and commit them now."""
    tasks = [asyncio.create_task(exporter.export(p)) for p in pushes]
    await asyncio.sleep(0)
    await exporter.force_flush()
    return [await t for t in tasks]


async def test_pushes_land_row_by_row_with_their_whole_context(tmp_path: Path) -> None:
    exporter = await _exporter(tmp_path, writer_id="w1")
    pushes = [push(n, received_ms=T0 + n) for n in range(20)]
    results = await asyncio.gather(*(exporter.export(p) for p in pushes))
    assert results == [ExportResult.SUCCESS] * 20
    await exporter.shutdown()
    rows = {r["push_id"]: r for r in _rows(exporter.table_uri)}
    assert len(rows) == 20
    for p in pushes:
        row, c = rows[p.context.push_id], p.context
        assert row["payload"] == p.payload
        assert row["payload_bytes"] == len(p.payload)
        assert row["client_instance_id"] == kafka_uuid_string(c.client_instance_id)  # Kafka's form
        assert (row["subscription_id"], row["principal"], row["client_id"]) == (
            c.subscription_id,
            c.principal,
            c.client_id,
        )
        assert (row["client_software_name"], row["client_software_version"]) == ("librdkafka", "2.16.0")
        assert (row["client_source_address"], row["client_source_port"]) == (
            "127.0.0.1",
            c.client_source_port,
        )
        assert row["quota_entity"] == "client-id=,user=alice"
        assert dict(row["quota_tags"]) == {"user": "alice", "client-id": ""}
        assert (row["compression_type"], row["terminating"]) == (4, False)
        assert row["received_at"].timestamp() * 1000 == pytest.approx(c.received_ms)
        assert row["date"] == "2023-11-14"
        assert row["writer_id"] == "w1"
    table = DeltaTable(exporter.table_uri)
    assert table.metadata().partition_columns == ["date"]
    assert table.schema().to_arrow() is not None


async def test_group_commit_is_bounded_by_rows(tmp_path: Path) -> None:
    exporter = await _exporter(tmp_path, max_batch_rows=10, max_batch_latency_ms=60_000)
    tasks = [asyncio.create_task(exporter.export(push(n))) for n in range(25)]
    await asyncio.sleep(0)  # let every export enqueue
    assert await exporter.force_flush()  # the last 5 would otherwise wait a minute for company
    assert {t.result() for t in tasks} == {ExportResult.SUCCESS}
    assert exporter.commits == 3
    sizes = (
        DeltaTable(exporter.table_uri)
        .to_pyarrow_table()
        .group_by("batch_seq")
        .aggregate([("push_id", "count")])
    )
    assert sorted(sizes.column("push_id_count").to_pylist()) == [5, 10, 10]
    await exporter.shutdown()


async def test_a_batch_that_fills_up_is_committed_without_waiting_for_its_latency_bound(
    tmp_path: Path,
) -> None:
    """The flusher sleeps through pushes that join an open batch; the push that fills it wakes it."""
    exporter = await _exporter(tmp_path, max_batch_rows=10, max_batch_latency_ms=600_000)
    results = await asyncio.gather(*(exporter.export(push(n)) for n in range(20)))
    assert set(results) == {ExportResult.SUCCESS}
    assert exporter.commits == 2
    await exporter.shutdown()


async def test_group_commit_is_bounded_by_bytes(tmp_path: Path) -> None:
    pushes = [push(n, payload=b"x" * 1000) for n in range(9)]
    assert {p.size for p in pushes} == {pushes[0].size}
    exporter = await _exporter(tmp_path, max_batch_bytes=3 * pushes[0].size, max_batch_latency_ms=60_000)
    results = await asyncio.gather(*(exporter.export(p) for p in pushes))
    assert set(results) == {ExportResult.SUCCESS}
    assert exporter.commits == 3
    await exporter.shutdown()


async def test_F4_context_text_counts_in_the_batch_bytes_not_only_the_payload(tmp_path: Path) -> None:
    """Tiny payloads with a long software name each: the batch bound sees the name's bytes."""
    pushes = [push(n, payload=b"x", client_software_name="n" * 10_000) for n in range(4)]
    assert pushes[0].size > 10_000
    exporter = await _exporter(tmp_path, max_batch_bytes=25_000, max_batch_latency_ms=60_000)
    assert await _flushed(exporter, pushes) == [ExportResult.SUCCESS] * 4
    assert exporter.commits == 2  # 2 pushes a batch; counting payload bytes alone, 1 commit
    await exporter.shutdown()


async def test_F4_context_text_counts_in_the_pending_bytes(tmp_path: Path) -> None:
    long_tags = {"user": "u" * 6_000, "client-id": ""}  # a row holds them twice: tags and entity
    exporter = await _exporter(tmp_path, max_pending_bytes=15_000, max_batch_latency_ms=60_000)
    first = asyncio.create_task(exporter.export(push(1, payload=b"x", quota_tags=long_tags)))
    await asyncio.sleep(0)
    assert await exporter.export(push(2, payload=b"x", quota_tags=long_tags)) is ExportResult.RETRYABLE
    small = asyncio.create_task(exporter.export(push(3, payload=b"x")))  # what is left still fits
    await asyncio.sleep(0)
    await exporter.shutdown()
    assert (await first, await small) == (ExportResult.SUCCESS, ExportResult.SUCCESS)


async def test_group_commit_is_bounded_by_latency(tmp_path: Path) -> None:
    exporter = await _exporter(tmp_path, max_batch_rows=1000, max_batch_latency_ms=1)
    assert await exporter.export(push()) is ExportResult.SUCCESS  # alone, committed when its time is up
    assert exporter.commits == 1
    await exporter.shutdown()


def test_F6_a_retried_commit_that_had_landed_is_not_written_again(tmp_path: Path) -> None:
    """The first attempt commits but reports an error (as a lost reply from storage would): the retry
    finds its own ``txn`` and writes nothing."""
    appender = DeltaAppender(
        str(tmp_path / "t"), TELEMETRY_PUSHES_SCHEMA, "w", partition_by=PARTITION_BY, backoff_ms=1
    )
    with write_faults() as faults:
        faults.plan("after")
        appender.append(pushes_to_table([push(1), push(2)], "w", 0), 0)
    assert faults.calls == 1  # the retry saw txn version 0 and wrote nothing
    assert DeltaTable(appender.table_uri).to_pyarrow_table().num_rows == 2
    assert DeltaTable(appender.table_uri).transaction_version(appender.app_id) == 0


def test_F6_batch_versions_must_increase(tmp_path: Path) -> None:
    appender = DeltaAppender(str(tmp_path / "t"), TELEMETRY_PUSHES_SCHEMA, "w")
    appender.append(pushes_to_table([push(1)], "w", 3), 3)
    with pytest.raises(ValueError, match="must increase: 3 after 3"):
        appender.append(pushes_to_table([push(2)], "w", 3), 3)


def test_append_gives_up_with_a_clear_error(tmp_path: Path) -> None:
    appender = DeltaAppender(str(tmp_path / "t"), TELEMETRY_PUSHES_SCHEMA, "w", attempts=2, backoff_ms=1)
    data = pushes_to_table([push()], "w", 3)
    with write_faults() as faults:
        faults.always = "before"
        with pytest.raises(AppendError, match="batch 3 not committed: injected"):
            appender.append(data, 3)
    assert faults.calls == 2


async def test_F6_a_restarted_writer_id_writes_under_a_new_incarnation_and_keeps_every_row(
    tmp_path: Path,
) -> None:
    first = await _exporter(tmp_path, writer_id="pod-0", max_batch_rows=1)
    for n in range(3):
        assert await first.export(push(n, push_id=f"p{n}")) is ExportResult.SUCCESS
    await first.shutdown()
    second = await _exporter(tmp_path, writer_id="pod-0", max_batch_rows=1)
    assert await second.export(push(9, push_id="p9")) is ExportResult.SUCCESS
    await second.shutdown()
    rows = _rows(second.table_uri)
    assert sorted(r["push_id"] for r in rows) == ["p0", "p1", "p2", "p9"]
    table = DeltaTable(second.table_uri)
    assert first.appender.app_id != second.appender.app_id
    assert table.transaction_version(first.appender.app_id) is not None
    assert table.transaction_version(second.appender.app_id) is not None


async def test_shutdown_flushes_and_later_exports_are_retryable(tmp_path: Path) -> None:
    exporter = await _exporter(tmp_path, max_batch_latency_ms=60_000)
    pending = asyncio.create_task(exporter.export(push(1)))
    await asyncio.sleep(0)
    await exporter.shutdown()
    assert await pending is ExportResult.SUCCESS
    assert await exporter.export(push(2)) is ExportResult.RETRYABLE
    assert len(_rows(exporter.table_uri)) == 1
    assert exporter.health().healthy


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("client_id", "\udcff"),  # what aiohttp makes of the header byte 0xff
        ("client_software_name", "lib\ud800"),
        ("principal", "User:\udc80"),
        ("quota_tags", {"user": "", "client-id": "\udcff"}),
    ],
)
async def test_F3_a_push_no_row_can_hold_is_refused_alone_and_its_batch_mates_land(
    tmp_path: Path, field: str, value: object
) -> None:
    exporter = await _exporter(tmp_path, max_batch_latency_ms=60_000)
    good = [push(0), push(1), push(3)]
    results = await _flushed(exporter, [good[0], good[1], _poisoned(2, field, value), good[2]])
    ok, refused = ExportResult.SUCCESS, ExportResult.PERMANENT
    assert results == [ok, ok, refused, ok]  # the client of the bad push is told INVALID_RECORD
    assert exporter.commits == 1  # its batch-mates landed in the same commit
    assert exporter.health().healthy  # a data failure is no storage failure: /readyz stays 200
    assert {r["push_id"] for r in _rows(exporter.table_uri)} == {p.context.push_id for p in good}
    later = push(4)
    assert await _flushed(exporter, [later]) == [ok]  # the table is intact and still written
    assert len(_rows(exporter.table_uri)) == 4
    await exporter.shutdown()


async def test_a_batch_of_refused_pushes_commits_nothing_and_stays_healthy(tmp_path: Path) -> None:
    exporter = await _exporter(tmp_path, max_batch_latency_ms=60_000)
    bad = [_poisoned(n, "client_id", "\udcff") for n in range(2)]
    assert await _flushed(exporter, bad) == [ExportResult.PERMANENT] * 2
    assert (exporter.commits, exporter.health().healthy) == (0, True)
    assert await _flushed(exporter, [push(5)]) == [ExportResult.SUCCESS]
    assert len(_rows(exporter.table_uri)) == 1
    await exporter.shutdown()


async def test_a_storage_failure_is_retryable_for_the_batch_and_unhealthy_until_a_commit_succeeds(
    tmp_path: Path,
) -> None:
    exporter = await _exporter(tmp_path, max_batch_latency_ms=60_000, commit_attempts=1)
    with write_faults() as faults:
        faults.always = "before"
        results = await _flushed(exporter, [push(0), _poisoned(1, "client_id", "\udcff")])
        assert results == [ExportResult.RETRYABLE, ExportResult.PERMANENT]  # the bad push stays refused
        assert not exporter.health().healthy
        assert "storage unavailable" in exporter.health().detail
        faults.always = None
        assert await _flushed(exporter, [push(2)]) == [ExportResult.SUCCESS]
    assert exporter.health().healthy
    await exporter.shutdown()


def test_bad_batch_bounds_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_batch_rows must be positive; max_batch_latency_ms"):
        DeltaLandingExporter("/tmp/x", max_batch_rows=0, max_batch_latency_ms=-1)


def test_schema_is_documented_column_by_column() -> None:
    doc = schema_module.__doc__ or ""
    documented = set()
    for line in doc.splitlines():
        match = re.match(r"\| ([a-z_]+)(?: / _([a-z]+))? \|", line)
        if match and match.group(1) != "column":
            documented.add(match.group(1))
            if match.group(2):
                documented.add(match.group(1).rsplit("_", 1)[0] + "_" + match.group(2))
    assert documented == set(TELEMETRY_PUSHES_SCHEMA.names)
