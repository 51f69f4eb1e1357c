"""Quota-sensor snapshots in the bronze ``quota_samples`` table."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from exporters import QuotaSample, QuotaSampleRecorder
from tests.support.clock import T0
from tests.support.storage_faults import write_faults

pytestmark = pytest.mark.integration

SAMPLES = [
    QuotaSample("Produce", "byte-rate", (("client-id", ""), ("user", "alice")), 1234.5),
    QuotaSample("Produce", "throttle-time", (("client-id", ""), ("user", "alice")), 250.0),
    QuotaSample("ControllerMutation", "tokens", (("client-id", "c1"), ("user", "bob")), -3.0),
]


async def test_a_snapshot_lands_as_rows(tmp_path: Path) -> None:
    recorder = QuotaSampleRecorder(str(tmp_path / "quota_samples"), writer_id="w")
    assert await recorder.record(SAMPLES, T0)
    assert await recorder.record([], T0)  # nothing to store
    rows = DeltaTable(recorder.table_uri).to_pyarrow_table().sort_by("value").to_pylist()
    assert [(r["group"], r["metric"], r["entity"], r["value"]) for r in rows] == [
        ("ControllerMutation", "tokens", "client-id=c1,user=bob", -3.0),
        ("Produce", "throttle-time", "client-id=,user=alice", 250.0),
        ("Produce", "byte-rate", "client-id=,user=alice", 1234.5),
    ]
    assert {r["date"] for r in rows} == {"2023-11-14"}
    assert dict(rows[0]["tags"]) == {"client-id": "c1", "user": "bob"}
    assert recorder.health().healthy


async def test_run_snapshots_every_period_until_stopped(tmp_path: Path) -> None:
    recorder = QuotaSampleRecorder(str(tmp_path / "q"), writer_id="w", period_ms=30_000)
    now = [T0]
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += int(seconds * 1000)
        if len(sleeps) == 3:
            recorder.stop()

    await recorder.run(lambda: SAMPLES[:1], lambda: now[0], fake_sleep)
    assert sleeps == [30.0, 30.0, 30.0]
    times = DeltaTable(recorder.table_uri).to_pyarrow_table().column("sampled_at").to_pylist()
    assert [int(t.timestamp() * 1000) for t in sorted(times)] == [T0, T0 + 30_000, T0 + 60_000]


async def test_a_storage_fault_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the table should be")
    recorder = QuotaSampleRecorder(str(blocker / "q"), writer_id="w", commit_attempts=1)
    assert not await recorder.record(SAMPLES, T0)
    assert not recorder.health().healthy


async def test_F6_a_snapshot_whose_commit_answer_is_lost_lands_once_even_after_a_restart(
    tmp_path: Path,
) -> None:
    """Each recorder commits under its own incarnation: a restarted one (same writer id, sequence
    from 0 again) never takes the previous run's commits for its own, and a retry after a lost answer
    finds its own commit and writes nothing more."""
    table = str(tmp_path / "quota_samples")
    first = QuotaSampleRecorder(table, writer_id="w")
    for n in range(3):
        assert await first.record(SAMPLES, T0 + n)
    restarted = QuotaSampleRecorder(table, writer_id="w")
    with write_faults() as faults:
        faults.plan("after")
        assert await restarted.record(SAMPLES, T0 + 10)
    assert faults.calls == 1
    times = Counter(
        t.timestamp() for t in DeltaTable(table).to_pyarrow_table().column("sampled_at").to_pylist()
    )
    assert sorted(times.values()) == [3, 3, 3, 3]  # four snapshots of three samples, each once
