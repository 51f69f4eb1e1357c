"""Holds: QUO-14 muting for connection-less transports."""

from __future__ import annotations

from ingest.holds import ClientHolds
from ingest.quotas import QuotaConfig, create_quota_managers
from tests.support.clock import FakeClock


def test_QUO_14_a_held_client_is_held_until_its_throttle_ends() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    holds = ClientHolds()
    now = clock.now_ms()
    holds.hold(quotas.produce, "User:a", "c", 1500, now)
    assert holds.remaining_ms("User:a", "c", now) == 1500
    assert holds.remaining_ms("User:a", "other", now) == 0
    assert holds.remaining_ms("User:a", "c", now + 1499) == 1
    assert holds.remaining_ms("User:a", "c", now + 1500) == 0
    assert len(holds) == 0


def test_QUO_14_the_reaper_releases_a_hold_but_not_a_later_longer_one() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    holds = ClientHolds()
    now = clock.now_ms()
    holds.hold(quotas.produce, "User:a", "c", 100, now)
    holds.hold(quotas.produce, "User:a", "c", 900, now)
    assert quotas.produce.throttle_queue.reap(now + 100) == 1
    assert holds.remaining_ms("User:a", "c", now + 100) == 800
    assert quotas.produce.throttle_queue.reap(now + 900) == 1
    assert len(holds) == 0


def test_a_zero_throttle_holds_nobody() -> None:
    clock = FakeClock()
    holds = ClientHolds()
    holds.hold(create_quota_managers(QuotaConfig(), clock).produce, "User:a", "c", 0, clock.now_ms())
    assert len(holds) == 0
