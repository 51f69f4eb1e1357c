"""Holds: QUO-14 muting for connection-less transports."""

from __future__ import annotations

import asyncio

from ingest.limits import DEFAULT_LIMITS
from ingest.push.holds import ClientHolds
from quotas import DEFAULT, ClientQuotaEntity, QuotaConfig, create_quota_managers
from tests.support.clock import T0, FakeClock


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


class SteppedClock(FakeClock):
    """A fake clock whose waits last until their event is set or the test sets ``stepped``, which
    jumps time to the end of the wait."""

    def __init__(self) -> None:
        super().__init__()
        self.stepped = asyncio.Event()

    async def wait(self, event: asyncio.Event, timeout_ms: int | None) -> bool:
        either = [asyncio.create_task(e.wait()) for e in (event, self.stepped)]
        _, pending = await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        self.stepped.clear()
        return await super().wait(event, timeout_ms)


async def test_QUO_14_a_held_request_waits_once_per_client_and_within_the_cap() -> None:
    clock = SteppedClock()
    holds = ClientHolds()
    holds.hold(create_quota_managers(QuotaConfig(), clock).produce, "User:a", "c", 800, clock.now_ms())
    assert await holds.wait("User:a", "other", clock, 1000) == 0  # not held: no wait at all
    assert await holds.wait("User:a", "c", clock, 799) == 800  # longer than the cap: refused at once
    waiting = asyncio.create_task(holds.wait("User:a", "c", clock, 1000))
    await asyncio.sleep(0)
    assert await holds.wait("User:a", "c", clock, 1000) == 800  # a second request of a muted client
    clock.stepped.set()
    assert await waiting == 0
    assert clock.now_ms() == T0 + 800


async def test_QUO_14_the_reaper_ending_the_throttle_lets_the_waiting_request_go_at_once() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    holds = ClientHolds()
    holds.hold(quotas.produce, "User:a", "c", 5000, clock.now_ms())
    waiting = asyncio.create_task(holds.wait("User:a", "c", SteppedClock(), 10_000))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert quotas.produce.throttle_queue.reap(clock.now_ms() + 5000) == 1
    assert await waiting == 0


async def test_QUO_14_shutdown_ends_every_hold_so_waiting_requests_finish_in_the_grace_period() -> None:
    clock = FakeClock()
    holds = ClientHolds()
    holds.hold(create_quota_managers(QuotaConfig(), clock).produce, "User:a", "c", 5000, clock.now_ms())
    waiting = asyncio.create_task(holds.wait("User:a", "c", SteppedClock(), 10_000))
    await asyncio.sleep(0)
    assert not waiting.done()
    holds.release_all()
    assert await waiting == 0
    assert len(holds) == 0


def test_F21_at_most_max_held_clients_are_held_and_a_client_over_it_is_refused_not_queued() -> None:
    """Holds are keyed by what clients send: a flood of new client ids fills the table, then is not
    held; the clients already held stay held, and one freed place takes a new client again."""
    clock = FakeClock()
    produce = create_quota_managers(QuotaConfig(), clock).produce
    holds = ClientHolds(max_held_clients=2)
    now = clock.now_ms()
    for client_id in ("a", "b", "c", "d"):
        holds.hold(produce, "User:x", client_id, 1000, now)
    assert len(holds) == 2
    assert holds.refused == 2
    assert len(produce.throttle_queue) == 2  # the refused clients' throttles are not queued either
    assert holds.remaining_ms("User:x", "c", now) == 0
    holds.hold(produce, "User:x", "a", 3000, now)  # a held client's hold still grows when full
    assert holds.remaining_ms("User:x", "a", now) == 3000
    assert holds.refused == 2
    assert produce.throttle_queue.reap(now + 1000) == 2  # b's hold ends (a's first throttle too)
    holds.hold(produce, "User:x", "c", 500, now + 1000)
    assert holds.remaining_ms("User:x", "c", now + 1000) == 500
    assert len(holds) == 2


def test_F21_the_default_cap_is_limits_max_held_clients() -> None:
    assert ClientHolds().max_held_clients == DEFAULT_LIMITS.max_held_clients


def test_F21_a_throttled_client_not_held_still_has_its_throttle_time_recorded() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(ClientQuotaEntity(None, DEFAULT), "producer_byte_rate", 100)  # every client id its own
    holds = ClientHolds(max_held_clients=1)
    now = clock.now_ms()
    holds.hold(quotas.produce, "User:x", "a", 1000, now)
    holds.hold(quotas.produce, "User:x", "b", 1000, now)  # the table is full: told, not held
    assert holds.refused == 1
    throttle = {
        metric.tag_map.get("client-id"): value
        for metric, value in quotas.values(now).items()
        if metric.name == "throttle-time" and metric.group == "Produce"
    }
    assert throttle["a"] == throttle["b"] > 0
