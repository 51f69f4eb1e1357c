"""Property tests of the quota engine (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quotas.controller_mutation_quota_manager import (
    StrictControllerMutationQuota,
    ThrottlingQuotaExceededError,
)
from quotas.sensor import MetricName, Metrics, QuotaViolationError, Sensor
from quotas.stats import MetricConfig, Quota, Rate, TokenBucket
from quotas.throttle import throttle_time_ms
from quotas.throttling import ThrottleQueue
from tests.support.clock import T0

steps = st.lists(
    st.tuples(st.integers(min_value=0, max_value=3000), st.floats(min_value=0.1, max_value=400)),
    min_size=1,
    max_size=80,
)
bucket_configs = st.tuples(
    st.floats(min_value=0.5, max_value=200),  # quota per second
    st.integers(min_value=1, max_value=20),  # samples
    st.sampled_from([500, 1000, 2000]),  # window ms
)


def _max_in_any_span(admitted: list[tuple[int, float]], quota: float, burst: float, drop_last: bool) -> None:
    for i in range(len(admitted)):
        for j in range(i, len(admitted)):
            span_s = (admitted[j][0] - admitted[i][0]) / 1000.0
            amounts = [v for _, v in admitted[i : j + 1]]
            total = sum(amounts[:-1]) if drop_last else sum(amounts)
            assert total <= quota * span_s + burst + 1e-6 * (1 + total)


@settings(max_examples=200)
@given(steps, bucket_configs)
def test_TB_1_token_bucket_admits_at_most_quota_times_span_plus_burst(
    requests: list[tuple[int, float]], params: tuple[float, int, int]
) -> None:
    """A request is admitted when the bucket covers it (refused ones are taken back)."""
    quota, samples, window_ms = params
    config = MetricConfig(samples=samples, time_window_ms=window_ms, quota=Quota(quota))
    bucket = TokenBucket()
    now = T0
    admitted = []
    for gap, amount in requests:
        now += gap
        bucket.record(config, amount, now)
        if bucket.measure(config, now) < 0:
            bucket.record(config, -amount, now)
        else:
            admitted.append((now, amount))
    _max_in_any_span(admitted, quota, TokenBucket.burst(config, quota), drop_last=False)


@settings(max_examples=200)
@given(steps, bucket_configs)
def test_TB_4_strict_quota_admits_at_most_quota_times_span_plus_burst_before_its_last(
    requests: list[tuple[int, float]], params: tuple[float, int, int]
) -> None:
    """KIP-599's strict mode admits a request whenever the bucket is not negative, whatever its size,
    so the bound holds for everything admitted in a span except its last request."""
    quota, samples, window_ms = params
    config = MetricConfig(samples=samples, time_window_ms=window_ms, quota=Quota(quota))
    sensor = Sensor("tokens", config, T0)
    sensor.add(MetricName.of("tokens", "p"), TokenBucket())
    now = T0
    admitted = []
    for gap, amount in requests:
        now += gap
        try:
            StrictControllerMutationQuota(sensor).record(amount, now)
        except ThrottlingQuotaExceededError:
            continue
        admitted.append((now, amount))
    _max_in_any_span(admitted, quota, TokenBucket.burst(config, quota), drop_last=True)


@settings(max_examples=300)
@given(
    st.lists(
        st.tuples(st.integers(0, 2500), st.floats(min_value=1, max_value=5000)), min_size=1, max_size=40
    ),
    st.floats(min_value=1, max_value=1000),
    st.integers(min_value=2, max_value=12),
)
def test_STAT_8_throttle_time_solves_observed_x_window_over_window_plus_x(
    records: list[tuple[int, float]], bound: float, samples: int
) -> None:
    """O x W / (W + X) = T, up to rounding X to whole milliseconds."""
    config = MetricConfig(samples=samples, time_window_ms=1000, quota=Quota(bound))
    sensor = Sensor("rate", config, T0)
    rate = Rate()
    sensor.add(MetricName.of("rate", "p"), rate)
    now = T0
    for gap, value in records:
        now += gap
        try:
            sensor.record(value, now)
        except QuotaViolationError as violation:
            observed, window = violation.value, rate.window_size(config, now)
            x = throttle_time_ms(observed, bound, window)
            assert x >= 0
            exact = (observed - bound) / bound * window
            assert abs(x - exact) <= 0.5 + 1e-9 * exact
            assert observed * window / (window + exact) == pytest.approx(bound, rel=1e-9)


class Channel:
    def __init__(self) -> None:
        self.started = 0
        self.ended = 0

    def start_throttling(self) -> None:
        self.started += 1

    def end_throttling(self) -> None:
        self.ended += 1


@settings(max_examples=300)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("throttle"), st.integers(-5, 5000)),
            st.tuples(st.just("reap"), st.integers(0, 3000)),
        ),
        max_size=60,
    )
)
def test_QUO_14_a_throttled_channel_is_unmuted_exactly_once(ops: list[tuple[str, int]]) -> None:
    queue = ThrottleQueue("Produce", Metrics(), T0)
    now = T0
    channels: list[tuple[Channel, int]] = []
    for op, arg in ops:
        if op == "throttle":
            channel = Channel()
            if queue.throttle(channel, arg, now) is not None:
                channels.append((channel, now + arg))
            else:
                assert (channel.started, channel.ended) == (0, 0)  # no throttle, no mute
        else:
            now += arg
            queue.reap(now)
        for channel, end in channels:
            assert channel.started == 1
            assert channel.ended == (1 if end <= now else 0)
    queue.close()
    assert all((c.started, c.ended) == (1, 1) for c, _ in channels)
