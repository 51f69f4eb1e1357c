"""Holds: QUO-14 muting for connection-less transports, keyed by the violated quota sensor (T3-5)."""

from __future__ import annotations

import asyncio

import pytest

from ingest.limits import DEFAULT_LIMITS
from ingest.push.holds import ClientHolds
from quotas import DEFAULT, ClientQuotaEntity, QuotaConfig, QuotaManagers, create_quota_managers
from tests.support.clock import T0, FakeClock


def holds_of(quotas: QuotaManagers, max_held_clients: int = DEFAULT_LIMITS.max_held_clients) -> ClientHolds:
    """Holds over the sensors the pipeline's requests record into."""
    return ClientHolds((quotas.produce, quotas.request), max_held_clients)


def test_QUO_14_a_held_client_is_held_until_its_throttle_ends() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    holds = holds_of(quotas)
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
    holds = holds_of(quotas)
    now = clock.now_ms()
    holds.hold(quotas.produce, "User:a", "c", 100, now)
    holds.hold(quotas.produce, "User:a", "c", 900, now)
    assert quotas.produce.throttle_queue.reap(now + 100) == 1
    assert holds.remaining_ms("User:a", "c", now + 100) == 800
    assert quotas.produce.throttle_queue.reap(now + 900) == 1
    assert len(holds) == 0


def test_a_zero_throttle_holds_nobody() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    holds = holds_of(quotas)
    holds.hold(quotas.produce, "User:a", "c", 0, clock.now_ms())
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
    quotas = create_quota_managers(QuotaConfig(), clock)
    holds = holds_of(quotas)
    holds.hold(quotas.produce, "User:a", "c", 800, clock.now_ms())
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
    holds = holds_of(quotas)
    holds.hold(quotas.produce, "User:a", "c", 5000, clock.now_ms())
    waiting = asyncio.create_task(holds.wait("User:a", "c", SteppedClock(), 10_000))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert quotas.produce.throttle_queue.reap(clock.now_ms() + 5000) == 1
    assert await waiting == 0


async def test_QUO_14_shutdown_ends_every_hold_so_waiting_requests_finish_in_the_grace_period() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    holds = holds_of(quotas)
    holds.hold(quotas.produce, "User:a", "c", 5000, clock.now_ms())
    waiting = asyncio.create_task(holds.wait("User:a", "c", SteppedClock(), 10_000))
    await asyncio.sleep(0)
    assert not waiting.done()
    holds.release_all()
    assert await waiting == 0
    assert len(holds) == 0


def test_F21_at_most_max_held_clients_are_held_and_a_client_over_it_is_refused_not_queued() -> None:
    """Where each client id is a sensor of its own (a quota per client id; here none is set, which
    tags sensors the same way), a flood of new client ids fills the table, then is not held; the
    clients already held stay held, and one freed place takes a new client again."""
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    produce = quotas.produce
    holds = holds_of(quotas, max_held_clients=2)
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
    assert ClientHolds(()).max_held_clients == DEFAULT_LIMITS.max_held_clients


def test_F21_a_throttled_client_not_held_still_has_its_throttle_time_recorded() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(ClientQuotaEntity(None, DEFAULT), "producer_byte_rate", 100)  # every client id its own
    holds = holds_of(quotas, max_held_clients=1)
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


# -- T3-5: a hold is as wide as the quota it enforces ---------------------------------------------

