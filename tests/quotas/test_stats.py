"""STAT-1..STAT-9 and TB-1..TB-3: windowed stats, rates, token buckets, sensors, throttle maths."""

from __future__ import annotations

import pytest

from quotas.java import LONG_MAX, java_round
from quotas.sensor import MetricName, Metrics, QuotaViolationError, Sensor
from quotas.stats import Avg, MetricConfig, Quota, Rate, TokenBucket, WindowedCount, WindowedSum
from quotas.throttle import bounded_throttle_time_ms, throttle_time_ms, token_bucket_throttle_time_ms
from tests.support.clock import T0


def test_STAT_1_metric_config_defaults() -> None:
    config = MetricConfig()
    assert (config.samples, config.time_window_ms, config.event_window, config.quota) == (
        2,
        30000,
        LONG_MAX,
        None,
    )
    with pytest.raises(ValueError, match="at least 1"):
        MetricConfig(samples=0)


def test_STAT_2_STAT_3_ring_holds_samples_plus_one_slots() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    stat = WindowedSum()
    for k in range(6):
        stat.record(config, 1.0, T0 + 1000 * k)
    assert len(stat._values) == 3
    # windows align to the first record after the previous window expired, not to clock boundaries
    stat2 = WindowedSum()
    stat2.record(config, 1.0, T0 + 10)
    stat2.record(config, 1.0, T0 + 1009)  # same window (999 ms later)
    stat2.record(config, 1.0, T0 + 1010)  # 1000 ms after the window start: a new sample
    assert stat2._starts == [T0 + 10, T0 + 1010]


def test_STAT_3_event_window_completes_a_sample() -> None:
    config = MetricConfig(samples=3, time_window_ms=1000, event_window=2)
    stat = WindowedCount()
    for _ in range(5):
        stat.record(config, 123.0, T0)
    assert stat._values == [2.0, 2.0, 1.0]
    assert stat.measure(config, T0) == 5.0


def test_STAT_4_purge_resets_old_samples_and_keeps_recent_ones() -> None:
    """SampledStatTest: 2 samples x 1 s: a completed sample is gone 2.5 s later, kept 1.5 s later."""
    config = MetricConfig(samples=2, time_window_ms=1000)
    stat = WindowedSum()
    stat.record(config, 5.0, T0)
    stat.record(config, 7.0, T0 + 1000)
    assert stat.measure(config, T0 + 2500) == 7.0
    assert stat.measure(config, T0 + 3500) == 0.0


def test_STAT_5_R_1_produce_quota_violation() -> None:
    config = MetricConfig(samples=11, time_window_ms=1000, quota=Quota(500.0))
    sensor = Sensor("Produce-:client", config, T0)
    rate = Rate()
    metric = sensor.add(MetricName.of("byte-rate", "Produce"), rate)
    for k in range(10):
        sensor.record(400, T0 + 1000 * k)
        assert metric.measure(T0 + 1000 * k) == 40.0 * (k + 1)
    with pytest.raises(QuotaViolationError) as info:
        sensor.record(2300, T0 + 10500)
    assert info.value.value == 600.0
    assert info.value.bound == 500.0
    window = rate.window_size(config, T0 + 10500)
    assert window == 10500
    assert throttle_time_ms(info.value.value, info.value.bound, window) == 2100


@pytest.mark.parametrize(
    ("at", "window", "rate"),
    [
        (0, 10000, 5.0),
        (999, 10999, 4.545867806164196),
        (1000, 10000, 5.0),
        (1500, 10500, 4.761904761904762),
        (10000, 10000, 5.0),
        (10999, 10999, 4.545867806164196),
        (11000, 10000, 0.0),
    ],
)
def test_STAT_5_R_3_padding(at: int, window: int, rate: float) -> None:
    config = MetricConfig(samples=11, time_window_ms=1000)
    r = Rate()
    r.record(config, 50, T0)
    assert r.window_size(config, T0 + at) == window
    assert r.measure(config, T0 + at) == rate


@pytest.mark.parametrize(("at", "rate"), [(1000, 10.0), (1999, 5.002501250625312), (2000, 0.0)])
def test_STAT_4_R_4_purge(at: int, rate: float) -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    r = Rate()
    r.record(config, 10, T0)
    assert r.measure(config, T0 + at) == rate


