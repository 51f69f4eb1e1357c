"""Request-time quotas (KIP-124): Kafka's ``ClientRequestQuotaManager`` (docs/rules.md QUO-11).

Handler and network time are recorded as a percentage of one second of one thread (1 ms -> 0.1);
``request_percentage`` is the allowed percentage. The throttle is capped at one quota window. Internal
traffic is recorded only into the shared, never-throttled ``exempt-request-time`` rate.
"""

from __future__ import annotations

from typing import Final

from quotas.callback import ClientQuotaCallback
from quotas.client_quota_manager import ClientQuotaManager, QuotaManagerConfig
from quotas.entities import QuotaType
from quotas.sensor import MetricName, Metrics
from quotas.stats import MetricConfig, Rate

__all__ = ["NANOS_TO_PERCENTAGE_PER_SECOND", "ClientRequestQuotaManager", "nanos_to_percentage"]

NANOS_TO_PERCENTAGE_PER_SECOND: Final = 100.0 / 1_000_000_000
EXEMPT_SENSOR_NAME: Final = "exempt-Request"


def nanos_to_percentage(nanos: int) -> float:
    """Thread time as a percentage of one second: ``nanos x 100 / 1e9`` (4 ms -> 0.4)."""
    return nanos * NANOS_TO_PERCENTAGE_PER_SECOND


class ClientRequestQuotaManager(ClientQuotaManager):
    """The REQUEST quota: time spent on a client's requests, bounded throttle."""

    rate_metric_name = "request-time"

    def __init__(
        self,
        config: QuotaManagerConfig,
        metrics: Metrics,
        now_ms: int,
        callback: ClientQuotaCallback | None = None,
    ) -> None:
        super().__init__(QuotaType.REQUEST, config, metrics, now_ms, callback)
        self.max_throttle_time_ms = config.window_ms
        exempt, created = metrics.sensor(
            EXEMPT_SENSOR_NAME,
            now_ms,
            MetricConfig(samples=config.num_quota_samples, time_window_ms=config.window_ms),
        )
        if created:
            exempt.add(MetricName.of("exempt-request-time", QuotaType.REQUEST.value), Rate())
        self.exempt_sensor = exempt

    def record_request_time(self, principal: str, client_id: str, thread_time_nanos: int, now_ms: int) -> int:
        """Record handler time; the (bounded) throttle time if the quota is now violated."""
        return self.record_and_get_throttle_time_ms(
            principal, client_id, nanos_to_percentage(thread_time_nanos), now_ms
        )

    def record_network_time(self, principal: str, client_id: str, nanos: int, now_ms: int) -> None:
        """Network-thread time, added after the response without a quota check."""
        if self.quotas_enabled:
            sensors = self._sensors_for(principal, client_id, now_ms)
            sensors.quota_sensor.record(nanos_to_percentage(nanos), now_ms, check=False)

    def record_exempt(self, nanos: int, now_ms: int) -> None:
        """Internal traffic: counted in ``exempt-request-time``, never throttled."""
        if self.quotas_enabled:
            self.exempt_sensor.record(nanos_to_percentage(nanos), now_ms, check=False)