USER_QUOTA = ClientQuotaEntity("alice", None)
CASES = [
    # (quota entity, the throttled client, another client, whether the other is held with it)
    (USER_QUOTA, ("User:alice", "app-1"), ("User:alice", "app-2"), True),
    (USER_QUOTA, ("User:alice", "app-1"), ("User:alice", ""), True),
    (USER_QUOTA, ("User:alice", "app-1"), ("User:bob", "app-1"), False),
    (ClientQuotaEntity(DEFAULT, None), ("User:alice", "a"), ("User:alice", "b"), True),
    (ClientQuotaEntity(DEFAULT, None), ("User:alice", "a"), ("User:bob", "a"), False),  # one per user
    (ClientQuotaEntity("alice", "app-1"), ("User:alice", "app-1"), ("User:alice", "app-2"), False),
    (ClientQuotaEntity("alice", DEFAULT), ("User:alice", "a"), ("User:alice", "b"), False),
    (ClientQuotaEntity(DEFAULT, DEFAULT), ("User:alice", "a"), ("User:bob", "a"), False),
    (ClientQuotaEntity(None, "app-1"), ("User:alice", "app-1"), ("User:bob", "app-1"), True),
    (ClientQuotaEntity(None, "app-1"), ("User:alice", "app-1"), ("User:alice", "app-2"), False),
    (ClientQuotaEntity(None, DEFAULT), ("User:alice", "a"), ("User:bob", "a"), True),  # one per client id
    (ClientQuotaEntity(None, DEFAULT), ("User:alice", "a"), ("User:alice", "b"), False),
]


@pytest.mark.parametrize(("entity", "throttled", "other", "held"), CASES)
@pytest.mark.parametrize("key", ["producer_byte_rate", "request_percentage"])
def test_T3_5_a_throttle_holds_every_client_recording_into_the_violated_sensor_and_no_other(
    entity: ClientQuotaEntity, throttled: tuple[str, str], other: tuple[str, str], held: bool, key: str
) -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(entity, key, 100)
    manager = quotas.produce if key == "producer_byte_rate" else quotas.request
    holds = holds_of(quotas)
    now = clock.now_ms()
    holds.hold(manager, *throttled, 700, now)
    assert holds.remaining_ms(*throttled, now) == 700
    assert holds.remaining_ms(*other, now) == (700 if held else 0)
    assert len(holds) == 1


def test_T3_5_a_user_quota_holds_a_client_id_never_seen_before_and_is_named_as_kafka_names_it() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(USER_QUOTA, "producer_byte_rate", 10_240)
    assert quotas.produce.sensor_name("User:alice", "app-7") == "Produce-alice:"
    holds = holds_of(quotas)
    now = clock.now_ms()
    holds.hold(quotas.produce, "User:alice", "app-0", 2000, now)
    assert [holds.remaining_ms("User:alice", f"app-{n}", now + 500) for n in range(1, 4)] == [1500] * 3
    assert holds.remaining_ms("User:bob", "app-0", now) == 0
    assert quotas.produce.throttle_queue.reap(now + 2000) == 1  # the reaper ends it for every client id
    assert len(holds) == 0
    assert holds.remaining_ms("User:alice", "app-9", now + 1000) == 0


def test_T3_5_a_default_quota_is_one_sensor_per_user_never_one_for_everyone() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(ClientQuotaEntity(DEFAULT, None), "producer_byte_rate", 100)
    quotas.alter(ClientQuotaEntity(None, DEFAULT), "producer_byte_rate", 100)
    names = {quotas.produce.sensor_name(p, c) for p in ("User:a", "User:b") for c in ("x", "y")}
    assert names == {"Produce-a:", "Produce-b:"}
    now = clock.now_ms()
    payload = 10 * 1024
    throttled = [quotas.produce.record_and_get_throttle_time_ms("User:a", "x", payload, now) > 0]
    throttled += [quotas.produce.record_and_get_throttle_time_ms("User:b", "x", 1, now) > 0]
    assert throttled == [True, False]  # b's sensor is b's own: a's bytes do not throttle it


