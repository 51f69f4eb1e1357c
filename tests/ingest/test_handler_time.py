"""A request's handler time: the meter's clock advance, its waits left out, and its recording in the
request quota, as a broker's ``sendResponseMaybeThrottle`` and ``sendResponseExemptThrottle``
(``ingest.handler_time``)."""

from __future__ import annotations

import asyncio
import math

from ingest.handler_time import HandlerTime, metering, record_request_time, waiting
from quotas import ClientQuotaEntity, QuotaConfig, QuotaManagers, create_quota_managers
from subscriptions import ClientContext
from tests.support.clock import T0, FakeClock


class SteppedClock:
    """A nanosecond clock that reads what the test set."""

    def __init__(self) -> None:
        self.ns = 1_000

    def __call__(self) -> int:
        return self.ns


def test_handler_time_is_the_clock_advance_less_the_waits() -> None:
    clock = SteppedClock()
    meter = HandlerTime(clock)
    clock.ns += 300
    meter.pause()
    clock.ns += 5_000  # waiting: not this request's time
    meter.pause()  # a second pause changes nothing
    assert meter.total_ns() == 300
    meter.resume()
    clock.ns += 200
    meter.resume()  # nor a second resume
    assert meter.total_ns() == 500


def test_waiting_pauses_the_meter_of_the_request_it_runs_in() -> None:
    clock = SteppedClock()
    with metering(clock) as meter:
        clock.ns += 100
        with waiting():
            clock.ns += 9_000
        clock.ns += 50
    assert meter.total_ns() == 150


def test_waiting_outside_a_metered_request_does_nothing() -> None:
    with waiting():
        pass
    clock = SteppedClock()
    with metering(clock) as meter:
        clock.ns += 10
    with waiting():  # the request's context ended: its meter is no longer the current one
        clock.ns += 1_000
    assert meter.total_ns() == 1_010  # never paused: read after its end, it still runs


async def test_each_request_pauses_only_its_own_meter() -> None:
    clock = SteppedClock()
    gate = asyncio.Event()

    async def waits() -> int:
        with metering(clock) as meter:
            clock.ns += 1
            with waiting():
                await gate.wait()
        return meter.total_ns()

    async def works() -> int:
        with metering(clock) as meter:
            clock.ns += 20
        gate.set()
        return meter.total_ns()

    waited, worked = await asyncio.gather(asyncio.create_task(waits()), asyncio.create_task(works()))
    assert (waited, worked) == (1, 20)


ALICE = ClientContext(client_id="c", principal="User:alice")
MS = 1_000_000


class Channel:
    def __init__(self) -> None:
        self.muted = 0

    def start_throttling(self) -> None:
        self.muted += 1

    def end_throttling(self) -> None:
        self.muted -= 1


def _meter(ns: int) -> HandlerTime:
    return HandlerTime(iter([0, ns]).__next__)


def _managers() -> QuotaManagers:
    managers = create_quota_managers(QuotaConfig(), FakeClock())
    managers.alter(ClientQuotaEntity(user="alice"), "request_percentage", 1)  # 10 ms of handling per s
    return managers


def _value(managers: QuotaManagers, name: str) -> float:
    """The sum of the Request quota's metrics called ``name`` (an average of no samples is NaN: 0)."""
    values = managers.values(T0).items()
    return sum(v for m, v in values if m.group == "Request" and m.name == name and not math.isnan(v))


def test_within_the_quota_the_throttle_is_0_and_nothing_is_muted() -> None:
    managers, channel = _managers(), Channel()
    assert record_request_time(managers.request, ALICE, _meter(MS), T0, channel) == 0
    assert channel.muted == 0
    assert _value(managers, "request-time") > 0


def test_over_the_quota_the_throttle_is_returned_and_the_channel_muted() -> None:
    managers, channel = _managers(), Channel()
    throttle_ms = record_request_time(managers.request, ALICE, _meter(500 * MS), T0, channel)
    assert 0 < throttle_ms <= managers.request.max_throttle_time_ms
    assert channel.muted == 1
    assert _value(managers, "throttle-time") > 0


def test_without_a_channel_the_throttle_is_returned_and_nobody_is_muted() -> None:
    managers = _managers()
    assert record_request_time(managers.request, ALICE, _meter(500 * MS), T0) > 0
    assert _value(managers, "throttle-time") == 0  # the transport tells the client, its own way


def test_nobodys_request_is_exempt_and_never_throttled() -> None:
    managers = _managers()
    assert record_request_time(managers.request, None, _meter(500 * MS), T0) == 0
    assert _value(managers, "exempt-request-time") > 0
    assert managers.request.entity_count == 0
