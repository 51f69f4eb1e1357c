"""Regression tests for an independent review of the engine against docs/rules.md."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from quotas.callback import DefaultQuotaCallback
from quotas.client_quota_manager import QuotaManagerConfig
from quotas.config import QuotaConfig
from quotas.controller_mutation_quota_manager import (
    ControllerMutationQuotaManager,
    ThrottlingQuotaExceededError,
)
from quotas.entities import DEFAULT, ClientQuotaEntity, QuotaType
from quotas.factory import create_quota_managers
from quotas.java import INT_MAX, sanitize
from quotas.sensor import Metrics
from quotas.stats import MetricConfig, Rate
from quotas.throttling import ThrottleQueue
from tests.support.clock import T0, FakeClock


def _java_rate(records: list[tuple[int, float]], samples: int, window: int, at: int) -> float:
    """A direct model of STAT-3..STAT-5 (the samples kept as a plain list, summed left to right)."""
    ring: list[list[float]] = []  # [value, count, start, last]
    current = 0
    for t, v in records:
        if not ring:
            ring.append([0.0, 0, t, t])
        if t - ring[current][2] >= window:
            current = (current + 1) % (samples + 1)
            if current >= len(ring):
                ring.append([0.0, 0, t, t])
            else:
                ring[current] = [0.0, 0, t, t]
        ring[current][0] += v
        ring[current][1] += 1
        ring[current][3] = t
    for i, s in enumerate(ring):
        if at - s[3] >= samples * window:
            ring[i] = [0.0, 0, at, at]
    total = 0.0
    for s in ring:
        total += s[0]
    elapsed = at - min(s[2] for s in ring)
    full = int(elapsed / window)
    if full < samples - 1:
        elapsed += (samples - 1 - full) * window
    return total / (max(elapsed, 1) / 1000.0)


def test_C_5_STAT_5_sums_near_2_pow_53_stay_javas_doubles() -> None:
    x = float(2**52 - 1)
    config = MetricConfig(samples=4, time_window_ms=1000)
    rate = Rate()
    records = [(T0 + 1000 * k, v) for k, v in enumerate([x, -x, x, -x, x, -x, -x])]
    for t, v in records:
        measured = rate.record_and_measure(config, v, t)
    assert measured == _java_rate(records, 4, 1000, records[-1][0]) == -3002399751580329.5


def test_STAT_4_STAT_5_a_clock_stepping_backwards_keeps_javas_window() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    rate = Rate()
    rate.record_and_measure(config, 5, T0 + 7000)
    rate.record(config, 2, T0 + 9000)
    rate.record_and_measure(config, 5, T0 + 2000)
    records = [(T0 + 7000, 5.0), (T0 + 9000, 2.0), (T0 + 2000, 5.0)]
    assert rate.measure(config, T0 + 5000) == _java_rate(records, 2, 1000, T0 + 5000)
    assert rate.measure(config, T0 + 5001) == pytest.approx(4.9950049950049955)


class ResettingCallback(DefaultQuotaCallback):
    def __init__(self) -> None:
        super().__init__()
        self.flat = 1.0
        self.reset = False
        self.polls = 0

    def quota_limit(self, quota_type: QuotaType, metric_tags: Mapping[str, str]) -> float | None:
        return self.flat

    def quota_reset_required(self, quota_type: QuotaType) -> bool:
        self.polls += 1
        reset, self.reset = self.reset, False
        return reset


def test_QUO_13_QUO_12_every_sensor_lookup_polls_for_a_reset() -> None:
    callback = ResettingCallback()
    m = ControllerMutationQuotaManager(QuotaManagerConfig(), Metrics(), T0, callback)
    m.record("User:u", "c", 100, T0)  # burst 11 -> -89
    with pytest.raises(ThrottlingQuotaExceededError):
        m.record("User:u", "c", 1, T0)
    callback.flat, callback.reset = 1e9, True
    with pytest.raises(ThrottlingQuotaExceededError) as info:
        m.record("User:u", "c", 1, T0)  # same instant: still -89 tokens (TB-1), but the new limit
    assert info.value.throttle_time_ms == 0  # was read: -89 / 1e9 per s (it was 89,000 ms)
    m.record("User:u", "c", 1, T0 + 1)  # and a millisecond later the bucket has refilled
    assert callback.polls >= 3


def test_TB_3_mutation_throttle_is_capped_at_int32() -> None:
    managers = create_quota_managers(QuotaConfig(), FakeClock())
    managers.alter(ClientQuotaEntity(DEFAULT, None), "controller_mutation_rate", 0.001)
    managers.controller_mutation.record("User:u", "c", 1e7, T0)
    with pytest.raises(ThrottlingQuotaExceededError) as info:
        managers.controller_mutation.record("User:u", "c", 1, T0)
    assert info.value.throttle_time_ms == INT_MAX


def test_STAT_9_a_younger_throttle_sensor_does_not_orphan_the_quota_sensor() -> None:
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock)
    managers.alter(ClientQuotaEntity(None, "c"), "producer_byte_rate", 100)
    managers.produce.record_and_get_throttle_time_ms("User:u", "c", 1, T0)

    class Quiet:
        def start_throttling(self) -> None: ...
        def end_throttling(self) -> None: ...

    managers.produce.throttle("User:u", "c", 5, Quiet(), T0 + 10)
    managers.expire(T0 + 3600_005)
    managers.produce.record_and_get_throttle_time_ms("User:u", "c", 1, T0 + 3600_006)
    names = {(n.group, n.name) for n in managers.values(T0 + 3600_006)}
    assert ("Produce", "byte-rate") in names


def test_QUO_2_QUO_4_alter_takes_the_principal_name_and_sanitizes_it() -> None:
    managers = create_quota_managers(QuotaConfig(), FakeClock())
    managers.alter(ClientQuotaEntity("alice smith", None), "producer_byte_rate", 10)
    assert managers.produce.quota_limit("User:alice smith", "c") == 10


def test_QUO_4_lone_surrogate_encodes_like_java() -> None:
    assert sanitize("a\ud800b") == "a%3Fb"


def test_QUO_14_a_failing_unmute_does_not_keep_others_muted() -> None:
    class Broken:
        def start_throttling(self) -> None: ...
        def end_throttling(self) -> None:
            raise RuntimeError("socket already closed")

    class Fine:
        ended = 0

        def start_throttling(self) -> None: ...
        def end_throttling(self) -> None:
            self.ended += 1

    queue = ThrottleQueue("Produce", Metrics(), T0)
    fine = Fine()
    queue.throttle(Broken(), 10, T0)
    queue.throttle(fine, 20, T0)
    assert queue.reap(T0 + 20) == 2
    assert fine.ended == 1


async def test_CONN_5_expired_ip_sensors_are_forgotten() -> None:
    clock = FakeClock()
    managers = create_quota_managers(QuotaConfig(), clock)
    managers.connections.add_listener("EXTERNAL")
    managers.alter(ClientQuotaEntity(ip="10.1.1.1"), "connection_creation_rate", 100)
    await managers.connections.inc("EXTERNAL", "10.1.1.1")
    assert managers.connections._ip_sensors
    managers.expire(T0 + 3600_001)
    assert not managers.connections._ip_sensors
