"""Acknowledged means landed (F6, F15): storage faults at every step of a commit, a hung store, and
two processes with one writer id, against real Delta tables. Faults are injected at the boundary
between the appender and delta-rs (``tests.support.storage_faults``); crashes are real SIGKILLs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from exporters import TELEMETRY_PUSHES_SCHEMA, DeltaLandingExporter, ExportResult, TelemetryPush
from exporters.delta.appender import DeltaAppender
from exporters.delta.schema import pushes_to_table
from exporters.delta.writer_claim import RELEASED, WriterClaim, WriterFencedError, WriterIdInUseError
from tests.support.clock import FakeClock, eventually
from tests.support.otlp import push
from tests.support.paths import REPO
from tests.support.storage_faults import Fault, write_faults

pytestmark = pytest.mark.integration

LEASE_MS = 30_000


def _push(n: int) -> TelemetryPush:
    """Push ``n``, with the id ``push-<n>`` (so that a test can name it again)."""
    return push(n, push_id=f"push-{n}")


def _landed(table_uri: str) -> Counter[str]:
    ids = DeltaTable(table_uri).to_pyarrow_table(columns=["push_id"]).column("push_id").to_pylist()
    return Counter(ids)


async def _export_all(exporter: DeltaLandingExporter, pushes: list[TelemetryPush]) -> list[ExportResult]:
    return list(await asyncio.gather(*(exporter.export(p) for p in pushes)))


# -- faults at each step of a commit ----------------------------------------------------------------


@pytest.mark.parametrize(
    "plan",
    [
        ("before",),  # nothing written, the retry writes
        ("after",),  # written, the reply lost: the retry finds its own txn
        ("before", "after"),
        ("after", "before"),  # the second batch's first attempt fails
        ("after", "after", "after"),  # every batch's reply is lost once
    ],
)
async def test_F6_every_acknowledged_push_is_in_the_table_exactly_once_whatever_the_commit_reports(
    tmp_path: Path, plan: tuple[Fault, ...]
) -> None:
    table = str(tmp_path / "t")
    with write_faults() as faults:
        faults.plan(*plan)
        exporter = DeltaLandingExporter(table, max_batch_rows=5, retry_backoff_ms=1)
        await exporter.start()
        pushes = [_push(n) for n in range(20)]
        results = await _export_all(exporter, pushes)
        await exporter.shutdown()
    assert results == [ExportResult.SUCCESS] * 20
    assert _landed(table) == Counter(p.context.push_id for p in pushes)


async def test_F6_a_batch_that_fails_every_attempt_is_retryable_and_absent(tmp_path: Path) -> None:
    table = str(tmp_path / "t")
    exporter = DeltaLandingExporter(table, commit_attempts=2, retry_backoff_ms=1)
    await exporter.start()
    assert await exporter.export(_push(1)) is ExportResult.SUCCESS
    with write_faults() as faults:
        faults.always = "before"
        assert await exporter.export(_push(2)) is ExportResult.RETRYABLE
    assert await exporter.export(_push(3)) is ExportResult.SUCCESS
    await exporter.shutdown()
    assert _landed(table) == Counter({_push(1).context.push_id: 1, _push(3).context.push_id: 1})


async def test_F6_files_of_a_commit_killed_before_its_log_entry_stay_invisible(tmp_path: Path) -> None:
    """A process killed after writing a batch's files and before its log entry leaves files no
    commit references: readers never see them, and the next writer's pushes land once."""
    table = str(tmp_path / "t")
    first = DeltaLandingExporter(table)
    await first.start()
    assert await first.export(_push(1)) is ExportResult.SUCCESS
    await first.shutdown()
    partition = next(Path(table).glob("date=*"))
    orphan = pushes_to_table([_push(2)], "killed", 5)
    pq.write_table(orphan.drop_columns(["date"]), partition / "part-00000-killed-before-the-log.parquet")
    second = DeltaLandingExporter(table)
    await second.start()
    assert await second.export(_push(3)) is ExportResult.SUCCESS
    await second.shutdown()
    assert _landed(table) == Counter({_push(1).context.push_id: 1, _push(3).context.push_id: 1})


# -- a hung store (F15) -----------------------------------------------------------------------------


async def test_F15_a_commit_past_its_timeout_fails_its_batch_retriably_sheds_and_recovers(
    tmp_path: Path,
) -> None:
    table = str(tmp_path / "t")
    exporter = DeltaLandingExporter(table, commit_timeout_ms=200, max_batch_latency_ms=0)
    await exporter.start()
    assert await exporter.export(_push(1)) is ExportResult.SUCCESS
    with write_faults() as faults:
        faults.plan("hang")
        assert await exporter.export(_push(2)) is ExportResult.RETRYABLE  # answered at the timeout
        assert faults.hanging.is_set()
        health = exporter.health()
        assert not health.healthy
        assert "run over 200 ms" in health.detail
        # while the store hangs, pushes are answered at once: none waits holding a slot
        assert await exporter.export(_push(3)) is ExportResult.RETRYABLE
        faults.release()  # storage returns; the stalled commit lands after all
        await eventually(lambda: exporter._stalled is None)
    assert await exporter.export(_push(4)) is ExportResult.SUCCESS
    assert exporter.health().healthy
    await exporter.shutdown()
    landed = _landed(table)
    assert landed[_push(1).context.push_id] == landed[_push(4).context.push_id] == 1
    assert _push(3).context.push_id not in landed
    assert landed[_push(2).context.push_id] <= 1  # answered RETRYABLE: in the table at most once


