"""The live sink replicas (AUD-C14, KIP-257's ``updateClusterMetadata``): replicas announce
themselves in a real data root (a temp dir), read each other, and the quota managers (the real engine,
``ReplicaShareQuotaCallback``) divide a shared quota by the replicas live."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from ingest.admin.replicas import REPLICAS_DIR, Announcement, ReplicaDirectory, live_replicas
from quotas import ClientQuotaEntity, QuotaConfig, QuotaManagers, create_quota_managers
from tests.support.clock import FakeClock

SHARED = "quotas.callback.ReplicaShareQuotaCallback"
TIMEOUT = 30_000


def _managers(clock: FakeClock) -> QuotaManagers:
    managers = create_quota_managers(QuotaConfig(client_quota_callback_class=SHARED), clock)
    managers.alter(ClientQuotaEntity(client_id="c"), "producer_byte_rate", 3000)
    managers.alter(ClientQuotaEntity(client_id="c"), "request_percentage", 30)
    return managers


def _replica(
    root: Path, name: str, clock: FakeClock, managers: QuotaManagers | None = None
) -> ReplicaDirectory:
    return ReplicaDirectory(
        str(root),
        replica_id=name,
        cluster_id="sinks",
        quotas=managers or _managers(clock),
        now_ms=clock.now_ms,
        heartbeat_ms=10_000,
        session_timeout_ms=TIMEOUT,
    )


def _limits(managers: QuotaManagers) -> tuple[float | None, float | None]:
    return managers.produce.quota_limit("User:u", "c"), managers.request.quota_limit("User:u", "c")


def test_AUD_C14_a_replica_is_live_while_its_last_heartbeat_is_younger_than_its_session_timeout() -> None:
    seen = [
        Announcement("a", "1", 1_000, TIMEOUT),
        Announcement("b", "2", 1_000 - TIMEOUT, TIMEOUT),  # exactly one timeout old: gone
        Announcement("c", "3", 800, 200),  # its own, shorter timeout: gone
    ]
    assert live_replicas(seen, "me", 1_000) == ("a", "me")
    assert live_replicas([], "me", 1_000) == ("me",)  # a replica always counts itself


async def test_AUD_C14_replicas_in_one_data_root_see_each_other_and_every_manager_divides_the_quota(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    a, b = _replica(tmp_path, "sink-0", clock), _replica(tmp_path, "sink/1", clock)
    assert await a.heartbeat() == ("sink-0",)
    assert _limits(a.quotas) == (3000, 30)
    assert await b.heartbeat() == ("sink-0", "sink/1")
    assert await a.heartbeat() == ("sink-0", "sink/1")
    assert _limits(a.quotas) == _limits(b.quotas) == (1500, 15)  # each replica enforces half


async def test_AUD_C14_a_replica_that_stops_cleanly_is_gone_at_the_next_heartbeat(tmp_path: Path) -> None:
    clock = FakeClock()
    a, b = _replica(tmp_path, "sink-0", clock), _replica(tmp_path, "sink-1", clock)
    await a.heartbeat()
    await b.heartbeat()
    await a.heartbeat()
    await b.withdraw()
    assert await a.heartbeat() == ("sink-0",)
    assert _limits(a.quotas) == (3000, 30)


async def test_AUD_C14_a_replica_that_died_is_gone_one_session_timeout_after_its_last_heartbeat(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    a, b = _replica(tmp_path, "sink-0", clock), _replica(tmp_path, "sink-1", clock)
    await b.heartbeat()
    clock.advance(TIMEOUT - 1)
    assert await a.heartbeat() == ("sink-0", "sink-1")
    clock.advance(1)
    assert await a.heartbeat() == ("sink-0",)


async def test_AUD_C14_a_stopping_process_never_removes_a_newer_process_announcement(tmp_path: Path) -> None:
    clock = FakeClock()
    old, new, other = (_replica(tmp_path, n, clock) for n in ("sink-0", "sink-0", "sink-1"))
    await old.heartbeat()
    await new.heartbeat()  # the restarted pod, same replica id
    await old.withdraw()  # the old process finishing its stop afterwards
    assert await other.heartbeat() == ("sink-0", "sink-1")


async def test_AUD_C14_what_is_not_an_announcement_is_skipped_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    a = _replica(tmp_path, "sink-0", clock)
    await a.heartbeat()
    directory = tmp_path / REPLICAS_DIR
    (directory / "garbage.json").write_bytes(b"\xff{not json")
    (directory / "deep.json").write_text("[" * 4000)
    (directory / "huge.json").write_text(json.dumps({"replica_id": "x" * 8000}))
    (directory / "wrong.json").write_text(json.dumps({"replica_id": "y", "heartbeat_ms": "soon"}))
    (directory / "notes.txt").write_text("ignored: not an announcement's name")
    good = Announcement("sink-1", "i", clock.now_ms(), TIMEOUT).to_json()
    (directory / "sink-1.json").write_bytes(good)
    with caplog.at_level(logging.WARNING, logger="ingest.admin.replicas"):
        assert await a.heartbeat() == ("sink-0", "sink-1")
        assert await a.heartbeat() == ("sink-0", "sink-1")
    skipped = [r for r in caplog.records if "not a replica announcement" in r.getMessage()]
    assert len(skipped) == 4  # each bad file once, however many heartbeats read it


async def test_AUD_C14_a_store_failure_keeps_the_live_set_it_had(tmp_path: Path) -> None:
    clock = FakeClock()
    a, b = _replica(tmp_path, "sink-0", clock), _replica(tmp_path, "sink-1", clock)
    await b.heartbeat()
    assert await a.heartbeat() == ("sink-0", "sink-1")
    directory = tmp_path / REPLICAS_DIR
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()
    directory.write_text("a file where the directory was")  # every write and listing now fails
    clock.advance(TIMEOUT * 2)
    assert await a.heartbeat() == ("sink-0", "sink-1")
    assert _limits(a.quotas) == (1500, 15)  # quotas do not swing because the store failed