def test_T3_5_a_request_is_held_while_either_of_its_sensors_is_the_longest_hold_counts() -> None:
    """A request records into its produce and its request-time sensor: held while either is held."""
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(USER_QUOTA, "producer_byte_rate", 100)  # produce: per user
    quotas.alter(ClientQuotaEntity(None, "app-1"), "request_percentage", 1)  # request time: per client id
    holds = holds_of(quotas)
    now = clock.now_ms()
    holds.hold(quotas.request, "User:alice", "app-1", 900, now)
    assert holds.remaining_ms("User:alice", "app-1", now) == 900
    assert holds.remaining_ms("User:alice", "app-2", now) == 0  # the request sensor is app-1's own
    assert holds.remaining_ms("User:bob", "app-1", now) == 900  # ...shared by every user's app-1
    holds.hold(quotas.produce, "User:alice", "app-2", 300, now, record_throttle=False)
    assert holds.remaining_ms("User:alice", "app-1", now) == 900  # the longer of its two holds
    assert holds.remaining_ms("User:alice", "app-3", now) == 300
    assert len(holds) == 2


def test_T3_5_a_hold_not_recorded_is_queued_but_leaves_the_throttle_time_sensor_alone() -> None:
    """QUO-9: of a request's two throttles only the larger is recorded; the other is held all the same."""
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(USER_QUOTA, "producer_byte_rate", 100)
    holds = holds_of(quotas)
    now = clock.now_ms()
    holds.hold(quotas.produce, "User:alice", "a", 400, now, record_throttle=False)
    assert holds.remaining_ms("User:alice", "b", now) == 400
    throttle_times = [
        value
        for metric, value in quotas.values(now).items()
        if metric.name == "throttle-time" and metric.group == "Produce"
    ]
    assert not any(throttle_times)
    assert quotas.produce.throttle_queue.reap(now + 400) == 1
    assert len(holds) == 0


async def test_T3_5_requests_of_several_client_ids_wait_out_the_one_hold_each_once() -> None:
    """One waiting request per client (a muted channel holds one), however many clients share the
    held sensor; all of them go ahead when the hold ends."""
    clock = SteppedClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(USER_QUOTA, "producer_byte_rate", 100)
    holds = holds_of(quotas)
    holds.hold(quotas.produce, "User:alice", "app-0", 800, clock.now_ms())
    waiting = [asyncio.create_task(holds.wait("User:alice", f"app-{n}", clock, 1000)) for n in (1, 2)]
    await asyncio.sleep(0)
    assert await holds.wait("User:alice", "app-1", clock, 1000) == 800  # app-1 waits already
    assert await holds.wait("User:bob", "app-1", clock, 1000) == 0  # bob is not held
    clock.stepped.set()
    assert await asyncio.gather(*waiting) == [0, 0]
    assert clock.now_ms() == T0 + 800


async def test_T3_5_a_request_held_again_while_it_waits_past_its_cap_is_refused_with_the_time_left() -> None:
    clock = FakeClock()
    quotas = create_quota_managers(QuotaConfig(), clock)
    quotas.alter(USER_QUOTA, "producer_byte_rate", 100)
    holds = holds_of(quotas)
    now = clock.now_ms()
    holds.hold(quotas.produce, "User:alice", "app-0", 500, now)
    waiting = asyncio.create_task(holds.wait("User:alice", "app-1", SteppedClock(), 1000))
    await asyncio.sleep(0)
    holds.hold(quotas.produce, "User:alice", "app-2", 3000, now)  # a request already past its check
    assert quotas.produce.throttle_queue.reap(now + 500) == 1  # the first throttle ends: not the hold
    assert not waiting.done()
    quotas.produce.throttle_queue.reap(now + 3000)
    assert await waiting == 0  # ended before the cap: the waiting request goes ahead
    holds.hold(quotas.produce, "User:alice", "app-0", 500, now)
    stepped = SteppedClock()
    stepped.time_ms = now
    waiting = asyncio.create_task(holds.wait("User:alice", "app-1", stepped, 1000))
    await asyncio.sleep(0)
    holds.hold(quotas.produce, "User:alice", "app-2", 5000, now)  # now past the 1 s the request may wait
    stepped.stepped.set()
    assert await waiting == 4500