# -- one writer id, two processes -------------------------------------------------------------------


def _appender(table: str, clock: FakeClock) -> DeltaAppender:
    return DeltaAppender(
        table,
        TELEMETRY_PUSHES_SCHEMA,
        "telemetry-sink/pod-0",
        claim=WriterClaim("pod-0", LEASE_MS),
        now_ms=clock.now_ms,
    )


def test_F6_a_second_process_with_the_same_writer_id_refuses_to_write_while_the_first_lives(
    tmp_path: Path,
) -> None:
    table, clock = str(tmp_path / "t"), FakeClock()
    first, second = _appender(table, clock), _appender(table, clock)
    first.append(pushes_to_table([_push(1)], "pod-0", 0), 0)
    clock.advance(LEASE_MS - 1)
    with pytest.raises(
        WriterIdInUseError, match=r"writer id 'pod-0' is in use by another process .* 29999 ms ago"
    ):
        second.append(pushes_to_table([_push(2)], "pod-0", 0), 0)
    first.append(pushes_to_table([_push(3)], "pod-0", 1), 1)  # the first writes on
    first.release()
    assert DeltaTable(table).transaction_version(first.claim.holder_app_id) == RELEASED  # type: ignore[union-attr]
    second.append(pushes_to_table([_push(4)], "pod-0", 1), 1)  # released: taken over at once
    assert sorted(_landed(table)) == sorted(_push(n).context.push_id for n in (1, 3, 4))


def test_F6_a_holder_silent_for_a_lease_is_taken_over_and_then_fenced(tmp_path: Path) -> None:
    table, clock = str(tmp_path / "t"), FakeClock()
    first, second = _appender(table, clock), _appender(table, clock)
    first.append(pushes_to_table([_push(1)], "pod-0", 0), 0)
    clock.advance(LEASE_MS)  # the first process was paused (or died) for a whole lease
    second.append(pushes_to_table([_push(2)], "pod-0", 0), 0)
    with pytest.raises(WriterFencedError, match="taken over by another process"):
        first.append(pushes_to_table([_push(3)], "pod-0", 1), 1)
    assert sorted(_landed(table)) == sorted(_push(n).context.push_id for n in (1, 2))


async def test_F6_a_second_exporter_with_the_same_writer_id_is_unready_and_answers_retryable(
    tmp_path: Path,
) -> None:
    table, clock = str(tmp_path / "t"), FakeClock()
    first = DeltaLandingExporter(table, writer_id="pod-0", wall_clock=clock.now_ms, max_batch_latency_ms=0)
    await first.start()
    assert await first.export(_push(1)) is ExportResult.SUCCESS
    second = DeltaLandingExporter(table, writer_id="pod-0", wall_clock=clock.now_ms, max_batch_latency_ms=0)
    await second.start()
    assert await second.export(_push(2)) is ExportResult.RETRYABLE
    await eventually(lambda: not second.health().healthy)
    assert "writer id 'pod-0' is in use by another process" in second.health().detail
    assert await second.export(_push(3)) is ExportResult.RETRYABLE
    assert await first.export(_push(4)) is ExportResult.SUCCESS
    await second.shutdown()
    await first.shutdown()
    assert sorted(_landed(table)) == sorted(_push(n).context.push_id for n in (1, 4))


# -- real crashes -----------------------------------------------------------------------------------


def _writer(table: Path, writer_id: str, count: int, kill_at: str = "") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.exporters.delta.writer_process", str(table), writer_id, str(count)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "WRITER_KILL_AT": kill_at},
    )


@pytest.mark.parametrize("kill_at", ["4:before", "4:after"])
def test_F6_a_process_killed_before_or_after_a_commit_loses_no_acknowledged_push(
    tmp_path: Path, kill_at: str
) -> None:
    """SIGKILL at the fourth write (the claim, two batches, then this one): before it wrote, or after
    it landed and before any push of it was acknowledged."""
    table = tmp_path / "t"
    writer = _writer(table, "pod-0", 1_000, kill_at)
    out, _ = writer.communicate(timeout=300)
    assert writer.returncode == -signal.SIGKILL
    acked = [line.split()[1] for line in out.splitlines() if line.startswith("ACK ")]
    assert acked  # the first batches were acknowledged
    landed = _landed(str(table))
    assert max(landed.values()) == 1
    assert set(acked) <= set(landed)
    assert len(landed) < 1_000  # killed mid-load (what landed unanswered is never acknowledged)


def test_F6_two_processes_with_one_writer_id_the_second_lands_nothing(tmp_path: Path) -> None:
    table = tmp_path / "t"
    first = _writer(table, "pod-0", 1_000_000)
    assert first.stdout is not None
    first_acks = [first.stdout.readline().split()[1]]  # the first holds the writer id, and lives
    second = _writer(table, "pod-0", 20)
    out, _ = second.communicate(timeout=300)
    first.send_signal(signal.SIGKILL)
    rest, _ = first.communicate()
    first_acks += [line.split()[1] for line in rest.splitlines() if line.startswith("ACK ")]
    assert second.returncode == 0
    assert "ACK " not in out
    landed = _landed(str(table))
    assert max(landed.values()) == 1
    assert set(first_acks) <= set(landed)
    assert not [push_id for push_id in landed if push_id.startswith(f"pod-0-{second.pid}-")]
