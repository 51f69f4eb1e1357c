"""Mutation quotas (KIP-599): Kafka's ``ControllerMutationQuotaManager`` and its strict and permissive
quotas (docs/rules.md QUO-12, TB-4..TB-6).

Each (user, client-id) sensor holds a ``mutation-rate`` rate (no quota) and a ``tokens`` token bucket
bounded by ``controller_mutation_rate``, with burst ``controller.quota.window.num x
controller.quota.window.size.seconds x rate``. Here a mutation is an admin change (subscriptions,
client quotas), recorded as the number of entities changed.

- Strict: checked before the mutation; an empty bucket rejects it with THROTTLING_QUOTA_EXCEEDED and
  the time until the bucket is back at 0. The first mutation while the bucket is not negative is
  accepted whatever its size.
- Permissive: recorded, never rejected; the response carries the throttle time.
Both remember their last throttle, which decays by the time already waited.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotas.callback import ClientQuotaCallback
from quotas.client_quota_manager import ClientQuotaManager, QuotaManagerConfig
from quotas.entities import QuotaType
from quotas.errors import THROTTLING_QUOTA_EXCEEDED, QuotaError
from quotas.java import INT_MAX
from quotas.sensor import MetricName, Metrics, QuotaViolationError, Sensor
from quotas.stats import MetricConfig, Rate, TokenBucket
from quotas.throttle import token_bucket_throttle_time_ms

__all__ = [
    "ControllerMutationQuota",
    "ControllerMutationQuotaManager",
    "PermissiveControllerMutationQuota",
    "StrictControllerMutationQuota",
    "ThrottlingQuotaExceededError",
    "UnboundedControllerMutationQuota",
]


class ThrottlingQuotaExceededError(QuotaError):
    """THROTTLING_QUOTA_EXCEEDED (89): the mutation was refused; retry after ``throttle_time_ms``."""

    error_code = THROTTLING_QUOTA_EXCEEDED

    def __init__(self, throttle_time_ms: int) -> None:
        super().__init__(f"The throttling quota has been exceeded; retry after {throttle_time_ms} ms.")
        self.throttle_time_ms = throttle_time_ms


def _violation_throttle_ms(violation: QuotaViolationError) -> int:
    """TB-3, capped at the int32 the response field holds."""
    return min(token_bucket_throttle_time_ms(violation.value, violation.bound), INT_MAX)


class ControllerMutationQuota:
    """A quota object for one request's mutations; remembers its last throttle (TB-6)."""

    def __init__(self) -> None:
        self.last_throttle_ms = 0
        self.last_recorded_ms = 0

    def is_exceeded(self) -> bool:
        return False

    def record(self, permits: float, now_ms: int) -> None:
        raise NotImplementedError

    def throttle_time_ms(self, now_ms: int) -> int:
        """``max(0, last throttle - time since it was observed)``."""
        return max(0, self.last_throttle_ms - (now_ms - self.last_recorded_ms))


class UnboundedControllerMutationQuota(ControllerMutationQuota):
    """No mutation quota applies: nothing is recorded, nothing is exceeded."""

    def record(self, permits: float, now_ms: int) -> None:
        return None


class StrictControllerMutationQuota(ControllerMutationQuota):
    """Check, then record; reject with ThrottlingQuotaExceededError when the bucket is negative."""

    def __init__(self, sensor: Sensor) -> None:
        super().__init__()
        self._sensor = sensor

    def is_exceeded(self) -> bool:
        return self.last_throttle_ms > 0

    def record(self, permits: float, now_ms: int) -> None:
        try:
            self._sensor.check_quotas(now_ms)
        except QuotaViolationError as violation:
            self.last_throttle_ms = _violation_throttle_ms(violation)
            self.last_recorded_ms = now_ms
            raise ThrottlingQuotaExceededError(self.last_throttle_ms) from violation
        self._sensor.record(permits, now_ms, check=False)


class PermissiveControllerMutationQuota(ControllerMutationQuota):
    """Record, then check; never rejects, remembers the throttle."""

    def __init__(self, sensor: Sensor) -> None:
        super().__init__()
        self._sensor = sensor

    def record(self, permits: float, now_ms: int) -> None:
        try:
            self._sensor.record(permits, now_ms)
        except QuotaViolationError as violation:
            self.last_throttle_ms = _violation_throttle_ms(violation)
            self.last_recorded_ms = now_ms


class ControllerMutationQuotaManager(ClientQuotaManager):
    """CONTROLLER_MUTATION quotas: token buckets per (user, client-id) entity."""

    def __init__(
        self,
        config: QuotaManagerConfig,
        metrics: Metrics,
        now_ms: int,
        callback: ClientQuotaCallback | None = None,
    ) -> None:
        super().__init__(QuotaType.CONTROLLER_MUTATION, config, metrics, now_ms, callback)

    def new_strict_quota(self, principal: str, client_id: str, now_ms: int) -> ControllerMutationQuota:
        if not self.quotas_enabled:
            return UnboundedControllerMutationQuota()
        return StrictControllerMutationQuota(self._sensors_for(principal, client_id, now_ms).quota_sensor)

    def new_permissive_quota(self, principal: str, client_id: str, now_ms: int) -> ControllerMutationQuota:
        if not self.quotas_enabled:
            return UnboundedControllerMutationQuota()
        return PermissiveControllerMutationQuota(self._sensors_for(principal, client_id, now_ms).quota_sensor)

    def record(self, principal: str, client_id: str, permits: float, now_ms: int) -> None:
        """Strictly record ``permits`` mutations (TB-4); raise ThrottlingQuotaExceededError."""
        self.new_strict_quota(principal, client_id, now_ms).record(permits, now_ms)

    def _throttle_time_ms(self, violation: QuotaViolationError, now_ms: int) -> int:
        return _violation_throttle_ms(violation)

    def _add_quota_metrics(self, sensor: Sensor, tags: Mapping[str, str]) -> None:
        group = self.quota_type.value
        sensor.add(MetricName.of("tokens", group, tags), TokenBucket())
        unbounded = MetricConfig(samples=sensor.config.samples, time_window_ms=sensor.config.time_window_ms)
        sensor.add(MetricName.of("mutation-rate", group, tags), Rate(), unbounded)