def test_STAT_5_R_5_rate_windowing() -> None:
    config = MetricConfig(samples=3, time_window_ms=30_000)
    r = Rate()
    r.record(config, 100, T0)
    r.record(config, 100, T0 + 30_000)
    assert r.window_size(config, T0 + 45_000) == 75_000
    assert r.measure(config, T0 + 45_000) == pytest.approx(200 / 75)


def test_STAT_5_R_6_connection_rate_style_and_unrecord() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000, quota=Quota(20.0))
    sensor = Sensor("rate", config, T0)
    rate = Rate()
    metric = sensor.add(MetricName.of("connection-accept-rate", "conn"), rate)
    for k in range(20):
        sensor.record(1.0, T0)
        assert metric.measure(T0) == float(k + 1)
    with pytest.raises(QuotaViolationError) as info:
        sensor.record(1.0, T0)
    assert info.value.value == 21.0
    assert bounded_throttle_time_ms(21.0, 20.0, rate.window_size(config, T0), 1000) == 50
    sensor.record(-1.0, T0, check=False)
    assert metric.measure(T0) == 20.0


def test_STAT_5_window_is_at_least_1ms() -> None:
    config = MetricConfig(samples=1, time_window_ms=1000)
    r = Rate()
    r.record(config, 3, T0)
    assert r.window_size(config, T0) == 1
    assert r.measure(config, T0) == 3000.0


@pytest.mark.parametrize(
    ("quota", "value", "ok"),
    [
        (Quota(10.0), 10.0, True),
        (Quota(10.0), 10.000001, False),
        (Quota(10.0, upper=False), 10.0, True),
        (Quota(10.0, upper=False), 9.0, False),
        (Quota(10.0), float("nan"), False),
        (Quota(10.0, upper=False), float("nan"), False),
    ],
)
def test_STAT_6_quota_acceptable(quota: Quota, value: float, ok: bool) -> None:
    assert quota.acceptable(value) is ok


def test_STAT_7_record_is_not_rolled_back_and_parents_record_too() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000, quota=Quota(1.0))
    metrics = Metrics(config)
    parent, _ = metrics.sensor("parent", T0, MetricConfig(samples=2, time_window_ms=1000))
    parent_sum = parent.add(MetricName.of("total", "g"), WindowedSum())
    child, created = metrics.sensor("child", T0, parents=[parent])
    assert created
    child_rate = child.add(MetricName.of("rate", "g"), Rate())
    with pytest.raises(QuotaViolationError):
        child.record(5.0, T0)
    assert child_rate.measure(T0) == 5.0  # kept
    child.record(1.0, T0, check=False)
    assert parent_sum.measure(T0) == 1.0  # the parent was not reached by the failed record


@pytest.mark.parametrize(
    ("value", "bound", "samples", "expected"),
    [(100, 50, 3, 2000), (100, 50, 10, 9000), (50, 50, 3, 0), (40, 50, 3, -400)],
)
def test_STAT_8_quota_utils_throttle_time(value: float, bound: float, samples: int, expected: int) -> None:
    window = (samples - 1) * 1000  # the window of a fresh sensor at one instant
    assert throttle_time_ms(value, bound, window) == expected


@pytest.mark.parametrize(
    ("value", "bound", "samples", "expected"), [(55, 50, 2, 100), (100, 50, 10, 500), (50, 50, 2, 0)]
)
def test_STAT_8_bounded_throttle_time(value: float, bound: float, samples: int, expected: int) -> None:
    assert bounded_throttle_time_ms(value, bound, (samples - 1) * 1000, 500) == expected


def test_STAT_8_zero_bound_is_infinite_and_capped_when_bounded() -> None:
    assert throttle_time_ms(1.0, 0.0, 1000) == LONG_MAX
    assert bounded_throttle_time_ms(1.0, 0.0, 1000, 1000) == 1000


def test_STAT_8_throttle_solves_the_wait_equation() -> None:
    value, bound, window = 600.0, 500.0, 10500
    x = throttle_time_ms(value, bound, window)
    assert value * window / (window + x) == pytest.approx(bound, rel=1e-3)


