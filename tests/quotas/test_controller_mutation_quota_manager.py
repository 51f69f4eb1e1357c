"""QUO-12, TB-4..TB-6 and the worked examples TB-E3..TB-E5, plus KIP-599's own example."""

from __future__ import annotations

import pytest

from quotas.client_quota_manager import QuotaManagerConfig
from quotas.controller_mutation_quota_manager import (
    ControllerMutationQuotaManager,
    PermissiveControllerMutationQuota,
    StrictControllerMutationQuota,
    ThrottlingQuotaExceededError,
    UnboundedControllerMutationQuota,
)
from quotas.entities import ClientQuotaEntity
from quotas.sensor import MetricName, Metrics, QuotaViolationError, Sensor
from quotas.stats import MetricConfig, Quota, Rate, TokenBucket
from tests.support.clock import T0

PRINCIPAL = "User:ANONYMOUS"


def _manager(quota: float = 10.0, samples: int = 10) -> ControllerMutationQuotaManager:
    m = ControllerMutationQuotaManager(QuotaManagerConfig(num_quota_samples=samples), Metrics(), T0)
    m.update_quota(ClientQuotaEntity("ANONYMOUS", "test-client"), quota)
    return m


def test_TB_4_TB_6_TB_E3_strict_quota_and_throttle_decay() -> None:
    quota = _manager().new_strict_quota(PRINCIPAL, "test-client", T0)
    assert isinstance(quota, StrictControllerMutationQuota)
    quota.record(90, T0)  # 100 -> 10
    assert (quota.throttle_time_ms(T0), quota.is_exceeded()) == (0, False)
    quota.record(90, T0)  # 10 >= 0: accepted whatever its size -> -80
    assert (quota.throttle_time_ms(T0), quota.is_exceeded()) == (0, False)
    with pytest.raises(ThrottlingQuotaExceededError) as info:
        quota.record(90, T0)
    assert info.value.throttle_time_ms == 8000
    assert quota.is_exceeded()
    assert quota.throttle_time_ms(T0) == 8000
    assert quota.throttle_time_ms(T0 + 5000) == 3000  # TB-6: decays by the time waited


def test_TB_5_TB_6_TB_E4_permissive_quota_and_throttle_decay() -> None:
    m = _manager()
    quota = m.new_permissive_quota(PRINCIPAL, "test-client", T0)
    assert isinstance(quota, PermissiveControllerMutationQuota)
    quota.record(90, T0)
    assert quota.throttle_time_ms(T0) == 0
    quota.record(90, T0)
    assert quota.throttle_time_ms(T0) == 8000
    quota.record(90, T0)
    assert quota.throttle_time_ms(T0) == 17000
    assert not quota.is_exceeded()
    assert quota.throttle_time_ms(T0 + 5000) == 12000
    tokens = m._by_sensor["ControllerMutation-ANONYMOUS:test-client"].quota_metric
    assert tokens.measure(T0 + 5000) == -120.0


def test_TB_E5_QUO_12_manager_records_strictly() -> None:
    m = _manager()
    for k in range(10):
        m.record(PRINCIPAL, "test-client", 10, T0 + 1000 * k)
    m.record(PRINCIPAL, "test-client", 110, T0 + 10_000)  # bucket 100 -> -10
    with pytest.raises(ThrottlingQuotaExceededError) as info:
        m.record(PRINCIPAL, "test-client", 110, T0 + 10_000)
    assert info.value.throttle_time_ms == 1000
    m.record(PRINCIPAL, "test-client", 110, T0 + 11_000)  # back at 0: accepted


def test_QUO_12_sensor_holds_tokens_and_an_unbounded_mutation_rate() -> None:
    m = _manager()
    m.record(PRINCIPAL, "test-client", 5, T0)
    sensors = m._by_sensor["ControllerMutation-ANONYMOUS:test-client"]
    names = [metric.metric_name.name for metric in sensors.quota_sensor.metrics]
    assert names == ["tokens", "mutation-rate"]
    assert sensors.quota_sensor.metrics[1].config.quota is None
    assert sensors.quota_sensor.metrics[1].measure(T0) == 5 / 9  # 10 samples: padded to 9 s


def test_QUO_12_burst_is_window_num_times_window_size_times_rate() -> None:
    m = _manager(quota=10.0, samples=11)
    sensors = m._by_sensor.get("ControllerMutation-ANONYMOUS:test-client") or m._sensors_for(
        PRINCIPAL, "test-client", T0
    )
    assert sensors.quota_metric.measure(T0) == 110.0


def test_QUO_12_no_quota_means_unbounded() -> None:
    m = ControllerMutationQuotaManager(QuotaManagerConfig(), Metrics(), T0)
    quota = m.new_strict_quota(PRINCIPAL, "c", T0)
    assert isinstance(quota, UnboundedControllerMutationQuota)
    quota.record(10**9, T0)
    assert (quota.is_exceeded(), quota.throttle_time_ms(T0)) == (False, 0)
    assert isinstance(m.new_permissive_quota(PRINCIPAL, "c", T0), UnboundedControllerMutationQuota)


def test_KIP_599_example_token_bucket_versus_sampled_rate() -> None:
    """Q=5, S=100, W=1 s: 560 mutations at once hold a sampled Rate above quota for 100 s, while the
    token bucket (R=5, B=500) lands at -60 and admits again after 12 s."""
    config = MetricConfig(samples=100, time_window_ms=1000, quota=Quota(5.0))
    rate_sensor = Sensor("rate", config, T0)
    rate_sensor.add(MetricName.of("mutation-rate", "kip599"), Rate())
    with pytest.raises(QuotaViolationError):
        rate_sensor.record(560, T0)
    for t in (1000, 50_000, 99_999):
        with pytest.raises(QuotaViolationError):
            rate_sensor.check_quotas(T0 + t)
    rate_sensor.check_quotas(T0 + 100_000)  # the sample expired

    assert TokenBucket.burst(config, 5.0) == 500.0
    bucket_sensor = Sensor("tokens", config, T0)
    tokens = bucket_sensor.add(MetricName.of("tokens", "kip599"), TokenBucket())
    strict = StrictControllerMutationQuota(bucket_sensor)
    strict.record(560, T0)
    assert tokens.measure(T0) == -60.0
    with pytest.raises(ThrottlingQuotaExceededError) as info:
        strict.record(1, T0 + 11_999)
    assert info.value.throttle_time_ms == 1
    strict.record(1, T0 + 12_000)