def test_STAT_9_sensor_expiry_is_strictly_after_the_inactivity_time() -> None:
    metrics = Metrics()
    sensor, _ = metrics.sensor("s", T0, inactive_expiry_ms=1000)
    sensor.add(MetricName.of("sum", "g"), WindowedSum())
    assert metrics.expire(T0 + 1000) == []
    sensor.record(1.0, T0 + 500)  # a record resets the clock
    assert metrics.expire(T0 + 1500) == []
    assert metrics.expire(T0 + 1501) == ["s"]
    recreated, created = metrics.sensor("s", T0 + 1600)
    assert created
    assert recreated is not sensor
    assert metrics.get_sensor("never-expires") is None


def test_STAT_9_sensors_without_expiry_stay() -> None:
    metrics = Metrics()
    metrics.sensor("forever", T0)
    assert metrics.expire(T0 + 10**9) == []


def test_avg_of_recorded_values() -> None:
    config = MetricConfig(samples=2, time_window_ms=1000)
    avg = Avg()
    assert avg.measure(config, T0) != avg.measure(config, T0)  # NaN: nothing recorded
    avg.record(config, 10.0, T0)
    avg.record(config, 20.0, T0 + 10)
    assert avg.measure(config, T0 + 10) == 15.0


# -- token bucket --------------------------------------------------------------------------


def _bucket_config(quota: float, samples: int = 10, window_ms: int = 2000) -> MetricConfig:
    return MetricConfig(samples=samples, time_window_ms=window_ms, quota=Quota(quota))


def test_TB_1_TB_E1_record() -> None:
    config = _bucket_config(5.0)
    tb = TokenBucket()
    assert TokenBucket.burst(config, 5.0) == 100.0
    assert tb.measure(config, T0) == 100.0
    tb.record(config, 60, T0)
    assert tb.measure(config, T0) == 40.0
    tb.record(config, 5, T0 + 2000)
    assert tb.measure(config, T0 + 2000) == 45.0
    tb.record(config, 60, T0 + 4000)
    assert tb.measure(config, T0 + 4000) == -5.0


def test_TB_1_TB_E2_unrecord_never_exceeds_burst() -> None:
    config = _bucket_config(5.0)
    tb = TokenBucket()
    assert tb.measure(config, T0) == 100.0
    tb.record(config, -60, T0)
    assert tb.measure(config, T0) == 100.0
    tb.record(config, 60, T0 + 2000)
    assert tb.measure(config, T0 + 2000) == 40.0
    tb.record(config, -60, T0 + 4000)
    assert tb.measure(config, T0 + 4000) == 100.0


def test_TB_1_no_quota_means_unlimited_and_no_recording() -> None:
    config = MetricConfig(samples=10, time_window_ms=1000)
    tb = TokenBucket()
    tb.record(config, 10**6, T0)
    assert tb.measure(config, T0) == float(LONG_MAX)
    assert tb.tokens == 0.0


def test_TB_1_quota_change_takes_effect_at_next_refill() -> None:
    tb = TokenBucket()
    assert tb.measure(_bucket_config(5.0), T0) == 100.0
    assert tb.measure(_bucket_config(1.0), T0) == 20.0  # the new burst clamps


def test_TB_2_PD_9_new_bucket_starts_full_whatever_the_clock() -> None:
    config = _bucket_config(5.0)
    assert TokenBucket().measure(config, 0) == 100.0
    assert TokenBucket().measure(config, T0) == 100.0


@pytest.mark.parametrize(("tokens", "throttle"), [(0.0, 0), (-5.0, 500), (-10.0, 1000), (-0.04, 4)])
def test_TB_3_TB_E6_throttle_time(tokens: float, throttle: int) -> None:
    assert token_bucket_throttle_time_ms(tokens, 10.0) == throttle


def test_TB_3_violation_only_below_zero() -> None:
    config = MetricConfig(samples=1, time_window_ms=1000, quota=Quota(10.0))
    sensor = Sensor("tokens", config, T0)
    sensor.add(MetricName.of("tokens", "ControllerMutation"), TokenBucket())
    sensor.record(10.0, T0)  # 10 -> 0: not violated
    with pytest.raises(QuotaViolationError) as info:
        sensor.record(0.5, T0)
    assert info.value.value == -0.5
    assert info.value.bound == 10.0


def test_C_3_java_round() -> None:
    assert [java_round(x) for x in (2.5, -2.5, 0.49999999999999994, 1.4999, -0.5)] == [3, -2, 0, 1, 0]
